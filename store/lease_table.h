// Read leases (pins) by id: who holds each, which copy it pins, and when it is due. Sharded by
// owner (a connection), so that connections pinning at once take different locks and touch
// different cache lines; a lease id says its shard.
//
// Locking: thread-safe; each shard has its own mutex (clang checks its fields), held only inside
// these methods. The
// ObjectStore calls in with its mu_ held, shared (a get's pin, a release) or exclusive; mu_
// comes first, and nothing is taken while a shard's mutex is held.
#pragma once

#include <array>
#include <cstdint>
#include <mutex>
#include <optional>
#include <set>
#include <span>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/mutex.h"
#include "common/status.h"
#include "tierpool/types.h"

namespace tierpool {

struct Lease {
  std::uint64_t object_id = 0;
  TierKind tier = TierKind::kDram;  // the copy it pins
  std::uint64_t owner = 0;
  std::uint64_t expiry_us = 0;  // 0: never due
};

class LeaseTable {
 public:
  static constexpr std::uint64_t kShards = 16;

  // Records the lease; returns its id (never 0).
  std::uint64_t Add(const Lease& lease);
  // Add of each of leases (a get batch's, all of one owner: one lock), their ids in ids[i].
  void AddAll(std::span<const Lease> leases, std::uint64_t* ids);
  // Removes the lease `owner` holds under lease_id and returns it; NotFound when there is none
  // (released or never given), PermissionDenied when another owner holds it.
  Result<Lease> Take(std::uint64_t lease_id, std::uint64_t owner);
  // Take of each of lease_ids, in order, under one lock: every lease of owner's is in its
  // shard. The leases taken are appended to *taken; returns how many were refused, and sets
  // *first_refusal to one refusal's status (the first in the owner's shard, if any there).
  std::size_t TakeAll(std::span<const std::uint64_t> lease_ids, std::uint64_t owner,
                      std::vector<Lease>* taken, Status* first_refusal);
  std::optional<Lease> Find(std::uint64_t lease_id) const;
  // The deadline was dealt with: the lease stays, no longer due.
  void ClearDeadline(std::uint64_t lease_id);

  std::uint64_t CountOf(std::uint64_t owner) const;
  // Walks the owner's shard (a connection closing, not a get).
  std::vector<std::uint64_t> Of(std::uint64_t owner) const;
  // Leases due at or before now_us, over every shard (ids; oldest first within a shard).
  std::vector<std::uint64_t> Due(std::uint64_t now_us) const;
  std::uint64_t size() const;

 private:
  struct alignas(64) Shard {
    mutable Mutex mu;
    std::uint64_t next_seq GUARDED_BY(mu) = 1;
    std::unordered_map<std::uint64_t, Lease> leases GUARDED_BY(mu);
    std::set<std::pair<std::uint64_t, std::uint64_t>> by_expiry GUARDED_BY(mu);  // (expiry_us, id)
    // Owners holding any. Their leases are found by a walk of the shard (Of): that is done when
    // a connection closes, and a set by owner cost every get an insert and an erase.
    std::unordered_map<std::uint64_t, std::uint64_t> count_of GUARDED_BY(mu);
  };
  static std::uint64_t AddLocked(Shard& shard, std::uint64_t s, const Lease& lease)
      REQUIRES(shard.mu);
  static Result<Lease> TakeLocked(Shard& shard, std::uint64_t lease_id, std::uint64_t owner)
      REQUIRES(shard.mu);
  static std::uint64_t ShardIndex(std::uint64_t owner) { return owner % kShards; }
  Shard& ShardOfId(std::uint64_t lease_id) { return shards_[lease_id % kShards]; }
  const Shard& ShardOfId(std::uint64_t lease_id) const { return shards_[lease_id % kShards]; }

  std::array<Shard, kShards> shards_;
};

}  // namespace tierpool
