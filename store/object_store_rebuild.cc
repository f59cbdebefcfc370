// ObjectStore, copies lost for good: a tier that learns it lost copies (the remote tier, once
// every replica's peer is gone) reports them, and the store drops them before a reader finds
// out, and gives each retained object that still has another copy (its guard copy on nvme) a
// copy in that tier again, so that it is not left on one node's disk for good (#71).
#include <spdlog/spdlog.h>

#include "store/object_store.h"

namespace tierpool {

void ObjectStore::TakeLostCopiesLocked() {
  for (int k = 0; k < kTierKindCount; ++k) {
    if (!tiers_[k]) continue;
    for (LostCopy& c : tiers_[k]->TakeLostCopies()) {
      lost_copies_.emplace_back(static_cast<TierKind>(k), c);
    }
  }
  std::vector<std::pair<TierKind, LostCopy>> later;
  for (const auto& [kind, lost] : lost_copies_) {
    StoredObject* obj = index_.Find(lost.object_id);
    if (obj == nullptr || obj->doomed || obj->corrupt) continue;
    const ObjectCopy& c = obj->copy(kind);
    // Already dropped (a read found it first), or the name holds another copy there now.
    if (!c.present || c.extent.arena_id != lost.extent.arena_id ||
        c.extent.offset != lost.extent.offset) {
      continue;
    }
    // A move under way ends first: its reads or writes of the copy fail and say so.
    if (obj->move) {
      later.emplace_back(kind, lost);
      continue;
    }
    const bool retained = obj->meta.durability == Durability::kRetained;
    const std::uint64_t id = obj->id;
    if (!CopyLostLocked(*obj, kind, Status::NotFound("the tier lost every copy it held"))) {
      later.emplace_back(kind, lost);  // pinned: dropped once unpinned
      continue;
    }
    ++counters_.copies_reported_lost;
    // CopyLostLocked kept it if another copy was left; a retained one goes back to the tier.
    const StoredObject* kept = index_.Find(id);
    if (retained && kept != nullptr && !kept->doomed && !kept->corrupt) {
      to_replace_.emplace_back(id, kind);
    }
  }
  lost_copies_ = std::move(later);
}

void ObjectStore::ReplaceLostCopiesLocked() {
  std::vector<std::pair<std::uint64_t, TierKind>> later;
  for (const auto& [id, kind] : to_replace_) {
    StoredObject* obj = index_.Find(id);
    if (obj == nullptr || obj->doomed || obj->corrupt || obj->copy(kind).present) continue;
    if (obj->move) {
      later.emplace_back(id, kind);
      continue;
    }
    const auto from = ReadSource(*obj, /*mapped_only=*/false);
    if (!from) continue;
    Tier* target = tier(kind);
    // Paced by the tier (AllocationHint::repair); no room or no budget yet: the next pass.
    const AllocationHint hint{-1, obj->pool, false, /*repair=*/true};
    Result<Extent> dst = Status::Unavailable("not writable now");
    if (target->CheckWritable().ok()) dst = target->Allocate(obj->meta.size, hint);
    if (!dst.ok()) {
      later.emplace_back(id, kind);
      continue;
    }
    Status s = StartMoveLocked(*obj, *from, kind, MovePriority::kBackground, 0,
                               /*drop_source=*/false, *dst);
    if (!s.ok()) {
      (void)target->Free(*dst);
      later.emplace_back(id, kind);
      continue;
    }
    ++counters_.copies_replaced;
    spdlog::info("{}/{}: a copy in {} again, from its copy in {}", obj->meta.ns, obj->meta.key,
                 TierName(kind), TierName(*from));
  }
  to_replace_ = std::move(later);
}

}  // namespace tierpool
