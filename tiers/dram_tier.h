// The dram tier: node DRAM as memfd arenas that local clients map: the shared pool's, one per
// NUMA node, and one per namespace pool (tiers/tier.h, kSharedPool).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "tiers/arena_tier.h"
#include "tiers/memfd_arena.h"

namespace tierpool {

struct DramTierConfig {
  // The whole tier: the namespace pools' arenas first, the rest split evenly across NUMA nodes
  // as the shared pool.
  std::uint64_t capacity = 1024ull * 1024 * 1024;
  // Bytes of each namespace pool (pool i + 1), each one arena of its own; 0: the pool has none.
  std::vector<std::uint64_t> pools;
  std::uint64_t alignment = 4096;
  std::uint32_t first_arena_id = 1;  // arena ids are unique across all tiers
  bool populate = true;
  // Arenas of 2 MiB huge pages (MemfdArenaOptions::huge_pages): each arena's size is then
  // rounded down to a multiple of 2 MiB.
  bool huge_pages = false;
  // Extents up to 64 KiB freed on a thread wait for that thread's next put of their length
  // (ArenaTier's per-thread caches): puts from several threads share no allocator lock.
  bool thread_caches = true;
  Status validate() const;
  // Arena sizes are multiples of this: the extent alignment, and 2 MiB with huge pages.
  std::uint64_t arena_unit() const {
    return huge_pages && alignment < kHugePageBytes ? kHugePageBytes : alignment;
  }
};

class DramTier final : public ArenaTier {
 public:
  static Result<std::unique_ptr<DramTier>> Create(const DramTierConfig& config);

 private:
  explicit DramTier(bool huge_pages)
      : ArenaTier(TierKind::kDram, /*level=*/1,
                  huge_pages ? "memfd/libnuma, 2 MiB pages" : "memfd/libnuma") {}
  // One memfd arena as a region of `pool`.
  Status AddArena(const std::string& name, std::uint32_t id, std::uint64_t size, int numa_node,
                  std::uint32_t pool, const DramTierConfig& config);
  std::vector<std::unique_ptr<MemfdArena>> arenas_;
  // Whether the kernel gave every arena so far at least half its bytes in transparent huge
  // pages (AddArena): the backend `tierpool stat` names.
  bool every_arena_transparent_ = true;
};

}  // namespace tierpool
