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
// A `retained` object never ends with its copies only in tiers that do not keep it alone
// (Tier::keeps_retained_alone: the remote tier with one replica). Moving into such a tier, it
// first gets a *guard* copy in the nearest tier below that does (local nvme), kept beside the
// remote one; with no such tier it stays where it is. Step 1 never drops the last such copy
// (ObjectIndex::SetNeedsGuard). "Below" follows the store's ranks (StoreConfig::spill_order).
//
// Locking: called with the store's mutex held; does not block. Each step visits only eligible
// candidates (moving or quarantined copies are not in the candidate sets), so a search costs
// O(victims), never O(objects). A pin does not refresh the sets (it is on every get's path): a
// copy pinned since its object was last refreshed may still be listed, and the store checks
// each decision as it applies it (ObjectStore::ApplyLocked), as compaction checks each copy.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "store/object_index.h"
#include "tiers/tier.h"

namespace tierpool {

struct PlacementDecision {
  enum class Action : std::uint8_t {
    kDropCopy,  // free this copy; the object has another
    kMoveDown,  // copy it to `to` (after a guard copy where one is needed), then free this copy
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
  // tiers: indexed by TierKind, nullptr where absent; ranks: each tier's place (0: top).
  // drop_cache_on_spill: CachePolicy::kDrop.
  PlacementPolicy(const std::array<Tier*, kTierKindCount>& tiers,
                  const std::array<std::uint32_t, kTierKindCount>& ranks, bool drop_cache_on_spill)
      : tiers_(tiers), ranks_(ranks), drop_cache_on_spill_(drop_cache_on_spill) {}

  // The nearest tier below `tier` that exists and accepts writes now (skipping those that do
  // not, and `except`); nullptr if none.
  Tier* Below(TierKind tier, std::optional<TierKind> except = std::nullopt) const;

  // Decisions that free at least `bytes` of `pool`'s room in `tier` (tiers/tier.h: a tier that
  // is not partitioned has one pool), cheapest first, at most max_decisions. Copies pinned now
  // are passed over (a pin may still come before the caller acts: it checks again).
  // instant_only: only steps 1 and 3 (no transfers), as when the caller cannot wait.
  // skip: objects whose placement is not the policy's (hbm copies a registered plan owns).
  std::vector<PlacementDecision> MakeRoom(
      ObjectIndex& index, TierKind tier, std::uint32_t pool, std::uint64_t bytes, bool instant_only,
      std::size_t max_decisions,
      const std::function<bool(const StoredObject&)>& skip = nullptr) const;

  // How an object leaving `from` for `to` stays safe: kNotNeeded (a cache object, a `to` that
  // keeps it alone, or a copy elsewhere that does), kIn (a guard copy in *guard first), or
  // kNone (no tier could take one: it stays).
  enum class Guard : std::uint8_t { kNotNeeded, kIn, kNone };
  Guard GuardFor(const StoredObject& obj, TierKind from, const Tier& to, TierKind* guard) const;

  // Bytes to free so that `pool`'s room in `tier` gets from above its high watermark to its low
  // one (0 when it is not above its high watermark). `leaving`: bytes already on their way out.
  std::uint64_t OverWatermark(TierKind tier, std::uint32_t pool, std::uint64_t leaving) const;

 private:
  std::uint32_t rank(TierKind k) const { return ranks_[static_cast<int>(k)]; }
  std::array<Tier*, kTierKindCount> tiers_;
  std::array<std::uint32_t, kTierKindCount> ranks_;
  bool drop_cache_on_spill_;
};

}  // namespace tierpool
