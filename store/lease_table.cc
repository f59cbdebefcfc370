#include "store/lease_table.h"

#include <string>

namespace tierpool {

std::uint64_t LeaseTable::Add(const Lease& lease) {
  const std::uint64_t s = ShardIndex(lease.owner);
  Shard& shard = shards_[s];
  MutexLock lock(shard.mu);
  return AddLocked(shard, s, lease);
}

std::uint64_t LeaseTable::AddLocked(Shard& shard, std::uint64_t s, const Lease& lease) {
  const std::uint64_t id = shard.next_seq++ * kShards + s;
  shard.leases.emplace(id, lease);
  if (lease.expiry_us != 0) shard.by_expiry.emplace(lease.expiry_us, id);
  ++shard.count_of[lease.owner];
  return id;
}

void LeaseTable::AddAll(std::span<const Lease> leases, std::uint64_t* ids) {
  if (leases.empty()) return;
  const std::uint64_t s = ShardIndex(leases[0].owner);
  {
    Shard& shard = shards_[s];
    MutexLock lock(shard.mu);
    for (std::size_t i = 0; i < leases.size(); ++i) {
      if (ShardIndex(leases[i].owner) == s) ids[i] = AddLocked(shard, s, leases[i]);
    }
  }
  for (std::size_t i = 0; i < leases.size(); ++i) {  // another owner's: its own shard
    if (ShardIndex(leases[i].owner) != s) ids[i] = Add(leases[i]);
  }
}

Result<Lease> LeaseTable::Take(std::uint64_t lease_id, std::uint64_t owner) {
  Shard& shard = ShardOfId(lease_id);
  MutexLock lock(shard.mu);
  return TakeLocked(shard, lease_id, owner);
}

std::size_t LeaseTable::TakeAll(std::span<const std::uint64_t> lease_ids, std::uint64_t owner,
                                std::vector<Lease>* taken, Status* first_refusal) {
  std::size_t refused = 0;
  auto refuse = [&](Status s) {
    if (refused++ == 0) *first_refusal = std::move(s);
  };
  const std::uint64_t own = ShardIndex(owner);
  {
    Shard& shard = shards_[own];
    MutexLock lock(shard.mu);
    for (std::uint64_t id : lease_ids) {
      if (id % kShards != own) continue;  // not owner's: Take says why, below
      auto l = TakeLocked(shard, id, owner);
      if (l.ok()) {
        taken->push_back(*l);
      } else {
        refuse(l.status());
      }
    }
  }
  for (std::uint64_t id : lease_ids) {
    if (id % kShards == own) continue;
    refuse(Take(id, owner).status());  // another owner's or none: never taken
  }
  return refused;
}

Result<Lease> LeaseTable::TakeLocked(Shard& shard, std::uint64_t lease_id, std::uint64_t owner) {
  auto it = shard.leases.find(lease_id);
  if (it == shard.leases.end()) {
    return Status::NotFound("no lease " + std::to_string(lease_id) + " (expired or released)");
  }
  if (it->second.owner != owner) {
    return Status::PermissionDenied("lease belongs to another connection");
  }
  const Lease l = it->second;
  if (l.expiry_us != 0) shard.by_expiry.erase({l.expiry_us, lease_id});
  if (auto c = shard.count_of.find(l.owner); c != shard.count_of.end() && --c->second == 0) {
    shard.count_of.erase(c);
  }
  shard.leases.erase(it);
  return l;
}

std::optional<Lease> LeaseTable::Find(std::uint64_t lease_id) const {
  const Shard& shard = ShardOfId(lease_id);
  MutexLock lock(shard.mu);
  auto it = shard.leases.find(lease_id);
  if (it == shard.leases.end()) return std::nullopt;
  return it->second;
}

void LeaseTable::ClearDeadline(std::uint64_t lease_id) {
  Shard& shard = ShardOfId(lease_id);
  MutexLock lock(shard.mu);
  auto it = shard.leases.find(lease_id);
  if (it == shard.leases.end() || it->second.expiry_us == 0) return;
  shard.by_expiry.erase({it->second.expiry_us, lease_id});
  it->second.expiry_us = 0;
}

std::uint64_t LeaseTable::CountOf(std::uint64_t owner) const {
  const Shard& shard = shards_[ShardIndex(owner)];
  MutexLock lock(shard.mu);
  auto it = shard.count_of.find(owner);
  return it == shard.count_of.end() ? 0 : it->second;
}

std::vector<std::uint64_t> LeaseTable::Of(std::uint64_t owner) const {
  const Shard& shard = shards_[ShardIndex(owner)];
  MutexLock lock(shard.mu);
  std::vector<std::uint64_t> out;
  if (shard.count_of.count(owner) == 0) return out;
  for (const auto& [id, lease] : shard.leases) {
    if (lease.owner == owner) out.push_back(id);
  }
  return out;
}

std::vector<std::uint64_t> LeaseTable::Due(std::uint64_t now_us) const {
  std::vector<std::uint64_t> out;
  for (const Shard& shard : shards_) {
    MutexLock lock(shard.mu);
    for (const auto& [expiry, id] : shard.by_expiry) {
      if (expiry > now_us) break;
      out.push_back(id);
    }
  }
  return out;
}

std::uint64_t LeaseTable::size() const {
  std::uint64_t n = 0;
  for (const Shard& shard : shards_) {
    MutexLock lock(shard.mu);
    n += shard.leases.size();
  }
  return n;
}

}  // namespace tierpool
