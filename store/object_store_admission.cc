// Admission: what a connection and a namespace may hold, and for how long. The limits are
// checked under mu_ where a reservation or a pin is taken; the probe ReserveMayWait lets the
// service keep puts that may wait for room off the transport's I/O thread (a get has none: a pin
// that must wait refuses on the I/O thread before it pins anything).
#include <shared_mutex>

#include "common/logging.h"
#include "common/units.h"
#include "store/object_store.h"

namespace tierpool {

std::string ObjectStore::OverClientLimits(const OwnerHoldings& h, std::uint64_t size) const {
  if (config_.max_reservations_per_client != 0 &&
      h.reservations >= config_.max_reservations_per_client) {
    return std::to_string(h.reservations) + " reservations open (limit " +
           std::to_string(config_.max_reservations_per_client) + ")";
  }
  if (h.reservations != 0 && h.reserved_bytes + size > max_reserved_bytes_) {
    // A connection's first reservation may be of any size the tiers take: one object larger
    // than the share is a legitimate put, many open at once are not.
    return FormatBytes(h.reserved_bytes) + " reserved, and " + FormatBytes(size) +
           " more would pass the per-connection limit of " + FormatBytes(max_reserved_bytes_);
  }
  return {};
}

Status ObjectStore::AdmitReserveLocked(const PutSpec& spec, std::uint64_t owner) {
  if (owner != kStoreOwner) {
    const OwnerHoldings h = index_.HoldingsOf(owner);
    const std::string over = OverClientLimits(h, spec.size);
    if (!over.empty()) {
      ++counters_.client_limit_refusals;
      return Status::ResourceExhausted("this connection has " + over +
                                       ": commit or abort some first");
    }
    if (NeedsGroupCheck(h, spec.size)) {
      TIERPOOL_RETURN_IF_ERROR(WithinGroupLimitsLocked(owner, spec.size));
    }
  }
  TIERPOOL_RETURN_IF_ERROR(WithinObjectLimitsLocked(spec, owner));
  if (auto q = quotas_.find(spec.ns); q != quotas_.end()) {
    const NamespaceUsage u = index_.UsageOf(spec.ns);
    const bool new_name = index_.Lookup(spec.ns, spec.key) == nullptr;
    std::string over;
    if (q->second.max_bytes != 0 && u.bytes + spec.size > q->second.max_bytes) {
      over = FormatBytes(u.bytes) + " held, and " + FormatBytes(spec.size) +
             " more would pass its quota of " + FormatBytes(q->second.max_bytes);
    } else if (q->second.max_objects != 0 && new_name && u.objects >= q->second.max_objects) {
      over = std::to_string(u.objects) + " objects, its quota";
    }
    if (!over.empty()) {
      ++counters_.quota_refusals;
      return Status::ResourceExhausted("namespace '" + spec.ns + "' has " + over +
                                       ": delete some of its objects first");
    }
  }
  return Status::Ok();
}

Status ObjectStore::WithinGroupLimitsLocked(std::uint64_t owner, std::uint64_t size) {
  const auto who = groups_.Of(owner);
  if (!who) return Status::Ok();  // the store's own, or a connection that said no Hello
  for (bool process : {true, false}) {
    const std::uint64_t limit = process ? max_process_reserved_bytes_ : max_user_reserved_bytes_;
    if (limit == 0) continue;
    std::uint64_t held = 0;
    const auto siblings = groups_.Like(*who, process);
    for (std::uint64_t o : siblings) held += index_.HoldingsOf(o).reserved_bytes;
    // As for a connection: a group that holds nothing open may reserve one object of any size.
    if (held == 0 || held + size <= limit) continue;
    ++counters_.client_limit_refusals;
    return Status::ResourceExhausted(
        std::string(process ? "this process (pid " + std::to_string(who->pid)
                            : "this user (uid " + std::to_string(who->uid)) +
        ") holds " + FormatBytes(held) + " in open reservations over " +
        std::to_string(siblings.size()) + " connections, and " + FormatBytes(size) +
        " more would pass its share of " + FormatBytes(limit) +
        (process ? " (--max-reserved-fraction-per-process)"
                 : " (--max-reserved-fraction-per-user)") +
        ": commit or abort some first");
  }
  return Status::Ok();
}

Status ObjectStore::WithinObjectLimitsLocked(const PutSpec& spec, std::uint64_t owner) {
  const ObjectCountLimits& limits = index_.object_limits();
  // Far from both limits by the sloppy counts (the common case): nothing to count exactly. The
  // store's own objects (a snapshot read back) are never refused.
  if (owner == kStoreOwner || !limits.AnyNear()) return Status::Ok();
  if (!spec.key.empty() && index_.Lookup(spec.ns, spec.key) != nullptr) return Status::Ok();
  std::string over;
  if (limits.max_total() != 0) {
    if (const std::uint64_t n = index_.ObjectsExactly(); n >= limits.max_total()) {
      over = "tierpoold holds " + std::to_string(n) + " objects, its limit (--max-objects " +
             std::to_string(limits.max_total()) + ")";
    }
  }
  if (over.empty() && limits.max_per_namespace() != 0) {
    if (const std::uint64_t n = index_.ObjectsExactly(spec.ns); n >= limits.max_per_namespace()) {
      over = "namespace '" + spec.ns + "' holds " + std::to_string(n) +
             " objects, the limit per namespace (--max-objects-per-namespace " +
             std::to_string(limits.max_per_namespace()) + ")";
    }
  }
  if (over.empty()) return Status::Ok();
  ++counters_.object_limit_refusals;
  return Status::ResourceExhausted(over + ": delete some objects first, or raise the limit");
}

bool ObjectStore::AtPinLimit(std::uint64_t owner) const {
  return owner != kStoreOwner && config_.max_leases_per_client != 0 &&
         leases_.CountOf(owner) >= config_.max_leases_per_client;
}

std::uint64_t ObjectStore::LeaseDue(std::uint64_t owner) const {
  return config_.lease_ttl_ms == 0 || owner == kStoreOwner
             ? 0
             : clock_->NowMicros() + config_.lease_ttl_ms * 1000;
}

Status ObjectStore::AdmitPinLocked(std::uint64_t owner) {
  if (AtPinLimit(owner)) {
    ++counters_.client_limit_refusals;
    return Status::ResourceExhausted("this connection holds " +
                                     std::to_string(config_.max_leases_per_client) +
                                     " pins (the per-connection limit): release some first");
  }
  return Status::Ok();
}

Status ObjectStore::WithinTierQuotaLocked(const std::string& ns, TierKind kind,
                                          std::uint64_t bytes) {
  if (quotas_.empty()) return Status::Ok();
  auto q = quotas_.find(ns);
  if (q == quotas_.end()) return Status::Ok();
  const std::uint64_t limit = q->second.max_tier_bytes[static_cast<int>(kind)];
  if (limit == 0) return Status::Ok();
  const std::uint64_t held = index_.TierBytesOf(ns, kind);
  if (held + bytes <= limit) return Status::Ok();
  ++counters_.quota_refusals;
  return Status::ResourceExhausted("namespace '" + ns + "' has " + FormatBytes(held) + " in " +
                                   std::string(TierName(kind)) + ", and " + FormatBytes(bytes) +
                                   " more would pass its quota there of " + FormatBytes(limit));
}

void ObjectStore::SetQuotas(std::unordered_map<std::string, NamespaceQuota> quotas) {
  std::lock_guard lock(mu_);
  quotas_ = std::move(quotas);
}

void ObjectStore::SetPools(std::vector<NamespacePool> pools) {
  std::lock_guard lock(mu_);
  pools_ = std::move(pools);
}

std::uint32_t ObjectStore::PoolOf(const std::string& ns) const {
  std::lock_guard lock(mu_);
  return PoolOfLocked(ns);
}

NamespaceUsage ObjectStore::UsageOf(const std::string& ns) const {
  std::lock_guard lock(mu_);
  return index_.UsageOf(ns);
}

PoolSpace ObjectStore::SpaceOf(TierKind kind, std::uint32_t pool) const {
  const Tier* t = tier(kind);
  return t == nullptr ? PoolSpace{} : t->SpaceOf(pool);
}

Status ObjectStore::CheckOwner(std::uint64_t owner) const {
  if (overdue_count_.load(std::memory_order_relaxed) == 0) return Status::Ok();
  std::lock_guard lock(mu_);
  if (overdue_.count(owner) == 0) return Status::Ok();
  return Status::FailedPrecondition(
      "this connection held a reservation or a pin past the server's time limit; it is refused "
      "until it reconnects (what it held is freed when it closes)");
}

std::uint64_t ObjectStore::ReservedBytes(const std::vector<std::uint64_t>& reservation_ids) {
  std::lock_guard lock(mu_);
  std::uint64_t total = 0;
  for (std::uint64_t id : reservation_ids) {
    if (const StoredObject* obj = index_.Find(id); obj != nullptr && index_.IsReservation(id)) {
      total += obj->meta.size;
    }
  }
  return total;
}

std::vector<std::pair<std::string, std::string>> ObjectStore::NamesOfReservations(
    const std::vector<std::uint64_t>& ids) {
  std::lock_guard lock(mu_);
  std::vector<std::pair<std::string, std::string>> names;
  for (std::uint64_t id : ids) {
    if (const StoredObject* obj = index_.Find(id); obj != nullptr && index_.IsReservation(id)) {
      names.emplace_back(obj->meta.ns, obj->meta.key);
    }
  }
  return names;
}

bool ObjectStore::Holds(std::uint64_t owner) const {
  std::shared_lock lock(mu_);
  const OwnerHoldings h = index_.HoldingsOf(owner);
  // Staged room is idle by design: it does not keep the connection from timing out.
  return h.reservations != h.staged || leases_.CountOf(owner) != 0;
}

bool ObjectStore::ReserveMayWait(const std::string& ns, std::uint64_t total_bytes,
                                 std::uint64_t largest, bool wants_hbm) {
  // Reads only (the pools, the planned namespaces, the tiers' own counts): every put asks this,
  // and an exclusive lock here would stop every other client's gets and puts for it.
  std::shared_lock lock(mu_);
  const std::uint32_t pool = PoolOfLocked(ns);
  auto fits = [&](TierKind k) {
    Tier* t = tier(k);
    if (t == nullptr) return false;
    const PoolSpace room = t->SpaceOf(pool);
    if (room.capacity == 0) return false;
    // Room by the watermark, not just free bytes: above it, allocation makes room first.
    const double high = t->watermarks().high;
    const auto limit = static_cast<std::uint64_t>(static_cast<double>(room.capacity) * high);
    return room.used + total_bytes <= limit && largest <= room.capacity - room.used;
  };
  if (wants_hbm && tier(TierKind::kHbm) != nullptr &&
      tier(TierKind::kHbm)->SpaceOf(pool).capacity > 0) {
    if (planned_ns_.count(ns) != 0 || !fits(TierKind::kHbm)) return true;
  }
  return !fits(TierKind::kDram);
}

void ObjectStore::ExpireLocked(std::uint64_t now_us) {
  // Nothing is freed here: the holder may still touch the memory. Its connection is marked
  // overdue; ReleaseOwner frees what it held once it is gone.
  auto mark = [&](std::uint64_t owner, const char* what, std::uint64_t id) {
    if (!overdue_.insert(owner).second) return;
    overdue_count_.store(overdue_.size());
    ++counters_.clients_overdue;
    spdlog::warn("connection {} held {} {} past its time limit; refusing it until it reconnects",
                 owner, what, id);
  };
  for (std::uint64_t id : index_.ExpiredReservations(now_us)) {
    if (StoredObject* obj = index_.Find(id)) mark(obj->owner, "reservation", id);
    index_.ClearReservationDeadline(id);
    ++counters_.reservations_overdue;
  }
  for (std::uint64_t lease_id : leases_.Due(now_us)) {
    if (auto l = leases_.Find(lease_id)) mark(l->owner, "pin", lease_id);
    leases_.ClearDeadline(lease_id);
    ++counters_.leases_overdue;
  }
}

}  // namespace tierpool
