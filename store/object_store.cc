#include "store/object_store.h"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "common/checksum.h"
#include "common/logging.h"
#include "common/units.h"

namespace tierpool {

namespace {
std::uint64_t UnixMillis() {
  return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                        std::chrono::system_clock::now().time_since_epoch())
                                        .count());
}
}  // namespace

Status StoreConfig::validate() const {
  if (!(max_reserved_fraction_per_client > 0 && max_reserved_fraction_per_client <= 1)) {
    return Status::InvalidArgument("per-client reserved fraction must be in (0, 1]");
  }
  if (max_key_bytes == 0 || max_key_bytes > 64 * 1024) {
    return Status::InvalidArgument("max key bytes must be in [1, 65536]");
  }
  if (max_namespace_bytes > 64 * 1024) {
    return Status::InvalidArgument("max namespace bytes must be <= 65536");
  }
  if (maintenance_interval_ms == 0) {
    return Status::InvalidArgument("maintenance interval must be > 0");
  }
  for (std::size_t i = 0; i < spill_order.size(); ++i) {
    const TierKind k = spill_order[i];
    if (k != TierKind::kRemote && k != TierKind::kNvme) {
      return Status::InvalidArgument("the spill order lists the tiers below dram: remote, nvme");
    }
    if (std::find(spill_order.begin(), spill_order.begin() + i, k) != spill_order.begin() + i) {
      return Status::InvalidArgument("the spill order names " + std::string(TierName(k)) +
                                     " twice");
    }
  }
  return mover.validate();
}

Result<std::unique_ptr<ObjectStore>> ObjectStore::Create(StoreConfig config,
                                                         std::vector<std::unique_ptr<Tier>> tiers,
                                                         const Clock* clock) {
  TIERPOOL_RETURN_IF_ERROR(config.validate());
  bool has_dram = false;
  bool seen[kTierKindCount] = {};
  for (const auto& t : tiers) {
    if (!t) return Status::InvalidArgument("null tier");
    TIERPOOL_RETURN_IF_ERROR(t->watermarks().validate(TierName(t->kind())));
    if (seen[static_cast<int>(t->kind())]) return Status::InvalidArgument("two tiers of a kind");
    seen[static_cast<int>(t->kind())] = true;
    has_dram |= t->kind() == TierKind::kDram;
  }
  if (!has_dram) return Status::InvalidArgument("the store needs a dram tier");
  return std::unique_ptr<ObjectStore>(new ObjectStore(std::move(config), std::move(tiers), clock));
}

ObjectStore::ObjectStore(StoreConfig config, std::vector<std::unique_ptr<Tier>> tiers,
                         const Clock* clock)
    : config_(std::move(config)), clock_(clock) {
  std::array<Tier*, kTierKindCount> raw{};
  for (auto& t : tiers) {
    int k = static_cast<int>(t->kind());
    for (const ArenaInfo& a : t->Arenas()) {
      mapped_[k] = mapped_[k] || a.fd >= 0;
      on_device_[k] = on_device_[k] || a.device >= 0;
    }
    if (t->partitioned()) index_.SetPartitioned(t->kind());
    if (!t->keeps_retained_alone()) index_.SetNeedsGuard(t->kind());
    raw[k] = t.get();
    by_level_.push_back(t->kind());
    tiers_[k] = std::move(t);
  }
  // Top first: the tiers down to dram by level, then those the spill order names, in its
  // order, then the others by level. A tier's rank is its place in that order.
  std::sort(by_level_.begin(), by_level_.end(),
            [&](TierKind a, TierKind b) { return tier(a)->level() < tier(b)->level(); });
  std::vector<TierKind> order;
  for (TierKind k : by_level_) {
    if (tier(k)->level() <= tier(TierKind::kDram)->level()) order.push_back(k);
  }
  for (TierKind k : config_.spill_order) {
    if (tier(k) != nullptr) order.push_back(k);
  }
  for (TierKind k : by_level_) {
    if (std::find(order.begin(), order.end(), k) == order.end()) order.push_back(k);
  }
  by_level_ = std::move(order);
  for (std::size_t i = 0; i < by_level_.size(); ++i) {
    rank_[static_cast<int>(by_level_[i])] = static_cast<std::uint32_t>(i);
  }
  policy_ = std::make_unique<PlacementPolicy>(
      raw, rank_, config_.cache_policy == StoreConfig::CachePolicy::kDrop);
  std::uint64_t put_capacity = 0;
  for (TierKind k : {TierKind::kHbm, TierKind::kDram}) {
    if (tier(k) != nullptr) put_capacity += tier(k)->capacity();
  }
  max_reserved_bytes_ = static_cast<std::uint64_t>(static_cast<double>(put_capacity) *
                                                   config_.max_reserved_fraction_per_client);
  mover_ = std::make_unique<Mover>(config_.mover, clock_);
}

