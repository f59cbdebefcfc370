#include "store/object_store.h"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "common/checksum.h"
#include "common/logging.h"
#include "common/units.h"

namespace tierpool {

Status StoreConfig::validate() const {
  if (!(max_reserved_fraction_per_client > 0 && max_reserved_fraction_per_client <= 1)) {
    return Status::InvalidArgument("per-client reserved fraction must be in (0, 1]");
  }
  for (double f : {max_reserved_fraction_per_process, max_reserved_fraction_per_user}) {
    if (!(f >= 0 && f <= 1)) {
      return Status::InvalidArgument("per-process and per-user reserved fractions are in [0, 1]");
    }
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
  index_.SetObjectLimits(config_.max_objects, config_.max_objects_per_namespace);
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
  auto share = [put_capacity](double fraction) {
    return static_cast<std::uint64_t>(static_cast<double>(put_capacity) * fraction);
  };
  max_reserved_bytes_ = share(config_.max_reserved_fraction_per_client);
  max_process_reserved_bytes_ = share(config_.max_reserved_fraction_per_process);
  max_user_reserved_bytes_ = share(config_.max_reserved_fraction_per_user);
  if (max_process_reserved_bytes_ != 0) group_check_bytes_ = max_process_reserved_bytes_ / 256;
  if (max_user_reserved_bytes_ != 0) {
    group_check_bytes_ = std::min(group_check_bytes_, max_user_reserved_bytes_ / 1024);
  }
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

Status ObjectStore::ValidateName(std::string_view ns, std::string_view key) const {
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

std::optional<TierKind> ObjectStore::ReadSource(const StoredObject& obj, bool mapped_only) const {
  for (TierKind k : by_level_) {
    const ObjectCopy& c = obj.copy(k);
    if (c.present && (!mapped_only || mapped(k)) && tier(k)->LikelyReadable(c.extent)) return k;
  }
  return TopCopy(obj, mapped_only);
}

void ObjectStore::UpdateTopLocked(StoredObject& obj) {
  if (auto top = TopCopy(obj, false)) obj.meta.tier = *top;
}

ObjectMeta ObjectStore::MetaLocked(const StoredObject& obj) const {
  ObjectMeta m = obj.meta;
  m.pins = obj.pins();
  return m;
}

// --- freeing --------------------------------------------------------------------------------

void ObjectStore::FreeCopyLocked(StoredObject& obj, TierKind t) {
  ObjectCopy& c = obj.copy(t);
  if (!c.present) return;
  KeepCopyLocked(obj, t);  // a free pending on its readers is done now
  if (t == TierKind::kNvme && obj.nvme_journaled) {
    // A doomed object's tombstone already says it is gone; a live one's record must not come
    // back once its extent holds another's.
    if (!obj.doomed) journal_->NoteNvmeGone(c.extent, obj.id);
    obj.nvme_journaled = false;
  }
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
  const bool awaited = obj.leaving_on_unpin;
  for (TierKind k : by_level_) FreeCopyLocked(obj, k);
  index_.Erase(obj);
  if (awaited) moved_.notify_all();  // room for whoever waits for it
}

void ObjectStore::DoomLocked(StoredObject& obj) {
  if (journal_ != nullptr && obj.meta.durability == Durability::kRetained) {
    journal_->NoteRemoval(obj.meta.ns, obj.meta.key);
  }
  obj.doomed = true;
  index_.Unlink(obj);
  // Copies a reader still holds go when it lets go. Until then their bytes count as leaving
  // their tiers, so a put that waits for room there (within a plan's budget) waits for them
  // rather than going to another tier: the reader's release is a message away.
  for (TierKind k : by_level_) {
    ObjectCopy& c = obj.copy(k);
    if (c.present && c.pins > 0 && !c.free_on_unpin) {
      c.free_on_unpin = true;
      LeavingLocked(k, obj.pool) += obj.meta.size;
      obj.leaving_on_unpin = true;
    }
  }
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
  if (obj->doomed) {  // every copy goes with its last reader (DoomLocked)
    MaybeFreeLocked(*obj);
    return;
  }
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

// --- names -----------------------------------------------------------------------------------

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

std::uint64_t ObjectStore::DeletePrefix(const std::string& ns, const std::string& prefix) {
  if (prefix.empty() || !ValidateName(ns, prefix).ok()) return 0;
  std::lock_guard lock(mu_);
  std::vector<StoredObject*> doomed;
  index_.ForEachNameFrom(ObjectIndex::NameView(ns, prefix),
                         [&](const ObjectIndex::NameView& name, StoredObject& obj) {
                           if (name.first != ns || name.second.substr(0, prefix.size()) != prefix)
                             return false;
                           doomed.push_back(&obj);
                           return true;
                         });
  // Unlinking changes the names being walked: doomed after the walk.
  for (StoredObject* obj : doomed) {
    ++counters_.deletes;
    DoomLocked(*obj);
  }
  return doomed.size();
}

// --- owners, maintenance -------------------------------------------------------------------

void ObjectStore::ReleaseOwner(std::uint64_t owner) {
  groups_.Erase(owner);
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
  TakeLostCopiesLocked();
  ReplaceLostCopiesLocked();
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
