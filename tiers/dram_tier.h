// The dram tier: node DRAM as memfd arenas, one per NUMA node, that local clients map.
#pragma once

#include <memory>
#include <vector>

#include "tiers/arena_tier.h"
#include "tiers/memfd_arena.h"

namespace tierpool {

struct DramTierConfig {
  std::uint64_t capacity = 1024ull * 1024 * 1024;  // split evenly across NUMA nodes
  std::uint64_t alignment = 4096;
  std::uint32_t first_arena_id = 1;  // arena ids are unique across all tiers
  bool populate = true;
  Status validate() const;
};

class DramTier final : public ArenaTier {
 public:
  static Result<std::unique_ptr<DramTier>> Create(const DramTierConfig& config);

 private:
  DramTier() : ArenaTier(TierKind::kDram, /*level=*/1, "memfd/libnuma") {}
  std::vector<std::unique_ptr<MemfdArena>> arenas_;
};

}  // namespace tierpool