ObjectStore::~ObjectStore() {
  Stop();
  mover_->Stop();
}

void ObjectStore::Start() {
  std::lock_guard lock(mu_);
  if (maintenance_.joinable()) return;
  stopping_ = false;
  maintenance_ = std::thread([this] { MaintenanceLoop(); });
}

void ObjectStore::Stop() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (maintenance_.joinable()) maintenance_.join();
}

void ObjectStore::Quiesce() { mover_->Drain(); }

Status ObjectStore::ValidateName(const std::string& ns, const std::string& key) const {
  if (key.empty()) return Status::InvalidArgument("key is empty");
  if (key.size() > config_.max_key_bytes) {
    return Status::InvalidArgument("key of " + std::to_string(key.size()) +
                                   " bytes exceeds the limit of " +
                                   std::to_string(config_.max_key_bytes));
  }
  if (ns.size() > config_.max_namespace_bytes) {
    return Status::InvalidArgument("namespace of " + std::to_string(ns.size()) +
                                   " bytes exceeds the limit of " +
                                   std::to_string(config_.max_namespace_bytes));
  }
  return Status::Ok();
}

std::optional<TierKind> ObjectStore::TopCopy(const StoredObject& obj, bool mapped_only) const {
  for (TierKind k : by_level_) {
    if (obj.copy(k).present && (!mapped_only || mapped(k))) return k;
  }
  return std::nullopt;
}

void ObjectStore::UpdateTopLocked(StoredObject& obj) {
  if (auto top = TopCopy(obj, false)) obj.meta.tier = *top;
}

