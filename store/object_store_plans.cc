// ObjectStore's side of a registered plan: the non-blocking moves the executor asks for
// (through store/plan_binding.h), per-namespace hbm bytes, and the plan budget that puts and
// on-demand promotions keep. The class and its locking: store/object_store.h.
#include "common/units.h"
#include "store/object_store.h"

namespace tierpool {

// --- moves a plan asks for ------------------------------------------------------------------

bool ObjectStore::WithinPlanBudgetLocked(StoreLock& lock, const std::string& ns,
                                         std::uint64_t size) {
  if (planned_ns_.empty() || planned_ns_.count(ns) == 0) return true;
  const auto deadline = Steady::now() + std::chrono::milliseconds(config_.room_wait_ms);
  auto ns_bytes = [&] { return HbmBytesOfLocked(ns); };
  const std::uint64_t want = AlignUp(size, 4096);
  // While copies are leaving hbm, room may come: wait for it as a GPU allocator waits on its
  // copy stream.
  while (planned_ns_.count(ns) != 0 && ns_bytes() + want > planned_ns_[ns] &&
         LeavingLocked(TierKind::kHbm, PoolOfLocked(ns)) > 0) {
    if (!ThisThreadMayWait()) {  // a server's I/O thread: carried on on a worker
      RefuseWait();
      return false;
    }
    if (moved_.wait_until(lock, deadline) == std::cv_status::timeout) {
      ++counters_.plan_room_timeouts;
      break;
    }
  }
  auto plan = planned_ns_.find(ns);
  return plan == planned_ns_.end() || ns_bytes() + want <= plan->second;
}

bool ObjectStore::PlanOwnedLocked(const StoredObject& obj, TierKind tier) const {
  return tier == TierKind::kHbm && !planned_ns_.empty() && planned_ns_.count(obj.meta.ns) != 0;
}

void ObjectStore::SetPlanned(const std::string& ns, std::uint64_t hbm_budget) {
  std::lock_guard lock(mu_);
  if (hbm_budget != 0) {
    planned_ns_[ns] = hbm_budget;
    hbm_peak_[ns] = HbmBytesOfLocked(ns);
  } else {
    planned_ns_.erase(ns);
    hbm_peak_.erase(ns);
  }
}

void ObjectStore::NoteHbmUseLocked(const std::string& ns) {
  auto it = hbm_peak_.find(ns);
  if (it != hbm_peak_.end()) it->second = std::max(it->second, HbmBytesOfLocked(ns));
}

std::uint64_t ObjectStore::HbmPeakOf(const std::string& ns) {
  std::lock_guard lock(mu_);
  auto it = hbm_peak_.find(ns);
  const std::uint64_t now = HbmBytesOfLocked(ns);
  return it == hbm_peak_.end() ? now : std::max(it->second, now);
}

void ObjectStore::ResetHbmPeak(const std::string& ns) {
  std::lock_guard lock(mu_);
  auto it = hbm_peak_.find(ns);
  if (it != hbm_peak_.end()) it->second = HbmBytesOfLocked(ns);
}

void ObjectStore::set_use_observer(UseObserver observer) {
  std::lock_guard lock(mu_);
  observer_ = std::move(observer);
}

ObjectPlacement ObjectStore::PlacementOf(const std::string& ns, const std::string& key) {
  std::lock_guard lock(mu_);
  ObjectPlacement p;
  StoredObject* obj = index_.Lookup(ns, key);
  if (obj == nullptr || obj->corrupt) return p;
  p.exists = true;
  p.size = obj->meta.size;
  p.in_hbm = obj->copy(TierKind::kHbm).present;
  p.leaving_hbm = p.in_hbm && obj->copy(TierKind::kHbm).free_on_unpin;
  p.moving_to_hbm = obj->move && obj->move->to == TierKind::kHbm;
  p.moving_out_of_hbm =
      obj->move && obj->move->from == TierKind::kHbm && obj->move->source_leaves();
  for (TierKind k : by_level_) {
    if (k != TierKind::kHbm && obj->copy(k).present) p.has_lower_copy = true;
  }
  return p;
}

std::uint64_t ObjectStore::HbmBytesOf(const std::string& ns) {
  std::lock_guard lock(mu_);
  return HbmBytesOfLocked(ns);
}

std::uint64_t ObjectStore::HbmBytesOfLocked(const std::string& ns) const {
  auto in = incoming_hbm_.find(ns);
  return index_.HbmBytesOf(ns) + (in == incoming_hbm_.end() ? 0 : in->second);
}

Status ObjectStore::StartPrefetch(const std::string& ns, const std::string& key,
                                  std::uint64_t deadline_us, MoveDone done) {
  Tier* hbm = tier(TierKind::kHbm);
  if (hbm == nullptr || hbm->capacity() == 0) return Status::FailedPrecondition("hbm is off");
  std::unique_lock lock(mu_);
  StoredObject* obj = index_.Lookup(ns, key);
  if (obj == nullptr) return Status::NotFound("no object " + ns + "/" + key);
  if (obj->corrupt) return Status::DataLoss(ns + "/" + key + " is quarantined");
  if (obj->copy(TierKind::kHbm).present) {
    CancelFreeOnUnpinLocked(*obj, TierKind::kHbm);  // its FREE had waited for a reader
    return Status::AlreadyExists("already in hbm");
  }
  if (obj->move) return Status::Aborted(ns + "/" + key + " is moving");
  auto from = ReadSource(*obj, false);
  if (!from) return Status::Internal(ns + "/" + key + " has no copy");
  if (obj->meta.size == 0) {
    // Nothing to copy: it is in hbm as soon as that is recorded. `done` is never called before
    // this returns (the caller may hold its own lock): ALREADY_EXISTS says it happened at once.
    TIERPOOL_RETURN_IF_ERROR(
        StartMoveLocked(*obj, *from, TierKind::kHbm, MovePriority::kPlanned, deadline_us, false));
    return Status::AlreadyExists(ns + "/" + key + " is empty: in hbm at once");
  }
  return StartMoveLocked(*obj, *from, TierKind::kHbm, MovePriority::kPlanned, deadline_us,
                         /*drop_source=*/false, std::nullopt, std::move(done));
}

Status ObjectStore::StartOffload(const std::string& ns, const std::string& key, MoveDone done) {
  std::unique_lock lock(mu_);
  StoredObject* obj = index_.Lookup(ns, key);
  if (obj == nullptr) return Status::NotFound("no object " + ns + "/" + key);
  if (!obj->copy(TierKind::kHbm).present) return Status::FailedPrecondition("not in hbm");
  if (obj->move) return Status::Aborted(ns + "/" + key + " is moving");
  Tier* below = policy_->Below(TierKind::kHbm);
  if (below == nullptr) return Status::Unavailable("no tier below hbm takes writes");
  if (obj->present_copies() > 1 || obj->meta.size == 0) {
    // A clean copy below (or nothing to copy): the hbm copy just goes, or goes as its readers
    // let go. As above, `done` is not called; ALREADY_EXISTS says the object already had its
    // copy below.
    if (obj->copy(TierKind::kHbm).pins == 0) ++counters_.clean_drops;
    FreeCopyWhenUnpinnedLocked(*obj, TierKind::kHbm);
    return Status::AlreadyExists(ns + "/" + key + " leaves hbm at once (a clean copy is below)");
  }
  // Readers of a pinned copy read on while it is copied down; it is freed when they let go.
  return StartMoveLocked(*obj, TierKind::kHbm, below->kind(), MovePriority::kPlanned, 0,
                         /*drop_source=*/true, std::nullopt, std::move(done));
}

Status ObjectStore::DropHbmCopy(const std::string& ns, const std::string& key) {
  std::lock_guard lock(mu_);
  StoredObject* obj = index_.Lookup(ns, key);
  if (obj == nullptr) return Status::NotFound("no object " + ns + "/" + key);
  ObjectCopy& c = obj->copy(TierKind::kHbm);
  if (!c.present) return Status::Ok();
  if (obj->move) return Status::Aborted(ns + "/" + key + " is moving");
  if (obj->present_copies() < 2) {
    return Status::FailedPrecondition(ns + "/" + key + " has no copy below hbm");
  }
  // A reader's pin (the step that used it last, its release still on the way) delays the free
  // until it lets go; its bytes count as leaving hbm until then.
  if (c.pins == 0) ++counters_.clean_drops;
  FreeCopyWhenUnpinnedLocked(*obj, TierKind::kHbm);
  return Status::Ok();
}

}  // namespace tierpool
