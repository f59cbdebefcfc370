// Reads: a get's copy made host-mapped (read back from a tier clients do not map), pinned
// (waiting for a planned prefetch, or bringing the copy up on demand), released, and copied out
// checked. The class and its locking: store/object_store.h.
#include <cstring>
#include <shared_mutex>

#include "common/checksum.h"
#include "common/logging.h"
#include "store/object_store.h"

namespace tierpool {

namespace {
constexpr int kReadAttempts = 3;  // a read-back that fails its check is tried again this often
}  // namespace

Result<std::pair<StoredObject*, TierKind>> ObjectStore::EnsureMappedLocked(StoreLock& lock,
                                                                           const std::string& ns,
                                                                           const std::string& key) {
  WaitDeadline deadline(config_.room_wait_ms);
  int read_failures = 0;
  for (int attempt = 0; attempt < 1000; ++attempt) {
    StoredObject* obj = index_.Lookup(ns, key);
    if (obj == nullptr) return Status::NotFound("no object " + ns + "/" + key);
    if (obj->corrupt)
      return Status::DataLoss(ns + "/" + key + " is quarantined: " + obj->why_corrupt);
    if (auto t = TopCopy(*obj, /*mapped_only=*/true)) return std::make_pair(obj, *t);
    const std::uint64_t id = obj->id;
    if (obj->move) {
      // Someone is already bringing it back (or moving it): wait for that move, at demand
      // priority, instead of starting a second one.
      if (mapped(obj->move->to)) mover_->Expedite(obj->move->op_id, MovePriority::kDemand, 0);
      if (!WaitForMoveLocked(lock, id, deadline.get())) {
        return Status::Unavailable("timed out waiting for " + ns + "/" + key + " to move");
      }
      continue;
    }
    Status moved = MoveOnDemandLocked(lock, id, TierKind::kDram, false, deadline.get());
    if (moved.code() == StatusCode::kAborted) continue;
    if (!moved.ok()) return moved;
    obj = index_.Find(id);
    if (obj == nullptr) continue;  // deleted meanwhile: NotFound on the next look
    if (TopCopy(*obj, true)) continue;
    // A read error or a checksum mismatch may be transient (a flaky link, a bad DMA): the
    // record is read again before the caller hears of it. The bytes returned are checked anyway.
    Status e = obj->last_move_error;
    if (e.code() == StatusCode::kAborted) continue;  // a copy lost with its peers: read another
    // A copy whose peers did not answer in time: with another copy (a guard on nvme), that one
    // is read next (its tier now says the first is not readable).
    const bool unanswered =
        e.code() == StatusCode::kUnavailable || e.code() == StatusCode::kDeadlineExceeded;
    bool transient = e.code() == StatusCode::kIoError || e.code() == StatusCode::kDataLoss ||
                     (unanswered && obj->present_copies() > 1);
    if (e.ok() || !transient || ++read_failures >= kReadAttempts) {
      return e.ok() ? Status::Aborted("object kept moving; try again") : e;
    }
  }
  return Status::Aborted("object kept moving; try again");
}

ObjectMeta ObjectStore::PinnedMetaLocked(const StoredObject& obj, TierKind t,
                                         const PinOptions& options) const {
  ObjectMeta m;
  if (options.bytes_meta_only) {
    m.size = obj.meta.size;
    m.kind = obj.meta.kind;
    m.durability = obj.meta.durability;
    m.checksum = obj.meta.checksum;
    m.created_unix_ms = obj.meta.created_unix_ms;
    m.pins = obj.pins();
  } else {
    m = MetaLocked(obj);
  }
  m.tier = t;
  return m;
}

Result<PinnedObject> ObjectStore::Pin(const std::string& ns, const std::string& key,
                                      std::uint64_t owner, const PinOptions& options) {
  TIERPOOL_RETURN_IF_ERROR(ValidateName(ns, key));
  if (options.want &&
      (!tier(*options.want) || !(mapped(*options.want) || on_device(*options.want)))) {
    return Status::InvalidArgument("gets may want hbm or dram only");
  }
  if (auto pinned = TryPinShared(ns, key, owner, options)) return std::move(*pinned);
  // A wanted device copy is made sure of, and a mapped copy is what the client reads.
  const bool want_device = options.want && on_device(*options.want);
  StoreLock lock(mu_);
  TIERPOOL_RETURN_IF_ERROR(AdmitPinLocked(owner));
  std::optional<HbmUse> use;
  const std::uint64_t started_us = options.want ? clock_->NowMicros() : 0;
  WaitDeadline deadline(config_.room_wait_ms);
  Result<std::pair<StoredObject*, TierKind>> found = Status::Aborted("not looked up");
  bool current = false;  // `found` was resolved with no wait since
  for (int attempt = 0; attempt < 100; ++attempt) {
    if (want_device && options.device_ok) {
      // A client that reads device memory takes the device copy as it is: no host copy made.
      StoredObject* obj = index_.Lookup(ns, key);
      if (obj != nullptr && !obj->corrupt && !obj->move && obj->copy(*options.want).present) {
        found = std::make_pair(obj, *options.want);
        current = true;
        break;
      }
    }
    found = EnsureMappedLocked(lock, ns, key);
    if (!found.ok() || !options.want || found->second == *options.want ||
        (want_device && found->first->copy(*options.want).present)) {
      current = true;
      break;
    }
    // It wants another copy than the nearest one (the hbm copy, for a step about to run).
    StoredObject* obj = found->first;
    const TierKind want = *options.want;
    const std::uint64_t id = obj->id;
    if (obj->move && obj->move->to == want) {
      if (!use) use = HbmUse::kLate;
      mover_->Expedite(obj->move->op_id, MovePriority::kDemand, 0);
      if (!WaitForMoveLocked(lock, id, deadline.get())) break;
      continue;
    }
    if (obj->move) {  // moving elsewhere: let it finish, then look again
      if (!WaitForMoveLocked(lock, id, deadline.get())) break;
      continue;
    }
    if (!use) use = HbmUse::kMiss;
    // A planned job's own tensors come up on demand only within its budget.
    if (want == TierKind::kHbm && !WithinPlanBudgetLocked(lock, ns, obj->meta.size)) break;
    Status moved = MoveOnDemandLocked(lock, id, want, /*mapped_source_only=*/true, deadline.get());
    if (moved.code() == StatusCode::kAborted) continue;
    if (!moved.ok()) break;  // no room can be made: the nearest copy is pinned
  }
  if (found.ok() && !current && !WaitRefused()) {
    // The loop ended on a wait or a move that could not start: look the object up again.
    StoredObject* obj = index_.Lookup(ns, key);
    if (obj == nullptr || obj->id != found->first->id) {
      found = EnsureMappedLocked(lock, ns, key);
    } else if (options.want && !want_device && obj->copy(*options.want).present) {
      found = std::make_pair(obj, *options.want);
    } else {
      found = EnsureMappedLocked(lock, ns, key);
    }
  }
  // A wait this thread may not make (a server's I/O thread): nothing pinned or counted; the
  // get is carried on on a worker, which waits.
  if (WaitRefused()) return Status::Unavailable("not waited for a move on an I/O thread");
  gets_.Add(owner);
  if (!found.ok()) {
    if (found.status().code() == StatusCode::kNotFound) get_misses_.Add(owner);
    return found.status();
  }
  auto [obj, t] = *found;
  if (want_device && options.device_ok && obj->copy(*options.want).present) t = *options.want;
  ObjectCopy& c = obj->copy(t);
  CancelFreeOnUnpinLocked(*obj, t);  // read again before its readers let go: it is wanted
  ++c.pins;
  std::uint64_t lease_id = leases_.Add(Lease{obj->id, t, owner, LeaseDue(owner)});
  index_.Touch(*obj, t);
  PinnedObject pinned{lease_id, obj->id, PinnedMetaLocked(*obj, t, options), c.extent};
  if (options.want == TierKind::kHbm && observer_) {
    const HbmUse outcome = use.value_or(HbmUse::kHit);
    const std::uint64_t waited = clock_->NowMicros() - started_us;
    if (outcome != HbmUse::kHit) {
      spdlog::debug("get of {}/{} wanted hbm: {} after {} us (pinned in {})", ns, key,
                    outcome == HbmUse::kLate ? "late" : "miss", waited, TierName(t));
    }
    lock.unlock();
    observer_(ns, key, outcome, waited);
  }
  return pinned;
}

ObjectStore::SharedPin ObjectStore::PinUnderNameShared(std::string_view ns, std::string_view key,
                                                       const PinOptions& options,
                                                       StoredObject** obj, TierKind* t) {
  // Looked at and pinned under the name's lock: a commit replacing it under mu_ shared frees
  // only an object nobody pinned there (store/object_index.h).
  return index_.WithName(ns, key, [&](StoredObject* o) {
    if (o == nullptr) return SharedPin::kNone;
    if (o->corrupt) return SharedPin::kExclusive;
    const std::optional<TierKind> top = TopCopy(*o, /*mapped_only=*/true);
    if (!top || (options.want && *top != *options.want)) return SharedPin::kExclusive;
    if (o->copy(*top).free_on_unpin) return SharedPin::kExclusive;
    o->copy(*top).pins.fetch_add(1);
    index_.TouchShared(*o, *top);
    *obj = o;
    *t = *top;
    return SharedPin::kPinned;
  });
}

std::optional<Result<PinnedObject>> ObjectStore::TryPinShared(const std::string& ns,
                                                              const std::string& key,
                                                              std::uint64_t owner,
                                                              const PinOptions& options) {
  // Only a get of the copy a client reads as it is: the top mapped one, which is the wanted
  // tier's if it names one. A device copy, a copy to bring up or back, a free to cancel, a
  // refusal to count: the exclusive path.
  if (options.want && !mapped(*options.want)) return std::nullopt;
  const std::uint64_t started_us = options.want ? clock_->NowMicros() : 0;
  std::shared_lock lock(mu_);
  if (AtPinLimit(owner)) return std::nullopt;
  StoredObject* obj = nullptr;
  TierKind t = TierKind::kDram;
  const SharedPin found = PinUnderNameShared(ns, key, options, &obj, &t);
  if (found == SharedPin::kExclusive) return std::nullopt;
  gets_.Add(owner);
  if (found == SharedPin::kNone) {
    get_misses_.Add(owner);
    return Result<PinnedObject>(Status::NotFound("no object " + ns + "/" + key));
  }
  // Pinned: it stays, and what is read here changes only under mu_ held exclusively.
  const std::uint64_t lease_id = leases_.Add(Lease{obj->id, t, owner, LeaseDue(owner)});
  PinnedObject pinned{lease_id, obj->id, PinnedMetaLocked(*obj, t, options), obj->copy(t).extent};
  lock.unlock();
  if (options.want == TierKind::kHbm && observer_) {
    observer_(ns, key, HbmUse::kHit, clock_->NowMicros() - started_us);
  }
  return Result<PinnedObject>(std::move(pinned));
}

void ObjectStore::PinAllShared(std::span<const ObjectIndex::NameView> names, std::uint64_t owner,
                               const PinOptions& options,
                               std::vector<std::optional<Result<PinnedObject>>>* out) {
  const std::size_t first = out->size();
  out->resize(first + names.size());
  if (names.empty() || (options.want && !mapped(*options.want))) return;
  const std::uint64_t started_us = options.want ? clock_->NowMicros() : 0;
  std::vector<Lease> leases;
  std::vector<std::size_t> leased;  // the index in names of each of leases
  leases.reserve(names.size());
  leased.reserve(names.size());
  std::uint64_t looked_up = 0, missed = 0;
  {
    std::shared_lock lock(mu_);
    // The limit once for the batch: past it, Pin counts each pin against it.
    if (owner != kStoreOwner && config_.max_leases_per_client != 0 &&
        leases_.CountOf(owner) + names.size() > config_.max_leases_per_client) {
      return;
    }
    const std::uint64_t due = LeaseDue(owner);
    for (std::size_t i = 0; i < names.size(); ++i) {
      const auto [ns, key] = names[i];
      if (!ValidateName(ns, key).ok()) continue;  // Pin says why
      StoredObject* obj = nullptr;
      TierKind t = TierKind::kDram;
      const SharedPin found = PinUnderNameShared(ns, key, options, &obj, &t);
      if (found == SharedPin::kExclusive) continue;
      ++looked_up;
      auto& slot = (*out)[first + i];
      if (found == SharedPin::kNone) {
        ++missed;
        slot.emplace(Status::NotFound("no object " + std::string(ns) + "/" + std::string(key)));
        continue;
      }
      leases.push_back(Lease{obj->id, t, owner, due});
      leased.push_back(i);
      slot.emplace(
          PinnedObject{0, obj->id, PinnedMetaLocked(*obj, t, options), obj->copy(t).extent});
    }
    std::vector<std::uint64_t> ids(leases.size());
    leases_.AddAll(leases, ids.data());
    for (std::size_t j = 0; j < leased.size(); ++j) (**(*out)[first + leased[j]]).lease_id = ids[j];
  }
  if (looked_up > 0) gets_.Add(owner, looked_up);
  if (missed > 0) get_misses_.Add(owner, missed);
  if (options.want == TierKind::kHbm && observer_) {
    const std::uint64_t took = clock_->NowMicros() - started_us;
    for (std::size_t i : leased) {
      observer_(std::string(names[i].first), std::string(names[i].second), HbmUse::kHit, took);
    }
  }
}

Status ObjectStore::Release(std::uint64_t lease_id, std::uint64_t owner) {
  Lease l;
  {
    // Letting go of a pin is a decrement under the shared lock, unless it was the copy's last
    // and something waits on that (a free asked for while it was read, a deleted object).
    std::shared_lock lock(mu_);
    auto taken = leases_.Take(lease_id, owner);
    if (!taken.ok()) return taken.status();
    l = *taken;
    if (!UnpinShared(l)) return Status::Ok();
  }
  std::lock_guard lock(mu_);
  SettleUnpinnedLocked(l.object_id, l.tier);
  return Status::Ok();
}

Status ObjectStore::ReleaseAll(std::span<const std::uint64_t> lease_ids, std::uint64_t owner) {
  std::vector<Lease> taken;
  taken.reserve(lease_ids.size());
  Status refusal;
  std::size_t refused = 0;
  std::size_t settle = 0;  // taken[0, settle): the ones to settle
  {
    std::shared_lock lock(mu_);
    refused = leases_.TakeAll(lease_ids, owner, &taken, &refusal);
    for (const Lease& l : taken) {
      if (UnpinShared(l)) taken[settle++] = l;
    }
  }
  if (settle > 0) {
    std::lock_guard lock(mu_);
    for (std::size_t i = 0; i < settle; ++i)
      SettleUnpinnedLocked(taken[i].object_id, taken[i].tier);
  }
  if (refused == 0) return Status::Ok();
  return Status(refusal.code(), std::to_string(refused) + " of " +
                                    std::to_string(lease_ids.size()) +
                                    " leases not released; one: " + refusal.message());
}

Status ObjectStore::ReleaseUnused(std::span<const std::uint64_t> lease_ids, std::uint64_t misses,
                                  std::uint64_t owner) {
  Status s = lease_ids.empty() ? Status::Ok() : ReleaseAll(lease_ids, owner);
  gets_.Subtract(owner, lease_ids.size() + misses);
  get_misses_.Subtract(owner, misses);
  return s;
}

bool ObjectStore::UnpinShared(const Lease& l) {
  StoredObject* obj = index_.Find(l.object_id);
  if (obj == nullptr) return false;
  ObjectCopy& c = obj->copy(l.tier);
  // Read before letting go: once its last pin is gone, a commit under mu_ shared that
  // replaced it may free it. Neither changes while this pin holds it (under mu_ exclusive
  // only, or, doomed, by such a commit of an object with no pins).
  const bool settle = c.free_on_unpin || obj->doomed;
  std::uint32_t pins = c.pins.load();
  while (pins > 0 && !c.pins.compare_exchange_weak(pins, pins - 1)) {
  }
  return pins <= 1 && settle;
}

Result<ObjectMeta> ObjectStore::Head(const std::string& ns, const std::string& key) {
  TIERPOOL_RETURN_IF_ERROR(ValidateName(ns, key));
  std::shared_lock lock(mu_);
  std::optional<ObjectMeta> meta = index_.WithName(ns, key, [&](const StoredObject* obj) {
    return obj == nullptr ? std::nullopt : std::optional<ObjectMeta>(MetaLocked(*obj));
  });
  if (!meta) return Status::NotFound("no object " + ns + "/" + key);
  return std::move(*meta);
}

Result<std::vector<TierKind>> ObjectStore::CopiesOf(const std::string& ns, const std::string& key) {
  TIERPOOL_RETURN_IF_ERROR(ValidateName(ns, key));
  std::shared_lock lock(mu_);
  std::vector<TierKind> copies;
  const bool exists = index_.WithName(ns, key, [&](const StoredObject* obj) {
    if (obj == nullptr) return false;
    for (TierKind k : by_level_) {
      if (obj->copy(k).present) copies.push_back(k);
    }
    return true;
  });
  if (!exists) return Status::NotFound("no object " + ns + "/" + key);
  return copies;
}

Status ObjectStore::CopyOut(const PinnedObject& pinned, std::string* out) {
  const std::uint64_t size = pinned.meta.size;
  out->resize(size);
  std::uint64_t sum = Xxh3(nullptr, 0);
  // Checked in the same pass as the copy: damage is an error, never data.
  if (size > 0) sum = CopyAndChecksum(out->data(), HostAddress(pinned.extent), size);
  if (sum == pinned.meta.checksum) return Status::Ok();
  out->clear();
  std::lock_guard lock(mu_);
  // Found by id: the pin may have left the names out (PinOptions::bytes_meta_only), and the
  // pinned object is the one whose bytes were read, whatever now has its name.
  StoredObject* obj = index_.Find(pinned.object_id);
  const std::string name = obj != nullptr ? obj->meta.ns + "/" + obj->meta.key
                                          : "object " + std::to_string(pinned.object_id);
  Status bad = Status::DataLoss(name + ": bytes in " + std::string(TierName(pinned.meta.tier)) +
                                " do not match their checksum");
  if (obj != nullptr && obj->meta.checksum == pinned.meta.checksum) {
    ++counters_.corrupt_in_memory;
    QuarantineLocked(*obj, bad);
  }
  return bad;
}

Result<ObjectMeta> ObjectStore::ReadCopy(const std::string& ns, const std::string& key,
                                         std::string* out) {
  auto pinned = Pin(ns, key, kStoreOwner);
  if (!pinned.ok()) return pinned.status();
  Status copied = CopyOut(*pinned, out);
  Status s = Release(pinned->lease_id, kStoreOwner);
  if (!s.ok()) spdlog::error("releasing internal lease: {}", s.ToString());
  if (!copied.ok()) return copied;
  return pinned->meta;
}

}  // namespace tierpool