ObjectMeta ObjectStore::MetaLocked(const StoredObject& obj) const {
  ObjectMeta m = obj.meta;
  m.pins = obj.pins();
  return m;
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

// --- freeing --------------------------------------------------------------------------------

void ObjectStore::FreeCopyLocked(StoredObject& obj, TierKind t) {
  ObjectCopy& c = obj.copy(t);
  if (!c.present) return;
  KeepCopyLocked(obj, t);  // a free pending on its readers is done now
  if (c.extent.length > 0) {
    Status s = tier(t)->Free(c.extent);
    if (!s.ok()) spdlog::error("freeing a copy of object {}: {}", obj.id, s.ToString());
  }
  index_.ClearCopy(obj, t);
  UpdateTopLocked(obj);
}

void ObjectStore::FreeCopyWhenUnpinnedLocked(StoredObject& obj, TierKind t) {
  ObjectCopy& c = obj.copy(t);
  if (!c.present || c.free_on_unpin) return;
  if (c.pins == 0) {
    FreeCopyLocked(obj, t);
    return;
  }
  // Its readers hold its address: it goes when they let go. Until then its bytes count as
  // leaving, so whoever waits for room here waits for that (a release is a message away).
  c.free_on_unpin = true;
  LeavingLocked(t, obj.pool) += obj.meta.size;
}

void ObjectStore::KeepCopyLocked(StoredObject& obj, TierKind t) {
  ObjectCopy& c = obj.copy(t);
  if (!c.free_on_unpin) return;
  c.free_on_unpin = false;
  LeavingLocked(t, obj.pool) -= obj.meta.size;
}

void ObjectStore::CancelFreeOnUnpinLocked(StoredObject& obj, TierKind t) {
  if (!obj.copy(t).free_on_unpin) return;
  KeepCopyLocked(obj, t);
  ++counters_.drops_cancelled;
}

void ObjectStore::MaybeFreeLocked(StoredObject& obj) {
  if (!obj.doomed || obj.pins() > 0 || obj.move.has_value()) return;
  for (TierKind k : by_level_) FreeCopyLocked(obj, k);
  index_.Erase(obj);
}

void ObjectStore::DoomLocked(StoredObject& obj) {
  obj.doomed = true;
  index_.Unlink(obj);
  // A queued move nobody waits on is cancelled; one with callbacks runs out and reports.
  if (obj.move && obj.move->on_done.empty() && mover_->Cancel(obj.move->op_id)) {
    // It never started: nothing will complete it.
    const ObjectMove m = EndMoveLocked(obj);
    if (m.dst.length > 0) (void)tier(m.to)->Free(m.dst);
    ++counters_.migrations_aborted;
    moved_.notify_all();
  }
  MaybeFreeLocked(obj);
}

void ObjectStore::FreeReservationLocked(std::uint64_t id) {
  StoredObject* obj = index_.Find(id);
  if (obj == nullptr) return;
  index_.EraseReservation(id);
  obj->doomed = true;
  MaybeFreeLocked(*obj);
}

void ObjectStore::QuarantineLocked(StoredObject& obj, const Status& why) {
  if (obj.corrupt) return;
  obj.corrupt = true;
  obj.why_corrupt = why.message();
  index_.Refresh(obj);  // out of every candidate set: it never blocks anyone's room again
  ++counters_.quarantined;
  spdlog::error("object {}/{} quarantined: {}", obj.meta.ns, obj.meta.key, why.ToString());
}

void ObjectStore::UnpinLocked(std::uint64_t object_id, TierKind t) {
  StoredObject* obj = index_.Find(object_id);
  if (obj == nullptr) return;
  ObjectCopy& c = obj->copy(t);
  if (c.pins > 0) --c.pins;
  SettleUnpinnedLocked(object_id, t);
}

void ObjectStore::SettleUnpinnedLocked(std::uint64_t object_id, TierKind t) {
  StoredObject* obj = index_.Find(object_id);
  if (obj == nullptr) return;
  ObjectCopy& c = obj->copy(t);
  if (c.pins == 0 && c.free_on_unpin) {
    // The free asked for while it was read. A copy that is now a move's source, or the last
    // copy left, stays.
    if (obj->present_copies() >= 2 && !(obj->move && obj->move->from == t)) {
      FreeCopyLocked(*obj, t);
      ++counters_.drops_after_unpin;
      moved_.notify_all();  // room for whoever waits for it
    } else {
      KeepCopyLocked(*obj, t);
    }
  }
  // A copy kept (its free cancelled, or the last copy left) is a clean, redundant copy where
  // another exists: the policy drops it first when its tier needs room.
  index_.Refresh(*obj);
  MaybeFreeLocked(*obj);
}

// --- puts -----------------------------------------------------------------------------------

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

ObjectMeta ObjectStore::MetaOf(const PutSpec& spec, TierKind tier) {
  ObjectMeta meta;
  meta.ns = spec.ns;
  meta.key = spec.key;
  meta.size = spec.size;
  meta.dtype = spec.dtype;
  meta.shape = spec.shape;
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

std::optional<Reservation> ObjectStore::TryReserveShared(const PutSpec& spec, std::uint64_t owner,
                                                         bool staged) {
  if (spec.size == 0 || (spec.tier_hint && *spec.tier_hint != TierKind::kDram)) {
    return std::nullopt;
  }
  // Built before any lock: no other thread sees it until it is in the index.
  auto obj = std::make_unique<StoredObject>();
  obj->meta = MetaOf(spec, TierKind::kDram);
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
  StoredObject* added = index_.AddReservationIf(
      std::move(obj), owner, due, TierKind::kDram, *extent, [&](const OwnerHoldings& h) {
        return (!staged || h.staged < config_.max_staged_per_client) &&
               (owner == kStoreOwner || OverClientLimits(h, spec.size).empty());
      });
  if (added == nullptr) {  // over a limit: the exclusive path refuses it and says why
    (void)dram->Free(*extent);
    return std::nullopt;
  }
  return Reservation{added->id, *extent, TierKind::kDram};
}

Result<Reservation> ObjectStore::Reserve(const PutSpec& spec, std::uint64_t owner) {
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
  StoredObject& obj = index_.AddReservation(MetaOf(spec, placed), owner, ReservationDue(owner));
  obj.pool = pool;  // before its first copy: the index lists copies by pool
  obj.up_on_commit =
      spec.tier_hint == TierKind::kHbm && on_device(TierKind::kHbm) && placed != TierKind::kHbm;
  index_.SetCopy(obj, placed, extent);
  if (placed == TierKind::kHbm) wake_.notify_one();
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

Status ObjectStore::Delete(const std::string& ns, const std::string& key) {
  TIERPOOL_RETURN_IF_ERROR(ValidateName(ns, key));
  std::lock_guard lock(mu_);
  StoredObject* obj = index_.Lookup(ns, key);
  if (obj == nullptr) return Status::NotFound("no object " + ns + "/" + key);
  ++counters_.deletes;
  DoomLocked(*obj);
  return Status::Ok();
}

std::vector<ObjectMeta> ObjectStore::List(const std::string& ns, const std::string& prefix,
                                          const std::string& start_after, std::uint32_t limit,
                                          bool all_namespaces, bool* truncated) {
  std::lock_guard lock(mu_);
  std::vector<ObjectMeta> out;
  if (limit == 0) limit = 1000;
  *truncated = false;
  const std::string& from_key = std::max(prefix, start_after);
  const ObjectIndex::NameView from =
      all_namespaces ? ObjectIndex::NameView() : ObjectIndex::NameView(ns, from_key);
  index_.ForEachNameFrom(from, [&](const ObjectIndex::NameView& name, StoredObject& obj) {
    if (!all_namespaces) {
      if (name.first != ns || name.second.substr(0, prefix.size()) != prefix) return false;
      if (!start_after.empty() && name.second <= start_after) return true;
    }
    if (out.size() == limit) {
      *truncated = true;
      return false;
    }
    out.push_back(MetaLocked(obj));
    return true;
  });
  return out;
}

// --- owners, maintenance -------------------------------------------------------------------

void ObjectStore::ReleaseOwner(std::uint64_t owner) {
  std::lock_guard lock(mu_);
  auto reservations = index_.ReservationsOf(owner);
  for (std::uint64_t id : reservations) FreeReservationLocked(id);
  auto leases = leases_.Of(owner);
  for (std::uint64_t lease_id : leases) {
    if (auto l = leases_.Take(lease_id, owner); l.ok()) UnpinLocked(l->object_id, l->tier);
  }
  if (overdue_.erase(owner) != 0) overdue_count_.store(overdue_.size());
  if (!reservations.empty() || !leases.empty()) {
    ++counters_.sessions_cleaned;
    spdlog::debug("connection {} went away: released {} reservations and {} pins", owner,
                  reservations.size(), leases.size());
  }
}

void ObjectStore::RunMaintenance() {
  std::lock_guard lock(mu_);
  ExpireLocked(clock_->NowMicros());
  RelieveWatermarksLocked();
}

void ObjectStore::MaintenanceLoop() {
  for (;;) {
    {
      std::unique_lock lock(mu_);
      wake_.wait_for(lock, std::chrono::milliseconds(config_.maintenance_interval_ms));
      if (stopping_) return;
    }
    RunMaintenance();
  }
}

std::byte* ObjectStore::HostAddress(const Extent& extent) {
  for (auto& t : tiers_) {
    if (!t) continue;
    if (std::byte* p = t->HostAddress(extent)) return p;
  }
  return nullptr;
}

std::vector<ArenaInfo> ObjectStore::Arenas() const {
  std::vector<ArenaInfo> out;
  for (const auto& t : tiers_) {
    if (!t) continue;
    for (const auto& a : t->Arenas()) out.push_back(a);
  }
  return out;
}

void ObjectStore::ResetPeaks() {
  for (auto& t : tiers_) {
    if (t) t->ResetPeak();
  }
}

StoreStats ObjectStore::Stats() const {
  StoreStats s;
  {
    std::lock_guard lock(mu_);
    s = counters_;
    s.puts = puts_.Sum();
    s.reservations_staged = reservations_staged_.Sum();
    s.staged_commits = staged_commits_.Sum();
    s.bytes_put = bytes_put_.Sum();
    s.gets = gets_.Sum();
    s.get_misses = get_misses_.Sum();
    for (int k = 0; k < kTierKindCount; ++k) {
      if (!tiers_[k]) continue;
      s.tiers.push_back({tiers_[k]->Stats(), index_.copies_in(static_cast<TierKind>(k)),
                         tiers_[k]->watermarks()});
    }
    s.objects = index_.objects();
    s.reservations_open = index_.reservations();
    s.leases_open = leases_.size();
  }
  mover_->VisitLinks([&](const LinkStats& l) { s.links.push_back(l); });
  return s;
}

}  // namespace tierpool
