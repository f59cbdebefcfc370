#include "store/object_store.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <unordered_set>

#include "common/checksum.h"
#include "common/logging.h"
#include "common/posix.h"
#include "common/units.h"

namespace tierpool {

namespace {
std::uint64_t UnixMillis() {
  return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                        std::chrono::system_clock::now().time_since_epoch())
                                        .count());
}
constexpr std::uint64_t kInternalOwner = 0;
}  // namespace

struct ObjectStore::Object {
  std::uint64_t id = 0;
  ObjectMeta meta;
  Extent extent;
  bool committed = false;
  std::uint64_t owner = 0;      // who may commit the reservation
  std::uint64_t expiry_us = 0;  // reservation deadline
  std::uint32_t pins = 0;
  bool linked = false;     // reachable through index_
  bool migrating = false;  // bytes being copied to another tier outside the lock
  bool doomed = false;     // deleted or replaced; freed once unpinned and not migrating
  bool in_lru = false;
  std::list<std::uint64_t>::iterator lru_pos;
};

Status StoreConfig::validate() const {
  if (reservation_ttl_ms == 0) return Status::InvalidArgument("reservation ttl must be > 0");
  if (lease_ttl_ms == 0) return Status::InvalidArgument("lease ttl must be > 0");
  if (max_key_bytes == 0 || max_key_bytes > 64 * 1024) {
    return Status::InvalidArgument("max key bytes must be in [1, 65536]");
  }
  if (max_namespace_bytes > 64 * 1024) {
    return Status::InvalidArgument("max namespace bytes must be <= 65536");
  }
  if (maintenance_interval_ms == 0) {
    return Status::InvalidArgument("maintenance interval must be > 0");
  }
  return Status::Ok();
}

Result<std::unique_ptr<ObjectStore>> ObjectStore::Create(StoreConfig config,
                                                         std::vector<std::unique_ptr<Tier>> tiers) {
  TIERPOOL_RETURN_IF_ERROR(config.validate());
  bool has_dram = false;
  for (const auto& t : tiers) {
    if (!t) return Status::InvalidArgument("null tier");
    TIERPOOL_RETURN_IF_ERROR(t->watermarks().validate(TierName(t->kind())));
    has_dram |= t->kind() == TierKind::kDram;
  }
  if (!has_dram) return Status::InvalidArgument("the store needs a dram tier");
  return std::unique_ptr<ObjectStore>(new ObjectStore(std::move(config), std::move(tiers)));
}

ObjectStore::ObjectStore(StoreConfig config, std::vector<std::unique_ptr<Tier>> tiers)
    : config_(std::move(config)) {
  for (auto& t : tiers) {
    int k = static_cast<int>(t->kind());
    tiers_[k] = std::move(t);
  }
  nvme_ = dynamic_cast<NvmeTier*>(tiers_[static_cast<int>(TierKind::kNvme)].get());
}

ObjectStore::~ObjectStore() { Stop(); }

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

ObjectMeta ObjectStore::MetaLocked(const Object& obj) const {
  ObjectMeta m = obj.meta;
  m.pins = obj.pins;
  return m;
}

void ObjectStore::TouchLocked(Object& obj) {
  if (!obj.in_lru) return;
  auto& list = lru_[static_cast<int>(obj.meta.tier)];
  list.splice(list.end(), list, obj.lru_pos);
}

void ObjectStore::FreeObjectLocked(std::uint64_t object_id) {
  auto it = objects_.find(object_id);
  if (it == objects_.end()) return;
  Object& obj = *it->second;
  if (obj.extent.length > 0) {
    Status s = tier(obj.meta.tier)->Free(obj.extent);
    if (!s.ok()) spdlog::error("freeing object {}: {}", object_id, s.ToString());
  }
  objects_.erase(it);
}

void ObjectStore::UnlinkLocked(Object& obj) {
  if (obj.linked) {
    index_.erase({obj.meta.ns, obj.meta.key});
    obj.linked = false;
  }
  if (obj.in_lru) {
    lru_[static_cast<int>(obj.meta.tier)].erase(obj.lru_pos);
    obj.in_lru = false;
  }
  obj.doomed = true;
  if (obj.pins == 0 && !obj.migrating) FreeObjectLocked(obj.id);
}

