#include "tiers/dram_tier.h"

#include "common/logging.h"
#include "common/units.h"

namespace tierpool {

Status DramTierConfig::validate() const {
  if (capacity == 0) return Status::InvalidArgument("dram capacity must be > 0");
  if (alignment == 0 || (alignment & (alignment - 1)) != 0) {
    return Status::InvalidArgument("dram alignment must be a power of two");
  }
  if (capacity < alignment) return Status::InvalidArgument("dram capacity below one extent");
  return Status::Ok();
}

Result<std::unique_ptr<DramTier>> DramTier::Create(const DramTierConfig& config) {
  TIERPOOL_RETURN_IF_ERROR(config.validate());
  std::unique_ptr<DramTier> tier(new DramTier());
  std::vector<int> nodes = NumaNodes();
  // Even split, rounded down to the alignment; the last node takes the remainder.
  std::uint64_t per_node = config.capacity / nodes.size() / config.alignment * config.alignment;
  std::uint64_t left = config.capacity / config.alignment * config.alignment;
  std::uint32_t id = config.first_arena_id;
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    std::uint64_t size = i + 1 == nodes.size() ? left : per_node;
    if (size == 0) continue;
    left -= size;
    auto arena = MemfdArena::Create({.name = "tierpool-dram-node" + std::to_string(nodes[i]),
                                     .size = size,
                                     .numa_node = nodes[i],
                                     .lock_pages = false,
                                     .populate = config.populate});
    if (!arena.ok()) return arena.status();
    tier->AddRegion(id++, (*arena)->base(), size, (*arena)->fd(), nodes[i], config.alignment);
    spdlog::info("dram arena on NUMA node {}: {}", nodes[i], FormatBytes(size));
    tier->arenas_.push_back(std::move(arena).value());
  }
  return tier;
}

}  // namespace tierpool
