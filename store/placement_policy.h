// The placement policy: decides what leaves a tier when it needs room or sits above its high
// watermark. It reads the index and the tiers and returns decisions; it never copies bytes,
// never waits, and never changes the index (the ObjectStore carries its decisions out).
//
// Order of preference when a tier needs room, least recently used first within each step:
//   1. drop a copy that has another copy elsewhere (no transfer: a clean copy below survives);
//   2. move a copy down to the next tier that exists and can take writes (a `cache` object
//      under CachePolicy::kDrop, leaving dram, is dropped instead);
//   3. with nowhere to move, drop a `cache` object (a miss is recomputed).
// `retained` objects are never dropped. Objects a plan covers are the executor's to move.
//
// Locking: called with the store's mutex held; does not block. Each step visits only eligible
// candidates (pinned, moving or quarantined copies are not in the candidate sets), so a search
// costs O(victims), never O(objects).
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <vector>

#include "store/object_index.h"
#include "tiers/tier.h"

namespace tierpool {

struct PlacementDecision {
  enum class Action : std::uint8_t {
    kDropCopy,  // free this copy; the object has another
    kMoveDown,  // copy it to `to`, then free this copy
    kEvict,     // drop the whole `cache` object
  };
  Action action = Action::kDropCopy;
  std::uint64_t object_id = 0;
  TierKind from = TierKind::kDram;
  TierKind to = TierKind::kDram;
  std::uint64_t bytes = 0;  // what it frees in `from`
};

class PlacementPolicy {
 public:
  // tiers: indexed by TierKind, nullptr where absent. drop_cache_on_spill: CachePolicy::kDrop.
  PlacementPolicy(const std::array<Tier*, kTierKindCount>& tiers, bool drop_cache_on_spill)
      : tiers_(tiers), drop_cache_on_spill_(drop_cache_on_spill) {}

  // The nearest tier below `tier` that exists and accepts writes now (skipping those that do
  // not); nullptr if none.
  Tier* Below(TierKind tier) const;

  // Decisions that free at least `bytes` of `pool`'s room in `tier` (tiers/tier.h: a tier that
  // is not partitioned has one pool), cheapest first, at most max_decisions.
  // instant_only: only steps 1 and 3 (no transfers), as when the caller cannot wait.
  // skip: objects whose placement is not the policy's (hbm copies a registered plan owns).
  std::vector<PlacementDecision> MakeRoom(
      ObjectIndex& index, TierKind tier, std::uint32_t pool, std::uint64_t bytes, bool instant_only,
      std::size_t max_decisions,
      const std::function<bool(const StoredObject&)>& skip = nullptr) const;

  // Bytes to free so that `pool`'s room in `tier` gets from above its high watermark to its low
  // one (0 when it is not above its high watermark). `leaving`: bytes already on their way out.
  std::uint64_t OverWatermark(TierKind tier, std::uint32_t pool, std::uint64_t leaving) const;

 private:
  std::array<Tier*, kTierKindCount> tiers_;
  bool drop_cache_on_spill_;
};

}  // namespace tierpool