void ObjectStore::UnpinLocked(std::uint64_t object_id) {
  auto it = objects_.find(object_id);
  if (it == objects_.end()) return;
  Object& obj = *it->second;
  if (obj.pins > 0) --obj.pins;
  if (obj.doomed && obj.pins == 0 && !obj.migrating) FreeObjectLocked(object_id);
}

bool ObjectStore::EvictOneLocked(TierKind kind) {
  for (std::uint64_t id : lru_[static_cast<int>(kind)]) {
    Object& obj = *objects_.at(id);
    if (obj.meta.durability == Durability::kCache && obj.pins == 0 && !obj.migrating) {
      spdlog::debug("evicting cache object {}/{} ({}) from {}", obj.meta.ns, obj.meta.key,
                    FormatBytes(obj.meta.size), TierName(kind));
      ++counters_.evictions;
      UnlinkLocked(obj);
      return true;
    }
  }
  return false;
}

Result<Extent> ObjectStore::AllocateLocked(std::unique_lock<std::mutex>& lock, TierKind kind,
                                           std::uint64_t size, int numa_hint) {
  Tier* t = tier(kind);
  if (t == nullptr) return Status::FailedPrecondition(std::string(TierName(kind)) + " tier is off");
  std::uint64_t footprint = kind == TierKind::kNvme ? nvme_->RecordBytes(size) : size;
  if (footprint > t->capacity()) {
    return Status::ResourceExhausted(FormatBytes(size) + " is larger than the whole " +
                                     std::string(TierName(kind)) + " tier (" +
                                     FormatBytes(t->capacity()) + ")");
  }
  for (;;) {
    auto extent = t->Allocate(size, numa_hint);
    if (extent.ok()) return extent;
    // Room in hbm is made by demotion (Promote, maintenance), never by dropping here.
    if (kind == TierKind::kHbm) return extent.status();
    if (kind == TierKind::kDram && nvme_ != nullptr && SpillOneLocked(lock)) continue;
    // The last tier with room is full: drop `cache` objects, least recently used first.
    if (EvictOneLocked(kind)) continue;
    if (kind == TierKind::kDram && nvme_ != nullptr) {
      // nvme may be full of cache objects that can go to make room for a spill.
      if (EvictOneLocked(TierKind::kNvme) && SpillOneLocked(lock)) continue;
    }
    return extent.status();
  }
}

