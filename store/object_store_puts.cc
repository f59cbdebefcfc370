// Puts: a put's spec checked, its room reserved (under the shared lock when free room will do,
// else making room by the policy), and its commit naming the object and freeing what it
// replaced; aborts, and the store's own copying puts. The class and its locking:
// store/object_store.h.
#include <ctime>
#include <shared_mutex>

#include "common/checksum.h"
#include "common/logging.h"
#include "common/units.h"
#include "store/object_store.h"

namespace tierpool {

namespace {
// An object's creation time, to within the kernel's tick (4 ms here): the coarse clock is a
// read of memory (4 ns here, against 16 for the exact one), and a put batch reads it per object.
std::uint64_t UnixMillis() {
  timespec now{};
  clock_gettime(CLOCK_REALTIME_COARSE, &now);
  return static_cast<std::uint64_t>(now.tv_sec) * 1000 +
         static_cast<std::uint64_t>(now.tv_nsec) / 1'000'000;
}
}  // namespace

Status ObjectStore::CheckPutSpec(const PutSpec& spec, bool named) const {
  if (named) {
    TIERPOOL_RETURN_IF_ERROR(ValidateName(spec.ns, spec.key));
  } else if (!spec.key.empty()) {
    return Status::InvalidArgument("a staged reservation has no key: the commit names it");
  } else {
    TIERPOOL_RETURN_IF_ERROR(ValidateName(spec.ns, "staged"));  // the namespace's length
  }
  if (spec.dtype.size() > config_.max_dtype_bytes) {
    return Status::InvalidArgument("dtype name too long");
  }
  if (spec.shape.size() > config_.max_shape_dims) {
    return Status::InvalidArgument("shape has more than " + std::to_string(config_.max_shape_dims) +
                                   " dimensions");
  }
  if (config_.max_object_bytes != 0 && spec.size > config_.max_object_bytes) {
    return Status::InvalidArgument("object of " + FormatBytes(spec.size) +
                                   " exceeds the limit of " +
                                   FormatBytes(config_.max_object_bytes));
  }
  if (spec.tier_hint && *spec.tier_hint != TierKind::kHbm && *spec.tier_hint != TierKind::kDram) {
    return Status::InvalidArgument("puts may target hbm or dram only");
  }
  return Status::Ok();
}

ObjectMeta ObjectStore::MetaOf(PutSpec&& spec, TierKind tier) {
  ObjectMeta meta;
  meta.ns = std::move(spec.ns);
  meta.key = std::move(spec.key);
  meta.size = spec.size;
  meta.dtype = std::move(spec.dtype);
  meta.shape = std::move(spec.shape);
  meta.kind = spec.kind;
  meta.durability = spec.durability;
  meta.tier = tier;
  return meta;
}

std::uint64_t ObjectStore::ReservationDue(std::uint64_t owner) const {
  return config_.reservation_ttl_ms == 0 || owner == kStoreOwner
             ? 0
             : clock_->NowMicros() + config_.reservation_ttl_ms * 1000;
}

std::optional<Reservation> ObjectStore::TryReserveShared(PutSpec& spec, std::uint64_t owner,
                                                         bool staged) {
  if (spec.size == 0 || (spec.tier_hint && *spec.tier_hint != TierKind::kDram)) {
    return std::nullopt;
  }
  // Built before any lock: no other thread sees it until it is in the index.
  auto obj = std::make_unique<StoredObject>();
  const std::uint64_t due = staged ? 0 : ReservationDue(owner);  // staged room is idle by design
  std::shared_lock lock(mu_);
  // A quota is checked against every put of its namespace at once: the exclusive path.
  if (!quotas_.empty() && quotas_.count(spec.ns) != 0) return std::nullopt;
  Tier* dram = tier(TierKind::kDram);
  const std::uint32_t pool = PoolOfLocked(spec.ns);
  // Free room only, as the exclusive path's first try takes it; making room is that path's.
  auto extent = dram->Allocate(spec.size, {spec.numa_node, pool});
  if (!extent.ok()) return std::nullopt;
  // Room nobody asked for yet never pushes dram over its high watermark: the exclusive path
  // says no, and why.
  if (staged && policy_->OverWatermark(TierKind::kDram, pool, 0) > 0) {
    (void)dram->Free(*extent);
    return std::nullopt;
  }
  obj->pool = pool;
  const std::uint64_t size = spec.size;
  obj->meta = MetaOf(std::move(spec), TierKind::kDram);
  StoredObject* added = index_.AddReservationIf(
      obj, owner, due, TierKind::kDram, *extent, [&](const OwnerHoldings& h) {
        // A connection that must be counted with its siblings goes the exclusive way.
        return (!staged || h.staged < config_.max_staged_per_client) &&
               (owner == kStoreOwner ||
                (OverClientLimits(h, size).empty() && !NeedsGroupCheck(h, size)));
      });
  if (added == nullptr) {  // over a limit: the exclusive path refuses it and says why
    (void)dram->Free(*extent);
    // Its names go back for that path to use.
    spec.ns = std::move(obj->meta.ns);
    spec.key = std::move(obj->meta.key);
    spec.dtype = std::move(obj->meta.dtype);
    spec.shape = std::move(obj->meta.shape);
    return std::nullopt;
  }
  return Reservation{added->id, *extent, TierKind::kDram};
}

Result<Reservation> ObjectStore::Reserve(const PutSpec& spec, std::uint64_t owner) {
  return Reserve(PutSpec(spec), owner);
}

Result<Reservation> ObjectStore::Reserve(PutSpec&& spec, std::uint64_t owner) {
  TIERPOOL_RETURN_IF_ERROR(CheckPutSpec(spec, /*named=*/true));
  if (auto r = TryReserveShared(spec, owner, /*staged=*/false)) return *r;
  std::unique_lock lock(mu_);
  TIERPOOL_RETURN_IF_ERROR(AdmitReserveLocked(spec, owner));
  const std::uint32_t pool = PoolOfLocked(spec.ns);
  Extent extent;
  TierKind placed = TierKind::kDram;
  if (spec.size > 0) {
    Status last;
    bool ok = false;
    // A put into hbm makes room there by moving least recently used copies down (a plan's own
    // objects excepted: their moves are the executor's, and the put waits for those in flight),
    // and goes to dram only when no room can be made (or the namespace may hold no more there).
    Tier* hbm = tier(TierKind::kHbm);
    // A device hbm takes only device reservations; other puts land in dram and are copied up
    // as they commit.
    const bool device_put = spec.device_ok && on_device(TierKind::kHbm) && !config_.verify_commits;
    if (spec.tier_hint == TierKind::kHbm && hbm != nullptr &&
        (mapped(TierKind::kHbm) || device_put) && hbm->SpaceOf(pool).capacity > 0 &&
        WithinTierQuotaLocked(spec.ns, TierKind::kHbm, spec.size).ok() &&
        WithinPlanBudgetLocked(lock, spec.ns, spec.size)) {
      auto e = AllocateLocked(lock, TierKind::kHbm, spec.size, {spec.numa_node, pool}, true,
                              MovePriority::kDemand);
      if (e.ok()) {
        extent = *e;
        placed = TierKind::kHbm;
        ok = true;
      } else {
        spdlog::debug("put {}/{} ({}) goes to dram: {}", spec.ns, spec.key, FormatBytes(spec.size),
                      e.status().ToString());
      }
    } else if (spec.tier_hint == TierKind::kHbm && planned_ns_.count(spec.ns) != 0) {
      spdlog::debug("put {}/{} ({}) goes to dram: its job's hbm budget is full", spec.ns, spec.key,
                    FormatBytes(spec.size));
    }
    // hbm's room would have come from a wait this thread may not make: not dram instead.
    if (WaitRefused()) return Status::Unavailable("not waited for room on an I/O thread");
    if (!ok) {
      TIERPOOL_RETURN_IF_ERROR(WithinTierQuotaLocked(spec.ns, TierKind::kDram, spec.size));
      auto e = AllocateLocked(lock, TierKind::kDram, spec.size, {spec.numa_node, pool}, true,
                              MovePriority::kDemand);
      if (e.ok()) {
        extent = *e;
        ok = true;
      } else {
        last = e.status();
      }
    }
    if (!ok && WaitRefused()) return last;
    if (!ok) {
      ++counters_.resource_exhausted;
      const PoolSpace d = tier(TierKind::kDram)->SpaceOf(pool);
      return Status::ResourceExhausted(
          "no room for " + FormatBytes(spec.size) + " (" + last.message() + "; " +
          RoomNameLocked(TierKind::kDram, pool) + " " + FormatBytes(d.used) + " used of " +
          FormatBytes(d.capacity) +
          "); retained objects are never evicted: delete some or give tierpoold more memory");
    }
  }
  const bool up_on_commit =
      spec.tier_hint == TierKind::kHbm && on_device(TierKind::kHbm) && placed != TierKind::kHbm;
  StoredObject& obj =
      index_.AddReservation(MetaOf(std::move(spec), placed), owner, ReservationDue(owner));
  obj.pool = pool;  // before its first copy: the index lists copies by pool
  obj.up_on_commit = up_on_commit;
  index_.SetCopy(obj, placed, extent);
  if (placed == TierKind::kHbm) {
    NoteHbmUseLocked(obj.meta.ns);
    wake_.notify_one();
  }
  return Reservation{obj.id, extent, placed};
}

Status ObjectStore::Commit(std::uint64_t reservation_id, std::uint64_t checksum,
                           std::uint64_t owner, const PutSpec* name) {
  if (config_.verify_commits && owner != kStoreOwner) {
    // Hashed outside the lock: the extent stays the reservation's while its owner is in this
    // call (only the owner aborts it, and its connection cannot close during a request).
    std::optional<std::pair<Extent, std::uint64_t>> bytes;
    {
      std::lock_guard lock(mu_);
      StoredObject* obj = index_.Find(reservation_id);
      if (obj != nullptr && !obj->committed && !obj->doomed && obj->owner == owner &&
          index_.IsReservation(reservation_id)) {
        // Staged room holds a put of its size or less: the bytes are the ones the commit names.
        const bool staged = obj->meta.key.empty() && name != nullptr && name->size > 0 &&
                            name->size <= obj->meta.size;
        bytes.emplace(obj->copy(obj->meta.tier).extent, staged ? name->size : obj->meta.size);
      }
    }
    if (bytes && bytes->second > 0 && Xxh3(HostAddress(bytes->first), bytes->second) != checksum) {
      std::lock_guard lock(mu_);
      ++counters_.commits_rejected;
      if (index_.IsReservation(reservation_id)) FreeReservationLocked(reservation_id);
      return Status::DataLoss(
          "the bytes written do not match the checksum committed; the put "
          "is dropped");
    }
  }
  const std::uint64_t created_unix_ms = UnixMillis();
  std::uint64_t doom = 0;
  if (auto shared =
          TryCommitShared(reservation_id, checksum, owner, name, created_unix_ms, &doom)) {
    if (doom != 0) {
      // What is left to free is read or moving: it goes as the exclusive path decides.
      std::lock_guard lock(mu_);
      if (StoredObject* left = index_.Find(doom);
          left != nullptr && !left->doomed && !left->linked) {
        DoomLocked(*left);
      }
    }
    return *shared;
  }
  std::lock_guard lock(mu_);
  StoredObject* obj = index_.Find(reservation_id);
  if (obj == nullptr || obj->committed || obj->doomed || !index_.IsReservation(reservation_id)) {
    return Status::NotFound("no open reservation " + std::to_string(reservation_id) +
                            " (expired, aborted or already committed)");
  }
  if (obj->owner != owner) {
    return Status::PermissionDenied("reservation " + std::to_string(reservation_id) +
                                    " belongs to another connection");
  }
  const bool staged = obj->meta.key.empty();
  if (staged || name != nullptr) {
    if (name == nullptr) {
      FreeReservationLocked(reservation_id);
      return Status::InvalidArgument("reservation " + std::to_string(reservation_id) +
                                     " is staged: its commit must name the object (it is freed)");
    }
    if (!staged) {
      FreeReservationLocked(reservation_id);
      return Status::InvalidArgument("reservation " + std::to_string(reservation_id) +
                                     " was made for a key: its commit may not name one (it is "
                                     "freed)");
    }
    TIERPOOL_RETURN_IF_ERROR(BindStagedLocked(*obj, *name));
    staged_commits_.Add(owner);
  }
  obj->meta.checksum = checksum;
  obj->meta.created_unix_ms = created_unix_ms;
  if (StoredObject* replaced = index_.Commit(*obj)) DoomLocked(*replaced);
  puts_.Add(owner);
  bytes_put_.Add(owner, obj->meta.size);
  if (obj->up_on_commit) CopyUpAfterPutLocked(*obj);
  return Status::Ok();
}

std::optional<Status> ObjectStore::TryCommitShared(std::uint64_t reservation_id,
                                                   std::uint64_t checksum, std::uint64_t owner,
                                                   const PutSpec* name,
                                                   std::uint64_t created_unix_ms,
                                                   std::uint64_t* doom) {
  // A name must be one its staged room can take, checked before the claim (which is not
  // undone); a name that cannot, and a copy up, are the exclusive path's.
  if (name != nullptr && (!CheckPutSpec(*name, /*named=*/true).ok() ||
                          (name->tier_hint == TierKind::kHbm && on_device(TierKind::kHbm)))) {
    return std::nullopt;
  }
  std::shared_lock lock(mu_);
  StoredObject* obj = index_.ClaimReservation(reservation_id, owner, [&](const StoredObject& o) {
    if (o.committed || o.doomed || o.up_on_commit) return false;
    if (name == nullptr) return !o.meta.key.empty();
    return o.meta.key.empty() && StagedRoomTakes(o, *name);
  });
  if (obj == nullptr) return std::nullopt;
  // Claimed: no other thread reaches it until Commit links it.
  if (name != nullptr) {
    if (Status s = NameStagedRoom(*obj, *name); !s.ok()) {
      *doom = obj->id;  // claimed and named by nobody: freed on the exclusive path
      return s;
    }
    staged_commits_.Add(owner);
  }
  obj->meta.checksum = checksum;
  obj->meta.created_unix_ms = created_unix_ms;
  const std::uint64_t size = obj->meta.size;
  bool unused = false;
  if (StoredObject* replaced = index_.Commit(*obj, &unused)) {
    if (journal_ != nullptr && replaced->meta.durability == Durability::kRetained) {
      journal_->NoteRemoval(replaced->meta.ns, replaced->meta.key);
    }
    if (!unused || !FreeUnreachableShared(*replaced)) *doom = replaced->id;
  }
  puts_.Add(owner);
  bytes_put_.Add(owner, size);
  return Status::Ok();
}

bool ObjectStore::FreeUnreachableShared(StoredObject& obj) {
  for (int k = 0; k < kTierKindCount; ++k) {
    // A copy below memory or on a device is freed through its tier's own paths: exclusive.
    if (obj.copies[k].present && !mapped(static_cast<TierKind>(k))) return false;
  }
  obj.doomed = true;
  for (TierKind k : by_level_) {
    const ObjectCopy& c = obj.copy(k);
    if (!c.present || c.extent.length == 0) continue;
    Status s = tier(k)->Free(c.extent);
    if (!s.ok()) spdlog::error("freeing a copy of object {}: {}", obj.id, s.ToString());
  }
  index_.Erase(obj);  // its copies' records with it
  return true;
}

Status ObjectStore::Abort(std::uint64_t reservation_id, std::uint64_t owner) {
  std::lock_guard lock(mu_);
  StoredObject* obj = index_.Find(reservation_id);
  if (obj == nullptr || obj->committed || !index_.IsReservation(reservation_id)) {
    return Status::NotFound("no open reservation " + std::to_string(reservation_id));
  }
  if (obj->owner != owner) {
    return Status::PermissionDenied("reservation belongs to another connection");
  }
  FreeReservationLocked(reservation_id);
  return Status::Ok();
}

Status ObjectStore::PutCopy(const PutSpec& spec, const void* data, std::uint64_t owner) {
  auto r = Reserve(spec, owner);
  if (!r.ok()) return r.status();
  std::uint64_t checksum = Xxh3(nullptr, 0);
  if (spec.size > 0)
    checksum = CopyAndChecksum(HostAddress(r->extent), data, spec.size, CopyTarget::kFresh);
  return Commit(r->id, checksum, owner);
}

}  // namespace tierpool
