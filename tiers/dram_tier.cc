#include "tiers/dram_tier.h"

#include <string>

#include "common/logging.h"
#include "common/posix.h"
#include "common/units.h"

namespace tierpool {

Status DramTierConfig::validate() const {
  if (capacity == 0) return Status::InvalidArgument("dram capacity must be > 0");
  if (alignment == 0 || (alignment & (alignment - 1)) != 0) {
    return Status::InvalidArgument("dram alignment must be a power of two");
  }
  const std::uint64_t unit = arena_unit();
  const char* below = unit == alignment ? " below one extent" : " below one huge page (2 MiB)";
  if (capacity < unit) return Status::InvalidArgument(std::string("dram capacity") + below);
  std::uint64_t pooled = 0;
  for (std::uint64_t p : pools) {
    if (p != 0 && p < unit) return Status::InvalidArgument(std::string("a dram pool") + below);
    pooled += p / unit * unit;
  }
  if (pooled + unit > capacity) {
    return Status::InvalidArgument("the namespace pools (" + FormatBytes(pooled) +
                                   ") leave the shared dram pool no room in " +
                                   FormatBytes(capacity));
  }
  return Status::Ok();
}

namespace {

// What backs an arena, for the log: huge pages from the pool, transparent ones as far as the
// kernel found them (`huge_bytes`, under the kernel's `setting`), or 4 KiB pages and how to get
// larger ones.
std::string PagesNote(const std::string& setting, std::uint64_t huge_bytes,
                      const DramTierConfig& config) {
  if (config.huge_pages) return " of 2 MiB huge pages";
  if (!ShmemHugePagesOnAdvice(setting)) {
    return " of 4 KiB pages (2 MiB ones: --huge-pages, or transparent huge pages with "
           "/sys/kernel/mm/transparent_hugepage/shmem_enabled set to advise)";
  }
  if (!config.populate) return " (transparent huge pages allowed: shmem_enabled " + setting + ")";
  return ", " + FormatBytes(huge_bytes) + " of it in transparent 2 MiB pages (shmem_enabled " +
         setting + ")";
}

}  // namespace

Status DramTier::AddArena(const std::string& name, std::uint32_t id, std::uint64_t size,
                          int numa_node, std::uint32_t pool, const DramTierConfig& config) {
  auto arena = MemfdArena::Create({.name = name,
                                   .size = size,
                                   .numa_node = numa_node,
                                   .lock_pages = false,
                                   .populate = config.populate,
                                   .huge_pages = config.huge_pages});
  if (!arena.ok()) return arena.status();
  AddRegion(id, (*arena)->base(), size, (*arena)->fd(), (*arena)->read_only_fd(), numa_node, pool,
            config.alignment);
  // Each read once (the kernel's setting, /proc/self/smaps), and smaps only where transparent
  // pages could be there.
  const std::string setting = ShmemHugePagesSetting();
  const bool transparent = !config.huge_pages && config.populate && ShmemHugePagesOnAdvice(setting);
  const std::uint64_t huge_bytes = transparent ? (*arena)->HugeMappedBytes() : 0;
  if (!transparent || huge_bytes < size / 2) every_arena_transparent_ = false;
  spdlog::info("dram arena {}: {}{}", name, FormatBytes(size),
               PagesNote(setting, huge_bytes, config));
  arenas_.push_back(std::move(arena).value());
  return Status::Ok();
}

Result<std::unique_ptr<DramTier>> DramTier::Create(const DramTierConfig& config) {
  TIERPOOL_RETURN_IF_ERROR(config.validate());
  std::unique_ptr<DramTier> tier(new DramTier(config.huge_pages));
  tier->set_thread_caches(config.thread_caches);
  std::uint32_t id = config.first_arena_id;
  const std::uint64_t unit = config.arena_unit();
  std::uint64_t shared = config.capacity / unit * unit;
  for (std::size_t p = 0; p < config.pools.size(); ++p) {
    const std::uint64_t size = config.pools[p] / unit * unit;
    if (size == 0) continue;
    shared -= size;
    const auto pool = static_cast<std::uint32_t>(p + 1);
    TIERPOOL_RETURN_IF_ERROR(
        tier->AddArena("tierpool-dram-pool" + std::to_string(pool), id++, size, -1, pool, config));
  }
  std::vector<int> nodes = NumaNodes();
  // Even split, rounded down to the unit; the last node takes the remainder.
  std::uint64_t per_node = shared / nodes.size() / unit * unit;
  std::uint64_t left = shared;
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    std::uint64_t size = i + 1 == nodes.size() ? left : per_node;
    if (size == 0) continue;
    left -= size;
    TIERPOOL_RETURN_IF_ERROR(tier->AddArena("tierpool-dram-node" + std::to_string(nodes[i]), id++,
                                            size, nodes[i], kSharedPool, config));
  }
  // Transparent huge pages (tiers/memfd_arena.h), said as --huge-pages' are in `tierpool stat`
  // where the kernel gave them for at least half of every arena.
  if (tier->every_arena_transparent_) tier->set_backend("memfd/libnuma, transparent 2 MiB pages");
  return tier;
}

}  // namespace tierpool