bool ObjectStore::SpillOneLocked(std::unique_lock<std::mutex>& lock) {
  if (nvme_ == nullptr) return false;
  std::vector<std::uint64_t> candidates;
  for (std::uint64_t id : lru_[static_cast<int>(TierKind::kDram)]) {
    const Object& obj = *objects_.at(id);
    if (obj.pins == 0 && !obj.migrating && obj.meta.size > 0) candidates.push_back(id);
    if (candidates.size() == 8) break;
  }
  for (std::uint64_t id : candidates) {
    auto it = objects_.find(id);
    if (it == objects_.end()) continue;
    Object& obj = *it->second;
    if (obj.pins > 0 || obj.migrating || obj.meta.tier != TierKind::kDram || !obj.linked) continue;
    if (obj.meta.durability == Durability::kCache &&
        config_.cache_policy == StoreConfig::CachePolicy::kDrop) {
      ++counters_.evictions;
      UnlinkLocked(obj);
      return true;
    }
    if (!nvme_->CheckWritable().ok()) return false;
    if (MigrateLocked(lock, id, TierKind::kNvme).ok()) return true;
  }
  return false;
}
Result<Reservation> ObjectStore::Reserve(const PutSpec& spec, std::uint64_t owner) {
  TIERPOOL_RETURN_IF_ERROR(ValidateName(spec.ns, spec.key));
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
  std::unique_lock lock(mu_);
  Extent extent;
  TierKind placed = TierKind::kDram;
  if (spec.size > 0) {
    std::vector<TierKind> order;
    if (spec.tier_hint == TierKind::kHbm && tier(TierKind::kHbm) != nullptr &&
        tier(TierKind::kHbm)->capacity() > 0) {
      order.push_back(TierKind::kHbm);
    }
    order.push_back(TierKind::kDram);
    Status last;
    bool ok = false;
    for (TierKind k : order) {
      auto e = AllocateLocked(lock, k, spec.size, spec.numa_node);
      if (e.ok()) {
        extent = *e;
        placed = k;
        ok = true;
        break;
      }
      last = e.status();
    }
    if (!ok) {
      ++counters_.resource_exhausted;
      Tier* d = tier(TierKind::kDram);
      return Status::ResourceExhausted(
          "no room for " + FormatBytes(spec.size) + " (" + last.message() + "; dram " +
          FormatBytes(d->used_bytes()) + " used of " + FormatBytes(d->capacity()) +
          "); retained objects are never evicted: delete some or give tierpoold more memory");
    }
  }
  auto obj = std::make_unique<Object>();
  obj->id = next_id_++;
  obj->meta.ns = spec.ns;
  obj->meta.key = spec.key;
  obj->meta.size = spec.size;
  obj->meta.dtype = spec.dtype;
  obj->meta.shape = spec.shape;
  obj->meta.kind = spec.kind;
  obj->meta.durability = spec.durability;
  obj->meta.tier = placed;
  obj->extent = extent;
  obj->owner = owner;
  obj->expiry_us = NowMicros() + config_.reservation_ttl_ms * 1000;
  Reservation r{obj->id, extent, placed};
  reservations_.insert(obj->id);
  objects_.emplace(obj->id, std::move(obj));
  if (placed == TierKind::kHbm) wake_.notify_one();
  return r;
}

Status ObjectStore::Commit(std::uint64_t reservation_id, std::uint64_t checksum,
                           std::uint64_t owner) {
  std::lock_guard lock(mu_);
  auto it = objects_.find(reservation_id);
  if (it == objects_.end() || it->second->committed || it->second->doomed) {
    return Status::NotFound("no open reservation " + std::to_string(reservation_id) +
                            " (expired, aborted or already committed)");
  }
  Object& obj = *it->second;
  if (obj.owner != owner) {
    return Status::PermissionDenied("reservation " + std::to_string(reservation_id) +
                                    " belongs to another connection");
  }
  reservations_.erase(obj.id);
  obj.committed = true;
  obj.meta.checksum = checksum;
  obj.meta.created_unix_ms = UnixMillis();
  ObjectKey key{obj.meta.ns, obj.meta.key};
  auto existing = index_.find(key);
  if (existing != index_.end()) UnlinkLocked(*objects_.at(existing->second));
  index_.emplace(std::move(key), obj.id);
  obj.linked = true;
  auto& list = lru_[static_cast<int>(obj.meta.tier)];
  obj.lru_pos = list.insert(list.end(), obj.id);
  obj.in_lru = true;
  ++counters_.puts;
  counters_.bytes_put += obj.meta.size;
  return Status::Ok();
}

Status ObjectStore::Abort(std::uint64_t reservation_id, std::uint64_t owner) {
  std::lock_guard lock(mu_);
  auto it = objects_.find(reservation_id);
  if (it == objects_.end() || it->second->committed) {
    return Status::NotFound("no open reservation " + std::to_string(reservation_id));
  }
  if (it->second->owner != owner) {
    return Status::PermissionDenied("reservation belongs to another connection");
  }
  reservations_.erase(reservation_id);
  FreeObjectLocked(reservation_id);
  return Status::Ok();
}

Status ObjectStore::PutCopy(const PutSpec& spec, const void* data, std::uint64_t owner) {
  auto r = Reserve(spec, owner);
  if (!r.ok()) return r.status();
  std::uint64_t checksum = Xxh3(nullptr, 0);
  if (spec.size > 0) checksum = CopyAndChecksum(HostAddress(r->extent), data, spec.size);
  return Commit(r->id, checksum, owner);
}

