// ObjectStore's data movement: making room by the placement policy's decisions, starting moves
// on the mover and applying their completions, demand moves that a caller waits for (a read-back,
// a promotion), and watermark relief. The class and its locking: store/object_store.h.
#include <algorithm>
#include <chrono>

#include "common/checksum.h"
#include "common/logging.h"
#include "common/units.h"
#include "proto/tierpool.pb.h"
#include "store/object_store.h"
#include "transport/wire_meta.h"

namespace tierpool {

// --- making room and moving -----------------------------------------------------------------

Status ObjectStore::StartMoveLocked(StoredObject& obj, TierKind from, TierKind to,
                                    MovePriority priority, std::uint64_t deadline_us,
                                    bool drop_source, std::optional<Extent> dst, MoveDone done) {
  if (obj.move) return Status::Aborted("object is already moving");
  if (!obj.copy(from).present) return Status::FailedPrecondition("no copy to move from");
  if (obj.copy(to).present) return Status::Ok();
  Tier* target = tier(to);
  if (target == nullptr) return Status::FailedPrecondition(std::string(TierName(to)) + " is off");
  if (obj.meta.size == 0) {
    // Nothing to copy: the copy exists as soon as it is recorded (and journaled: no bytes).
    index_.SetCopy(obj, to, Extent{});
    if (to == TierKind::kNvme) JournalNvmeCopyLocked(obj, Extent{});
    if (drop_source) FreeCopyWhenUnpinnedLocked(obj, from);
    UpdateTopLocked(obj);
    moved_.notify_all();
    return Status::Ok();
  }
  if (!dst) {
    if (Status w = target->CheckWritable(); !w.ok()) return w;
    TIERPOOL_RETURN_IF_ERROR(WithinTierQuotaLocked(obj.meta.ns, to, obj.meta.size));
    const AllocationHint hint{-1, obj.pool, obj.meta.durability == Durability::kCache};
    auto e = target->Allocate(obj.meta.size, hint);
    if (!e.ok()) e = OpenWindowLocked(to, obj.pool, obj.meta.size);
    if (!e.ok()) {
      // Room that costs no transfer (and no wait) only: a move never waits for another.
      for (const auto& d : policy_->MakeRoom(
               index_, to, obj.pool, target->Footprint(obj.meta.size), /*instant_only=*/true,
               kMaxDecisions, [&](const StoredObject& o) { return PlanOwnedLocked(o, to); })) {
        if (d.object_id != obj.id) ApplyLocked(d, priority);
      }
      e = target->Allocate(obj.meta.size, hint);
      if (!e.ok()) return e.status();
    }
    dst = *e;
  }
  ObjectMove m;
  m.from = from;
  m.to = to;
  m.dst = *dst;
  m.drop_source = drop_source;
  m.priority = priority;
  if (done) m.on_done.push_back(std::move(done));
  obj.move = std::move(m);
  if (drop_source) LeavingLocked(from, obj.pool) += obj.meta.size;
  if (to == TierKind::kHbm) {
    incoming_hbm_[obj.meta.ns] += dst->length;
    NoteHbmUseLocked(obj.meta.ns);
  }
  index_.Refresh(obj);
  MoveRequest r;
  r.from = tier(from);
  r.src = obj.copy(from).extent;
  r.to = target;
  r.dst = *dst;
  r.info = RecordInfo{KeyHash(obj.meta.ns, obj.meta.key), obj.id, obj.meta.size, obj.meta.checksum};
  r.priority = priority;
  r.deadline_us = deadline_us;
  const std::uint64_t id = obj.id;
  r.done = [this, id](const MoveResult& result) { OnMoveDone(id, result); };
  obj.move->op_id = mover_->Submit(std::move(r));
  return Status::Ok();
}

ObjectMove ObjectStore::EndMoveLocked(StoredObject& obj) {
  ObjectMove m = std::move(*obj.move);
  obj.move.reset();
  if (m.source_leaves()) LeavingLocked(m.from, obj.pool) -= obj.meta.size;
  if (m.to == TierKind::kHbm) {
    auto in = incoming_hbm_.find(obj.meta.ns);
    if ((in->second -= m.dst.length) == 0) incoming_hbm_.erase(in);
  }
  return m;
}

void ObjectStore::OnMoveDone(std::uint64_t object_id, const MoveResult& result) {
  std::vector<MoveDone> callbacks;
  {
    std::lock_guard lock(mu_);
    OnMoveDoneLocked(object_id, result, &callbacks);
  }
  for (auto& done : callbacks) done(result.status);
}

void ObjectStore::OnMoveDoneLocked(std::uint64_t object_id, const MoveResult& result,
                                   std::vector<MoveDone>* callbacks) {
  moved_.notify_all();
  StoredObject* obj = index_.Find(object_id);
  if (obj == nullptr || !obj->move) return;  // cannot happen: moving objects are kept
  *callbacks = std::move(obj->move->on_done);
  const ObjectMove m = EndMoveLocked(*obj);
  auto free_dst = [&] {
    if (m.dst.length > 0) (void)tier(m.to)->Free(m.dst);
  };
  const Status& s = result.status;
  if (!s.ok()) {
    free_dst();
    obj->last_move_error = s;
    if (m.to == TierKind::kNvme) ++counters_.spill_failures;
    if (m.from == TierKind::kNvme) ++counters_.nvme_read_failures;
    // Only a source that is not memory can lose bytes (its copy was on peers that left the
    // cluster): a spill from dram whose write a peer refused (NOT_FOUND: a region freed while
    // this node was away) leaves the dram copy as it was.
    if (s.code() == StatusCode::kNotFound && !mapped(m.from) && obj->copy(m.from).present &&
        CopyLostLocked(*obj, m.from, s)) {
      return;
    }
    // DATA_LOSS may be the device garbling the copy (a write-verify read) or the source in
    // memory no longer matching its checksum; only the second quarantines. Checking costs a
    // pass over the source, on this failure path only.
    const ObjectCopy& src = obj->copy(m.from);
    if (s.code() == StatusCode::kDataLoss && mapped(m.from) && src.present && obj->meta.size > 0 &&
        Xxh3(tier(m.from)->HostAddress(src.extent), obj->meta.size) != obj->meta.checksum) {
      ++counters_.corrupt_in_memory;
      QuarantineLocked(*obj, s);
    } else if (m.source_leaves() && s.code() != StatusCode::kUnavailable &&
               s.code() != StatusCode::kDeadlineExceeded) {
      // A tier below that fails (a device's errors) ends the waits for room; a peer that does
      // not answer does not: it is marked silent, and the next move goes elsewhere.
      ++failed_out_[static_cast<int>(m.from)];
    }
    if (obj->corrupt) {
      // quarantined above: not retried, so not a sign that the tier below is failing
    } else if (s.code() != StatusCode::kUnavailable) {
      spdlog::warn("moving {}/{} from {} to {}: {}", obj->meta.ns, obj->meta.key, TierName(m.from),
                   TierName(m.to), s.ToString());
    }
    index_.Refresh(*obj);
    MaybeFreeLocked(*obj);
    return;
  }
  if (obj->doomed) {
    free_dst();
    ++counters_.migrations_aborted;
    MaybeFreeLocked(*obj);
    return;
  }
  obj->last_move_error = Status::Ok();
  index_.SetCopy(*obj, m.to, m.dst);
  const bool down = rank(m.to) > rank(m.from);
  if (m.to == TierKind::kNvme) {
    ++counters_.spills;
    JournalNvmeCopyLocked(*obj, m.dst);
  } else if (m.from == TierKind::kNvme) {
    ++counters_.nvme_reads;
  } else if (down) {
    ++counters_.demotions;
  } else {
    ++counters_.promotions;
  }
  // A pinned source stays until its readers let go: they hold its address.
  if (m.drop_source) FreeCopyWhenUnpinnedLocked(*obj, m.from);
  UpdateTopLocked(*obj);
  index_.Refresh(*obj);
  if (m.then_to && obj->copy(m.from).present && obj->copy(m.from).pins == 0) {
    // The guard copy landed: the source moves on. If it cannot now, it stays a clean copy
    // above the guard, dropped (no transfer) when its tier needs the room.
    Status next = StartMoveLocked(*obj, m.from, *m.then_to, m.priority, 0, /*drop_source=*/true);
    if (!next.ok()) {
      spdlog::debug("{}/{}: guard copy in {}, but not moved on to {}: {}", obj->meta.ns,
                    obj->meta.key, TierName(m.to), TierName(*m.then_to), next.ToString());
    }
  }
}

void ObjectStore::JournalNvmeCopyLocked(StoredObject& obj, const Extent& at) {
  if (journal_ == nullptr || obj.meta.durability != Durability::kRetained ||
      !journal_->records_nvme()) {
    return;
  }
  wire::ObjectMeta w;
  transport::ToWire(obj.meta, &w);
  journal_->NoteNvmePut(
      obj.meta.ns, obj.meta.key, w.SerializeAsString(), at,
      RecordInfo{KeyHash(obj.meta.ns, obj.meta.key), obj.id, obj.meta.size, obj.meta.checksum});
  obj.nvme_journaled = true;
}

Status ObjectStore::StartMoveDownLocked(StoredObject& obj, TierKind from, TierKind to,
                                        MovePriority priority) {
  TierKind guard = to;
  switch (policy_->GuardFor(obj, from, *tier(to), &guard)) {
    case PlacementPolicy::Guard::kNotNeeded:
      return StartMoveLocked(obj, from, to, priority, 0, /*drop_source=*/true);
    case PlacementPolicy::Guard::kNone:
      return Status::FailedPrecondition(std::string(TierName(to)) +
                                        " alone would not keep a retained object safe");
    case PlacementPolicy::Guard::kIn:
      break;
  }
  // The guard copy first, the source kept; the move on to `to` starts when it lands.
  TIERPOOL_RETURN_IF_ERROR(StartMoveLocked(obj, from, guard, priority, 0, /*drop_source=*/false));
  ++counters_.guard_copies;
  if (!obj.move) {
    // Landed at once (an empty object): on to `to` now.
    return StartMoveLocked(obj, from, to, priority, 0, /*drop_source=*/true);
  }
  obj.move->then_to = to;
  LeavingLocked(from, obj.pool) += obj.meta.size;
  return Status::Ok();
}

bool ObjectStore::CopyLostLocked(StoredObject& obj, TierKind from, const Status& why) {
  const std::string name = obj.meta.ns + "/" + obj.meta.key;
  if (obj.present_copies() == 1) {
    // Its only copy: a cache object is a miss from now on, as if evicted; a retained one is
    // lost, and says so.
    ++counters_.copies_lost_with_peers;
    spdlog::warn("{}: its only copy was in {}, on peers that left ({})", name, TierName(from),
                 why.message());
    if (obj.meta.durability == Durability::kCache) {
      obj.last_move_error = Status::NotFound(name + " was evicted with the peer that held it");
      ++counters_.evictions;
      DoomLocked(obj);
    } else {
      obj.last_move_error =
          Status::DataLoss(name + ": every copy was on peers that left the cluster");
      QuarantineLocked(obj, obj.last_move_error);
      MaybeFreeLocked(obj);
    }
    return true;
  }
  if (obj.copy(from).pins > 0) return false;
  // One of several (a retained object's guard copy on nvme is another): the lost copy goes, and
  // whoever waited reads another (ABORTED: look again).
  ++counters_.copies_lost_read_elsewhere;
  spdlog::warn("{}: its copy in {} was on peers that left ({}); reading another", name,
               TierName(from), why.message());
  FreeCopyLocked(obj, from);
  obj.last_move_error = Status::Aborted("a copy was lost with its peers; read another");
  index_.Refresh(obj);
  MaybeFreeLocked(obj);
  return true;
}

bool ObjectStore::ApplyLocked(const PlacementDecision& d, MovePriority priority) {
  StoredObject* obj = index_.Find(d.object_id);
  if (obj == nullptr || obj->doomed || obj->move || obj->corrupt) return false;
  ObjectCopy& c = obj->copy(d.from);
  if (!c.present || c.pins > 0) return false;
  switch (d.action) {
    case PlacementDecision::Action::kDropCopy:
      if (obj->present_copies() < 2) return false;
      FreeCopyLocked(*obj, d.from);
      ++counters_.clean_drops;
      return true;
    case PlacementDecision::Action::kEvict:
      if (obj->meta.durability != Durability::kCache) return false;
      spdlog::debug("evicting cache object {}/{} ({}) from {}", obj->meta.ns, obj->meta.key,
                    FormatBytes(obj->meta.size), TierName(d.from));
      ++counters_.evictions;
      DoomLocked(*obj);
      return true;
    case PlacementDecision::Action::kMoveDown: {
      Status s = StartMoveDownLocked(*obj, d.from, d.to, priority);
      // No room in the tier below right now (a remote tier whose lenders have not granted
      // enough yet): the next one down takes the object instead.
      for (TierKind to = d.to; !s.ok() && (s.code() == StatusCode::kResourceExhausted ||
                                           s.code() == StatusCode::kUnavailable);) {
        Tier* next = policy_->Below(to);
        if (next == nullptr) break;
        to = next->kind();
        s = StartMoveDownLocked(*obj, d.from, to, priority);
      }
      if (s.ok()) return true;
      if (s.code() == StatusCode::kResourceExhausted &&
          obj->meta.durability == Durability::kCache) {
        // No room below for a cache object: it goes (a miss is recomputed).
        ++counters_.evictions;
        DoomLocked(*obj);
        return true;
      }
      return false;
    }
  }
  return false;
}

std::string ObjectStore::RoomNameLocked(TierKind kind, std::uint32_t pool) const {
  const std::string name(TierName(kind));
  if (pool == kSharedPool || !tier(kind)->partitioned()) return name;
  return "namespace pool " + pools_[pool - 1].name + "'s " + name;
}

std::uint64_t& ObjectStore::LeavingLocked(TierKind kind, std::uint32_t pool) {
  const Tier* t = tier(kind);
  const std::uint32_t p = t != nullptr && t->partitioned() ? pool : kSharedPool;
  if (p >= leaving_.size()) leaving_.resize(p + 1);
  return leaving_[p][static_cast<int>(kind)];
}

Result<Extent> ObjectStore::AllocateLocked(StoreLock& lock, TierKind kind, std::uint64_t size,
                                           AllocationHint hint, bool may_wait,
                                           MovePriority priority) {
  Tier* t = tier(kind);
  if (t == nullptr) return Status::FailedPrecondition(std::string(TierName(kind)) + " tier is off");
  if (size == 0) return Extent{};  // an empty object takes no room anywhere
  const std::uint64_t footprint = t->Footprint(size);
  const std::uint64_t room = t->SpaceOf(hint.pool).capacity;
  if (footprint > room) {
    return Status::ResourceExhausted(
        FormatBytes(size) + " is larger than " + (hint.pool == kSharedPool ? "the whole " : "") +
        RoomNameLocked(kind, hint.pool) + " tier (" + FormatBytes(room) + ")");
  }
  WaitDeadline deadline(config_.room_wait_ms);
  const std::uint64_t failures_seen = failed_out_[static_cast<int>(kind)];
  for (;;) {
    auto extent = t->Allocate(size, hint);
    if (extent.ok()) return extent;
    // Free bytes enough, but scattered: moving copies aside in the tier costs a copy at memory
    // speed, where making room below costs a transfer out and, later, one back.
    if (auto window = OpenWindowLocked(kind, hint.pool, size); window.ok()) return window;
    const std::uint64_t leaving = LeavingLocked(kind, hint.pool);
    const std::uint64_t want = footprint > leaving ? footprint - leaving : 0;
    bool instant = false;
    int started = 0;
    for (const auto& d : policy_->MakeRoom(
             index_, kind, hint.pool, std::max<std::uint64_t>(want, 1), !may_wait, kMaxDecisions,
             [&](const StoredObject& o) { return PlanOwnedLocked(o, kind); })) {
      if (!ApplyLocked(d, priority)) continue;
      if (d.action == PlacementDecision::Action::kMoveDown) {
        ++started;
      } else {
        instant = true;
      }
    }
    if (instant) continue;  // room freed at once: try again
    if (!may_wait || (started == 0 && LeavingLocked(kind, hint.pool) == 0)) {
      return extent.status();
    }
    // Moves out of this tier are under way: wait for one to land, then look again. A move that
    // fails again and again (a failing device) ends the wait instead of repeating forever.
    // Not on a server's I/O thread: the request is carried on on a worker (no_wait_scope.h).
    if (!ThisThreadMayWait()) {
      RefuseWait();
      return Status::Unavailable("room in " + std::string(TierName(kind)) +
                                 " is on its way; not waited for on an I/O thread");
    }
    if (moved_.wait_until(lock, deadline.get()) == std::cv_status::timeout) {
      return Status::ResourceExhausted("timed out after " + std::to_string(config_.room_wait_ms) +
                                       " ms waiting for room in " + std::string(TierName(kind)));
    }
    if (failed_out_[static_cast<int>(kind)] > failures_seen + 2) return extent.status();
  }
}

bool ObjectStore::WaitForMoveLocked(StoreLock& lock, std::uint64_t object_id,
                                    Steady::time_point deadline) {
  StoredObject* obj = index_.Find(object_id);
  if (obj == nullptr) return true;
  ++obj->holds;
  bool in_time = true;
  for (;;) {
    obj = index_.Find(object_id);
    if (obj == nullptr || !obj->move) break;
    if (!ThisThreadMayWait()) {  // a server's I/O thread: carried on on a worker
      RefuseWait();
      in_time = false;
      break;
    }
    if (moved_.wait_until(lock, deadline) == std::cv_status::timeout) {
      in_time = false;
      break;
    }
  }
  if (obj != nullptr) {
    --obj->holds;
    index_.Refresh(*obj);
  }
  return in_time;
}

Status ObjectStore::MoveOnDemandLocked(StoreLock& lock, std::uint64_t id, TierKind to,
                                       bool mapped_source_only, Steady::time_point deadline) {
  StoredObject* obj = index_.Find(id);
  if (obj == nullptr) return Status::Aborted("the object went while it was looked at");
  TIERPOOL_RETURN_IF_ERROR(WithinTierQuotaLocked(obj->meta.ns, to, obj->meta.size));
  auto dst = AllocateLocked(lock, to, obj->meta.size, {-1, obj->pool}, true, MovePriority::kDemand);
  if (!dst.ok()) return dst.status();
  obj = index_.Find(id);
  const auto from = obj != nullptr ? ReadSource(*obj, mapped_source_only) : std::nullopt;
  if (obj == nullptr || obj->doomed || obj->move || obj->copy(to).present || !from) {
    if (dst->length > 0) (void)tier(to)->Free(*dst);
    return Status::Aborted("the object changed while room was made");  // look again
  }
  // A read-back from device memory keeps the device copy: the dram copy is a clean one beside
  // it, as after a move up (the device copy is what the job uses in place).
  const bool down = rank(to) > rank(*from) && !on_device(*from);
  Status s = StartMoveLocked(*obj, *from, to, MovePriority::kDemand, 0, down, *dst);
  if (!s.ok()) {
    if (dst->length > 0) (void)tier(to)->Free(*dst);
    return s;
  }
  if (!WaitForMoveLocked(lock, id, deadline)) {
    return Status::Unavailable("timed out waiting for a move into " + std::string(TierName(to)));
  }
  return Status::Ok();
}

void ObjectStore::CopyUpAfterPutLocked(StoredObject& obj) {
  obj.up_on_commit = false;
  const std::uint64_t size = obj.meta.size;
  auto plan = planned_ns_.find(obj.meta.ns);
  if (plan != planned_ns_.end() &&
      HbmBytesOfLocked(obj.meta.ns) + AlignUp(size, 4096) > plan->second) {
    return;  // a planned job's budget is full: its executor brings the object up when it fits
  }
  if (!WithinTierQuotaLocked(obj.meta.ns, TierKind::kHbm, size).ok()) return;
  // Room now or not at all (the put is acknowledged already): without room it stays in dram,
  // as a put into a full hbm does.
  (void)StartMoveLocked(obj, TierKind::kDram, TierKind::kHbm, MovePriority::kDemand, 0,
                        /*drop_source=*/true);
}

Status ObjectStore::Promote(const std::string& ns, const std::string& key, TierKind target) {
  TIERPOOL_RETURN_IF_ERROR(ValidateName(ns, key));
  if (target != TierKind::kHbm && target != TierKind::kDram) {
    return Status::InvalidArgument("objects can be moved to hbm or dram only");
  }
  if (tier(target) == nullptr || tier(target)->capacity() == 0) {
    return Status::FailedPrecondition(std::string(TierName(target)) + " tier is off");
  }
  const auto deadline = Steady::now() + std::chrono::milliseconds(config_.room_wait_ms);
  std::unique_lock lock(mu_);
  for (int attempt = 0; attempt < 1000; ++attempt) {
    StoredObject* obj = index_.Lookup(ns, key);
    if (obj == nullptr) return Status::NotFound("no object " + ns + "/" + key);
    if (obj->corrupt) return Status::DataLoss(ns + "/" + key + " is quarantined");
    const std::uint64_t id = obj->id;
    if (obj->move) {
      if (obj->move->to == target) mover_->Expedite(obj->move->op_id, MovePriority::kDemand, 0);
      if (!WaitForMoveLocked(lock, id, deadline)) return Status::Unavailable("move timed out");
      continue;
    }
    if (obj->copy(target).present) {
      // A demotion request also drops the copies above the target (a pinned one as its readers
      // let go); a promotion keeps a copy there that was to go so.
      for (TierKind k : by_level_) {
        if (rank(k) >= rank(target)) break;
        FreeCopyWhenUnpinnedLocked(*obj, k);
      }
      KeepCopyLocked(*obj, target);
      index_.Touch(*obj, target);
      return Status::Ok();
    }
    Status moved = MoveOnDemandLocked(lock, id, target, false, deadline);
    if (moved.code() == StatusCode::kAborted) continue;
    if (moved.code() == StatusCode::kResourceExhausted) {
      return Status::ResourceExhausted("no room in " + std::string(TierName(target)) + " for " +
                                       ns + "/" + key + ": " + moved.message());
    }
    if (!moved.ok()) return moved;
    obj = index_.Find(id);
    if (obj == nullptr) return Status::NotFound("no object " + ns + "/" + key);
    if (obj->copy(target).present) {
      index_.Touch(*obj, target);
      return Status::Ok();
    }
    if (obj->last_move_error.code() == StatusCode::kAborted) continue;  // a lost copy: again
    if (!obj->last_move_error.ok()) return obj->last_move_error;
  }
  return Status::Aborted("promotion kept losing races; try again");
}

void ObjectStore::RelieveWatermarksLocked() {
  for (TierKind k : by_level_) {
    // Only tiers with somewhere to move to: watermarks move objects, they never drop them.
    if (policy_->Below(k) == nullptr) continue;
    // Each pool's room separately: one pool's pressure is relieved from its own objects.
    const std::uint32_t pools = tier(k)->partitioned() ? PoolCount() : 1;
    for (std::uint32_t pool = 0; pool < pools; ++pool) {
      std::uint64_t excess = policy_->OverWatermark(k, pool, LeavingLocked(k, pool));
      if (excess == 0) continue;
      for (const auto& d :
           policy_->MakeRoom(index_, k, pool, excess, /*instant_only=*/false, kMaxDecisions,
                             [&](const StoredObject& o) { return PlanOwnedLocked(o, k); })) {
        ApplyLocked(d, MovePriority::kBackground);
      }
    }
  }
}

}  // namespace tierpool
