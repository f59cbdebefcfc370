#include "store/placement_policy.h"

#include <limits>

namespace tierpool {

Tier* PlacementPolicy::Below(TierKind tier, std::optional<TierKind> except) const {
  if (tiers_[static_cast<int>(tier)] == nullptr) return nullptr;
  // A tier below that cannot take writes now (a degraded nvme, a remote tier short of peers)
  // is passed over for the one under it.
  Tier* best = nullptr;
  for (Tier* t : tiers_) {
    if (t == nullptr || rank(t->kind()) <= rank(tier) || t->capacity() == 0) continue;
    if (except == t->kind()) continue;
    if (best != nullptr && rank(t->kind()) >= rank(best->kind())) continue;
    if (!t->CheckWritable().ok()) continue;
    best = t;
  }
  return best;
}

PlacementPolicy::Guard PlacementPolicy::GuardFor(const StoredObject& obj, TierKind from,
                                                 const Tier& to, TierKind* guard) const {
  if (obj.meta.durability != Durability::kRetained || to.keeps_retained_alone()) {
    return Guard::kNotNeeded;
  }
  for (int k = 0; k < kTierKindCount; ++k) {
    const Tier* t = tiers_[k];
    if (static_cast<TierKind>(k) != from && t != nullptr && t->keeps_retained_alone() &&
        obj.copies[k].present) {
      return Guard::kNotNeeded;  // it has one already
    }
  }
  // The nearest tier below `from`, other than `to`, that keeps it alone and takes writes now.
  for (Tier* t = Below(from, to.kind()); t != nullptr; t = Below(t->kind(), to.kind())) {
    if (t->keeps_retained_alone()) {
      *guard = t->kind();
      return Guard::kIn;
    }
  }
  return Guard::kNone;
}

std::vector<PlacementDecision> PlacementPolicy::MakeRoom(
    ObjectIndex& index, TierKind tier, std::uint32_t pool, std::uint64_t bytes, bool instant_only,
    std::size_t max_decisions, const std::function<bool(const StoredObject&)>& skip) const {
  std::vector<PlacementDecision> out;
  std::uint64_t freed = 0;
  auto done = [&] { return freed >= bytes || out.size() >= max_decisions; };
  auto take = [&](PlacementDecision d) {
    freed += d.bytes;
    out.push_back(d);
    return done();
  };
  auto footprint = [&](const StoredObject& obj) { return obj.copy(tier).extent.length; };
  if (bytes == 0) return out;
  // Decisions are not applied until the caller acts, so each object is taken at most once.
  std::vector<std::uint64_t> taken;
  auto is_taken = [&](std::uint64_t id) {
    for (auto t : taken) {
      if (t == id) return true;
    }
    return false;
  };
  // A pinned copy stays where it is (ApplyLocked would refuse it), so it is passed over here:
  // taken, it would use up the decision that the next copy could have made.
  auto skipped = [&](const StoredObject& obj) {
    return obj.copy(tier).pins.load(std::memory_order_relaxed) > 0 || (skip && skip(obj));
  };
  index.ForEachCandidate(tier, pool, CandidateSet::kRedundant, [&](StoredObject& obj) {
    if (skipped(obj)) return false;
    taken.push_back(obj.id);
    return take({PlacementDecision::Action::kDropCopy, obj.id, tier, tier, footprint(obj)});
  });
  if (done()) return out;
  Tier* below = instant_only ? nullptr : Below(tier);
  if (below != nullptr) {
    index.ForEachCandidate(tier, pool, CandidateSet::kMovable, [&](StoredObject& obj) {
      if (is_taken(obj.id) || skipped(obj)) return false;
      taken.push_back(obj.id);
      if (obj.meta.durability == Durability::kCache && drop_cache_on_spill_ &&
          tier == TierKind::kDram) {
        return take({PlacementDecision::Action::kEvict, obj.id, tier, tier, footprint(obj)});
      }
      TierKind guard = tier;
      if (GuardFor(obj, tier, *below, &guard) == Guard::kNone) return false;  // it stays
      return take(
          {PlacementDecision::Action::kMoveDown, obj.id, tier, below->kind(), footprint(obj)});
    });
    if (done()) return out;
  }
  // Nowhere to move (or the caller cannot wait): `cache` objects go, oldest first. A tier with
  // a tier below keeps its cache objects while moves can still make room.
  if (below == nullptr) {
    index.ForEachCandidate(tier, pool, CandidateSet::kCache, [&](StoredObject& obj) {
      if (is_taken(obj.id) || skipped(obj)) return false;
      taken.push_back(obj.id);
      return take({PlacementDecision::Action::kEvict, obj.id, tier, tier, footprint(obj)});
    });
  }
  return out;
}

std::uint64_t PlacementPolicy::OverWatermark(TierKind tier, std::uint32_t pool,
                                             std::uint64_t leaving) const {
  const Tier* t = tiers_[static_cast<int>(tier)];
  if (t == nullptr) return 0;
  const PoolSpace space = t->SpaceOf(pool);
  if (space.capacity == 0) return 0;
  const double cap = static_cast<double>(space.capacity);
  const std::uint64_t used = space.used;
  if (static_cast<double>(used) <= t->watermarks().high * cap) return 0;
  const auto low = static_cast<std::uint64_t>(t->watermarks().low * cap);
  const std::uint64_t excess = used > low ? used - low : 0;
  return excess > leaving ? excess - leaving : 0;
}

}  // namespace tierpool