Status ObjectStore::EnsureInMemoryLocked(std::unique_lock<std::mutex>& lock, const ObjectKey& key) {
  constexpr int kNvmeReadAttempts = 3;
  int read_failures = 0;
  for (int attempt = 0; attempt < 100; ++attempt) {
    auto it = index_.find(key);
    if (it == index_.end()) return Status::NotFound("no object " + key.first + "/" + key.second);
    Object& obj = *objects_.at(it->second);
    if (obj.meta.tier != TierKind::kNvme) return Status::Ok();
    if (obj.migrating) {
      migration_done_.wait(lock);
      continue;
    }
    Status s = MigrateLocked(lock, obj.id, TierKind::kDram);
    if (s.ok()) {
      ++counters_.nvme_reads;
      return s;
    }
    if (s.code() == StatusCode::kAborted) continue;  // lost a race; look again
    ++counters_.nvme_read_failures;
    // A read error or a checksum mismatch may be transient (a flaky link, a bad DMA): the
    // record is read again before the caller hears of it. The bytes returned are checked anyway.
    bool transient = s.code() == StatusCode::kIoError || s.code() == StatusCode::kDataLoss;
    if (!transient || ++read_failures >= kNvmeReadAttempts) return s;
  }
  return Status::Aborted("object kept moving; try again");
}

Result<PinnedObject> ObjectStore::Pin(const std::string& ns, const std::string& key,
                                      std::uint64_t owner) {
  TIERPOOL_RETURN_IF_ERROR(ValidateName(ns, key));
  std::unique_lock lock(mu_);
  ++counters_.gets;
  if (Status s = EnsureInMemoryLocked(lock, {ns, key}); !s.ok()) {
    if (s.code() == StatusCode::kNotFound) ++counters_.get_misses;
    return s;
  }
  auto it = index_.find({ns, key});
  if (it == index_.end()) {
    ++counters_.get_misses;
    return Status::NotFound("no object " + ns + "/" + key);
  }
  Object& obj = *objects_.at(it->second);
  ++obj.pins;
  std::uint64_t lease_id = next_id_++;
  leases_.emplace(lease_id, Lease{obj.id, owner, NowMicros() + config_.lease_ttl_ms * 1000});
  TouchLocked(obj);
  return PinnedObject{lease_id, MetaLocked(obj), obj.extent};
}
Status ObjectStore::Release(std::uint64_t lease_id, std::uint64_t owner) {
  std::lock_guard lock(mu_);
  auto it = leases_.find(lease_id);
  if (it == leases_.end()) {
    return Status::NotFound("no lease " + std::to_string(lease_id) + " (expired or released)");
  }
  if (it->second.owner != owner) {
    return Status::PermissionDenied("lease belongs to another connection");
  }
  std::uint64_t object_id = it->second.object_id;
  leases_.erase(it);
  UnpinLocked(object_id);
  return Status::Ok();
}

Result<ObjectMeta> ObjectStore::Head(const std::string& ns, const std::string& key) {
  TIERPOOL_RETURN_IF_ERROR(ValidateName(ns, key));
  std::lock_guard lock(mu_);
  auto it = index_.find({ns, key});
  if (it == index_.end()) return Status::NotFound("no object " + ns + "/" + key);
  return MetaLocked(*objects_.at(it->second));
}

Result<ObjectMeta> ObjectStore::ReadCopy(const std::string& ns, const std::string& key,
                                         std::string* out) {
  auto pinned = Pin(ns, key, kInternalOwner);
  if (!pinned.ok()) return pinned.status();
  out->resize(pinned->meta.size);
  if (pinned->meta.size > 0) {
    std::memcpy(out->data(), HostAddress(pinned->extent), pinned->meta.size);
  }
  Status s = Release(pinned->lease_id, kInternalOwner);
  if (!s.ok()) spdlog::error("releasing internal lease: {}", s.ToString());
  return pinned->meta;
}

Status ObjectStore::Delete(const std::string& ns, const std::string& key) {
  TIERPOOL_RETURN_IF_ERROR(ValidateName(ns, key));
  std::lock_guard lock(mu_);
  auto it = index_.find({ns, key});
  if (it == index_.end()) return Status::NotFound("no object " + ns + "/" + key);
  ++counters_.deletes;
  UnlinkLocked(*objects_.at(it->second));
  return Status::Ok();
}

std::vector<ObjectMeta> ObjectStore::List(const std::string& ns, const std::string& prefix,
                                          const std::string& start_after, std::uint32_t limit,
                                          bool all_namespaces, bool* truncated) {
  std::lock_guard lock(mu_);
  std::vector<ObjectMeta> out;
  if (limit == 0) limit = 1000;
  *truncated = false;
  auto it =
      all_namespaces ? index_.begin() : index_.lower_bound({ns, std::max(prefix, start_after)});
  for (; it != index_.end(); ++it) {
    const auto& [k, id] = *it;
    if (!all_namespaces) {
      if (k.first != ns || k.second.compare(0, prefix.size(), prefix) != 0) break;
      if (!start_after.empty() && k.second <= start_after) continue;
    }
    if (out.size() == limit) {
      *truncated = true;
      break;
    }
    out.push_back(MetaLocked(*objects_.at(id)));
  }
  return out;
}

Status ObjectStore::CopyBetweenTiers(TierKind from, const Extent& src, TierKind to,
                                     const Extent& dst, const ObjectMeta& meta,
                                     std::uint64_t object_id) {
  RecordInfo info{KeyHash(meta.ns, meta.key), object_id, meta.size, meta.checksum};
  if (to == TierKind::kNvme) {
    const std::byte* bytes = tier(from)->HostAddress(src);
    // Clients map dram read-write: check the bytes still match their checksum before they go
    // to disk, so a record on nvme is never "verified" wrong bytes.
    if (Xxh3(bytes, meta.size) != meta.checksum) {
      return Status::DataLoss("bytes of " + meta.ns + "/" + meta.key +
                              " no longer match their checksum");
    }
    return nvme_->WriteRecord(dst, info, bytes);
  }
  if (from == TierKind::kNvme) return nvme_->ReadRecord(src, info, tier(to)->HostAddress(dst));
  std::memcpy(tier(to)->HostAddress(dst), tier(from)->HostAddress(src), meta.size);
  return Status::Ok();
}

Status ObjectStore::MigrateLocked(std::unique_lock<std::mutex>& lock, std::uint64_t object_id,
                                  TierKind target) {
  auto it = objects_.find(object_id);
  if (it == objects_.end()) return Status::NotFound("object vanished");
  Object* obj = it->second.get();
  if (!obj->committed || obj->doomed) return Status::NotFound("object is being deleted");
  if (obj->migrating) return Status::Aborted("object is already moving");
  if (obj->pins > 0) return Status::FailedPrecondition("object is pinned by a reader");
  const TierKind source = obj->meta.tier;
  if (source == target) return Status::Ok();
  if (tier(target) == nullptr) {
    return Status::FailedPrecondition(std::string(TierName(target)) + " tier is off");
  }
  if (target == TierKind::kNvme) TIERPOOL_RETURN_IF_ERROR(nvme_->CheckWritable());
  // From here the object cannot be freed or moved by anyone else (see `migrating`), though the
  // lock is dropped while room is made and while the bytes move.
  obj->migrating = true;
  auto finish = [&](Status s, std::optional<Extent> dst) {
    obj->migrating = false;
    migration_done_.notify_all();
    if (dst && dst->length > 0) {
      Status f = tier(target)->Free(*dst);
      if (!f.ok()) spdlog::error("freeing migration target: {}", f.ToString());
    }
    if (obj->doomed && obj->pins == 0) FreeObjectLocked(object_id);
    return s;
  };
  Extent dst;
  if (obj->meta.size > 0) {
    auto e = AllocateLocked(lock, target, obj->meta.size, -1);
    if (!e.ok()) return finish(e.status(), std::nullopt);
    dst = *e;
    if (obj->doomed) return finish(Status::Aborted("object was deleted while room was made"), dst);
    const Extent src = obj->extent;
    const ObjectMeta meta = obj->meta;
    lock.unlock();
    Status copied = CopyBetweenTiers(source, src, target, dst, meta, object_id);
    lock.lock();
    if (!copied.ok()) {
      if (target == TierKind::kNvme) ++counters_.spill_failures;
      if (copied.code() == StatusCode::kDataLoss && target == TierKind::kNvme) {
        ++counters_.corrupt_in_memory;
        spdlog::error("{}", copied.ToString());
      }
      return finish(copied, dst);
    }
    if (obj->doomed || obj->pins > 0) {
      // Deleted, or a reader pinned the source while it was copied: keep the source.
      ++counters_.migrations_aborted;
      return finish(Status::Aborted("object was deleted or pinned while it moved"), dst);
    }
    if (obj->extent.length > 0) {
      Status f = tier(source)->Free(obj->extent);
      if (!f.ok()) spdlog::error("freeing migration source: {}", f.ToString());
    }
  }
  if (obj->in_lru) lru_[static_cast<int>(source)].erase(obj->lru_pos);
  auto& list = lru_[static_cast<int>(target)];
  obj->lru_pos = list.insert(list.end(), obj->id);
  obj->in_lru = true;
  obj->extent = dst;
  obj->meta.tier = target;
  if (target == TierKind::kNvme) {
    ++counters_.spills;
  } else if (static_cast<int>(target) < static_cast<int>(source)) {
    ++counters_.promotions;
  } else {
    ++counters_.demotions;
  }
  return finish(Status::Ok(), std::nullopt);
}
// Demotes the least recently used unpinned hbm objects until `need` more bytes fit under the
// low watermark (need = 0: just get under it). A `cache` object with no room below is dropped.
void ObjectStore::DemoteUnderPressureLocked(std::unique_lock<std::mutex>& lock, TierKind kind) {
  Tier* t = tier(kind);
  if (t == nullptr || t->capacity() == 0) return;
  auto low = static_cast<std::uint64_t>(t->watermarks().low * static_cast<double>(t->capacity()));
  std::vector<std::uint64_t> candidates(lru_[static_cast<int>(kind)].begin(),
                                        lru_[static_cast<int>(kind)].end());
  for (std::uint64_t id : candidates) {
    if (t->used_bytes() <= low || stopping_) break;
    Status s = MigrateLocked(lock, id, TierKind::kDram);
    if (s.code() == StatusCode::kResourceExhausted) {
      auto it = objects_.find(id);
      if (it != objects_.end() && it->second->meta.durability == Durability::kCache &&
          it->second->pins == 0 && !it->second->migrating && it->second->meta.tier == kind) {
        ++counters_.evictions;
        UnlinkLocked(*it->second);
      }
    }
  }
}

// Spills dram's least recently used objects to nvme until dram is under its low watermark.
void ObjectStore::SpillUnderPressureLocked(std::unique_lock<std::mutex>& lock) {
  Tier* d = tier(TierKind::kDram);
  auto low = static_cast<std::uint64_t>(d->watermarks().low * static_cast<double>(d->capacity()));
  while (d->used_bytes() > low && !stopping_) {
    if (!nvme_->CheckWritable().ok() || !SpillOneLocked(lock)) break;
  }
}

Status ObjectStore::Promote(const std::string& ns, const std::string& key, TierKind target) {
  TIERPOOL_RETURN_IF_ERROR(ValidateName(ns, key));
  if (target != TierKind::kHbm && target != TierKind::kDram) {
    return Status::InvalidArgument("objects can be moved to hbm or dram only");
  }
  if (tier(target) == nullptr || tier(target)->capacity() == 0) {
    return Status::FailedPrecondition(std::string(TierName(target)) + " tier is off");
  }
  std::unique_lock lock(mu_);
  for (int attempt = 0; attempt < 1000; ++attempt) {
    auto it = index_.find({ns, key});
    if (it == index_.end()) return Status::NotFound("no object " + ns + "/" + key);
    std::uint64_t id = it->second;
    Object& obj = *objects_.at(id);
    if (obj.meta.tier == target) {
      TouchLocked(obj);
      return Status::Ok();
    }
    Status s = MigrateLocked(lock, id, target);
    if (s.code() != StatusCode::kResourceExhausted || target != TierKind::kHbm) return s;
    // Make room in hbm: demote its least recently used object that can move.
    bool moved = false;
    std::vector<std::uint64_t> victims(lru_[0].begin(), lru_[0].end());
    for (std::uint64_t v : victims) {
      if (v == id) continue;
      Status d = MigrateLocked(lock, v, TierKind::kDram);
      if (d.ok()) {
        moved = true;
        break;
      }
    }
    if (!moved) {
      return Status::ResourceExhausted("no room in hbm for " + ns + "/" + key +
                                       ": everything there is pinned or cannot move down");
    }
  }
  return Status::Aborted("promotion kept losing races; try again");
}

void ObjectStore::ReleaseOwner(std::uint64_t owner) {
  std::lock_guard lock(mu_);
  std::vector<std::uint64_t> dead;
  for (std::uint64_t id : reservations_) {
    if (objects_.at(id)->owner == owner) dead.push_back(id);
  }
  for (std::uint64_t id : dead) {
    reservations_.erase(id);
    FreeObjectLocked(id);
  }
  std::vector<std::uint64_t> dead_leases;
  for (const auto& [lease_id, lease] : leases_) {
    if (lease.owner == owner) dead_leases.push_back(lease_id);
  }
  for (std::uint64_t lease_id : dead_leases) {
    std::uint64_t object_id = leases_.at(lease_id).object_id;
    leases_.erase(lease_id);
    UnpinLocked(object_id);
  }
  if (!dead.empty() || !dead_leases.empty()) {
    ++counters_.sessions_cleaned;
    spdlog::debug("connection {} went away: released {} reservations and {} pins", owner,
                  dead.size(), dead_leases.size());
  }
}

void ObjectStore::ExpireLocked(std::uint64_t now_us) {
  std::vector<std::uint64_t> dead;
  for (std::uint64_t id : reservations_) {
    if (objects_.at(id)->expiry_us <= now_us) dead.push_back(id);
  }
  for (std::uint64_t id : dead) {
    spdlog::warn("reservation {} for {}/{} was never committed; freeing it", id,
                 objects_.at(id)->meta.ns, objects_.at(id)->meta.key);
    reservations_.erase(id);
    FreeObjectLocked(id);
    ++counters_.reservations_expired;
  }
  std::vector<std::uint64_t> dead_leases;
  for (const auto& [lease_id, lease] : leases_) {
    if (lease.expiry_us <= now_us) dead_leases.push_back(lease_id);
  }
  for (std::uint64_t lease_id : dead_leases) {
    std::uint64_t object_id = leases_.at(lease_id).object_id;
    leases_.erase(lease_id);
    UnpinLocked(object_id);
    ++counters_.leases_expired;
  }
}

void ObjectStore::RunMaintenance() {
  std::unique_lock lock(mu_);
  ExpireLocked(NowMicros());
  Tier* hbm = tier(TierKind::kHbm);
  if (hbm != nullptr && hbm->capacity() > 0 &&
      static_cast<double>(hbm->used_bytes()) >
          hbm->watermarks().high * static_cast<double>(hbm->capacity())) {
    DemoteUnderPressureLocked(lock, TierKind::kHbm);
  }
  Tier* dram = tier(TierKind::kDram);
  if (nvme_ != nullptr && static_cast<double>(dram->used_bytes()) >
                              dram->watermarks().high * static_cast<double>(dram->capacity())) {
    SpillUnderPressureLocked(lock);
  }
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

StoreStats ObjectStore::Stats() const {
  std::lock_guard lock(mu_);
  StoreStats s = counters_;
  for (int k = 0; k < kTierKindCount; ++k) {
    if (!tiers_[k]) continue;
    s.tiers.push_back({tiers_[k]->Stats(), lru_[k].size(), tiers_[k]->watermarks()});
  }
  s.objects = index_.size();
  s.reservations_open = reservations_.size();
  s.leases_open = leases_.size();
  return s;
}

}  // namespace tierpool
