// The object index: names -> objects, each object's copies in the tiers, open reservations, and
// the candidate sets the placement policy picks victims from (read leases are in
// store/lease_table.h). It moves no bytes and makes no decisions; it keeps the bookkeeping
// consistent and every lookup cheap.
//
// Locking: not thread-safe by itself. The ObjectStore guards it with its reader-writer mutex:
// every method must be called with that mutex held exclusively, except Lookup, Find and
// TouchShared, which a get calls with it held shared (several at once). What a shared holder
// writes is atomic: a copy's pins and last use, and the recency sequence. Nothing here blocks.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "store/mover.h"
#include "tierpool/types.h"
#include "tiers/tier.h"

namespace tierpool {

// Copies in least recently used order: (last_use, object id).
using RecencySet = std::set<std::pair<std::uint64_t, std::uint64_t>>;

// One copy of an object's bytes in one tier.
struct ObjectCopy {
  bool present = false;
  Extent extent;
  // Read leases on this copy; a pinned copy never moves or frees. Taken and let go under the
  // store's mutex held shared (a get, a release) or exclusive; the store's decisions to move or
  // free a copy read it under the exclusive lock, when no shared holder can change it.
  std::atomic<std::uint32_t> pins{0};
  // Wanted gone while pinned (a plan's FREE, a move down that landed): freed when its last
  // reader lets go, counted as leaving its tier until then; a new reader keeps it.
  bool free_on_unpin = false;
  // Recency, from the index's sequence. A get under the shared lock sets it without moving the
  // copy in its candidate sets (TouchShared); a victim search re-keys such entries as it meets
  // them, so the sets are visited in this order.
  std::atomic<std::uint64_t> last_use{0};
  std::uint8_t listed = 0;  // which candidate sets hold it (bit i: CandidateSet i)
  // Where it stands in each set that holds it (valid where `listed` says): leaving a set or
  // moving to its end costs no search through it.
  std::array<RecencySet::iterator, 3> listed_at{};
};

// A copy of the object being made in another tier by the mover.
struct ObjectMove {
  std::uint64_t op_id = 0;
  TierKind from = TierKind::kDram;
  TierKind to = TierKind::kDram;
  Extent dst;  // allocated in `to`; becomes the copy there when the move lands
  std::vector<std::function<void(Status)>> on_done;  // run with no lock held when it ends
  bool drop_source = false;  // a move down: the source copy is freed once the copy lands
  // A guard copy (store/placement_policy.h): once it lands, the source moves on to then_to
  // and is freed. The source counts as leaving from the start.
  std::optional<TierKind> then_to;
  bool source_leaves() const { return drop_source || then_to.has_value(); }
  MovePriority priority = MovePriority::kBackground;
};

struct StoredObject {
  std::uint64_t id = 0;
  ObjectMeta meta;                   // meta.tier: the top tier holding a copy
  std::uint32_t pool = kSharedPool;  // its namespace's pool: the arenas its copies live in
  bool committed = false;
  bool reservation = false;     // an open reservation: committed, aborted or expired ends it
  bool up_on_commit = false;    // a put that wanted a device hbm: copied up once committed
  std::uint64_t owner = 0;      // who may commit the reservation
  std::uint64_t expiry_us = 0;  // reservation deadline
  std::array<ObjectCopy, kTierKindCount> copies;
  std::optional<ObjectMove> move;  // at most one move at a time
  Status last_move_error;          // how the last failed move ended (for whoever waited on it)
  std::uint32_t holds = 0;         // callers waiting on its move: its copies stay put for them
  bool linked = false;             // reachable by name
  bool doomed = false;             // deleted or replaced: freed once unpinned and not moving
  bool corrupt = false;            // quarantined: its bytes failed their checksum, or were lost
  std::string why_corrupt;         // what its gets say

  ObjectCopy& copy(TierKind t) { return copies[static_cast<int>(t)]; }
  const ObjectCopy& copy(TierKind t) const { return copies[static_cast<int>(t)]; }
  std::uint32_t pins() const;
  int present_copies() const;
};

// Whether obj's copies may move or go at all (each copy also needs to be present and unpinned):
// committed, named, not deleted, quarantined or moving, and no caller waiting on it. The
// definition of the movable candidate set.
inline bool MovableObject(const StoredObject& obj) {
  return obj.committed && obj.linked && !obj.doomed && !obj.corrupt && !obj.move.has_value() &&
         obj.holds == 0;
}

// Which copies a victim search may take, in least recently used order:
//   kMovable: any copy that may be moved or dropped (committed, linked, not moving, not
//             quarantined). Pins do not change membership (a get takes one under the shared
//             lock, where the sets cannot change): whoever acts on a candidate checks its pins;
//   kCache:   the movable copies of `cache` objects;
//   kRedundant: movable copies whose object has another copy: dropping one costs no transfer
//             (a retained object's last copy in a tier that keeps it alone is not redundant).
enum class CandidateSet : std::uint8_t { kMovable = 0, kCache = 1, kRedundant = 2 };

// What one namespace holds, for its quota: bytes of every object the index keeps (reservations,
// committed objects, replaced or deleted ones not freed yet) and its linked (named) objects.
struct NamespaceUsage {
  std::uint64_t bytes = 0;
  std::uint64_t objects = 0;
  std::array<std::uint64_t, kTierKindCount> tier_bytes{};  // its copies' extents, by tier
};

// What one owner (a connection) holds open: the per-client limits are checked against it. (Its
// leases are counted by the LeaseTable.)
struct OwnerHoldings {
  std::uint64_t reservations = 0;
  std::uint64_t reserved_bytes = 0;
};

class ObjectIndex {
 public:
  using Name = std::pair<std::string, std::string>;  // (namespace, key)
  using NameView = std::pair<std::string_view, std::string_view>;

  StoredObject* Find(std::uint64_t id);
  StoredObject* Lookup(const std::string& ns, const std::string& key);
  // A new, uncommitted object (a reservation) owned by `owner`, due at expiry_us (0: never).
  StoredObject& AddReservation(ObjectMeta meta, std::uint64_t owner, std::uint64_t expiry_us);
  // Commits a reservation: links it under its name. Returns the object it replaced, if any
  // (still in the index; the caller dooms it).
  StoredObject* Commit(StoredObject& obj);
  // Makes the name point nowhere (the object stays until Erase).
  void Unlink(StoredObject& obj);
  void Erase(std::uint64_t id);
  bool IsReservation(std::uint64_t id) const;

  // A copy appeared, vanished, got pinned or unpinned, or the object changed state: recompute
  // which candidate sets its copies belong to, keeping their recency.
  void Refresh(StoredObject& obj);
  // The copy in `tier` was used: it becomes the most recently used.
  void Touch(StoredObject& obj, TierKind tier);
  // The same under the shared lock: only its recency is set; a victim search moves its entries.
  void TouchShared(StoredObject& obj, TierKind tier) {
    obj.copy(tier).last_use.store(NextUse(), std::memory_order_relaxed);
  }
  void SetCopy(StoredObject& obj, TierKind tier, const Extent& extent);
  void ClearCopy(StoredObject& obj, TierKind tier);
  // The copy in `tier` now lives at `extent` (its bytes were moved there): recency and
  // candidate sets stay as they were.
  void RelocateCopy(StoredObject& obj, TierKind tier, const Extent& extent);

  // Copies in `tier` are split by their object's pool (a tier clients map: tiers/tier.h): a
  // victim search for room in one pool visits only that pool's copies. Set before any object.
  void SetPartitioned(TierKind tier) { partitioned_[static_cast<int>(tier)] = true; }
  // A copy in `tier` does not keep a `retained` object safe alone (Tier::keeps_retained_alone):
  // another copy of such an object is redundant only while a copy that does would remain.
  // Set before any object.
  void SetNeedsGuard(TierKind tier) { needs_guard_[static_cast<int>(tier)] = true; }

  // Visits candidates of `tier` whose room is `pool`'s in least recently used order until visit
  // returns true. Entries a get touched under the shared lock are moved to their place as the
  // search meets them, at most kMaxRekeysPerSearch of them per search: a search after a million
  // gets and no search would otherwise re-key a million entries under the exclusive lock (about
  // 0.2 s here). Past that many, the rest are visited where they are listed (their last use
  // under the exclusive lock, or their arrival): least recently used, approximately, until
  // later searches have moved them.
  static constexpr int kMaxRekeysPerSearch = 1024;
  template <typename F>
  void ForEachCandidate(TierKind tier, std::uint32_t pool, CandidateSet set, F&& visit) {
    const int t = static_cast<int>(tier);
    const std::uint32_t p = partitioned_[t] ? pool : kSharedPool;
    if (p >= sets_.size()) return;
    auto& s = sets_[p][t][static_cast<int>(set)];
    int rekeys = 0;
    for (auto it = s.begin(); it != s.end();) {
      auto here = it++;
      StoredObject& obj = *objects_.at(here->second);
      if (rekeys < kMaxRekeysPerSearch && Rekeyed(obj, t, static_cast<int>(set), s, here, it)) {
        ++rekeys;
        continue;  // met again later
      }
      if (visit(obj)) return;  // visit may refresh this object
    }
  }
  std::uint64_t candidates(TierKind tier, CandidateSet set) const {
    std::uint64_t n = 0;
    for (const auto& pool : sets_) n += pool[static_cast<int>(tier)][static_cast<int>(set)].size();
    return n;
  }

  // Reservations whose deadline is at or before now_us (ids), oldest first.
  std::vector<std::uint64_t> ExpiredReservations(std::uint64_t now_us) const;
  // The deadline was dealt with: the record stays, no longer due.
  void ClearReservationDeadline(std::uint64_t id);
  // Zeroes for an owner that holds nothing.
  OwnerHoldings HoldingsOf(std::uint64_t owner) const;
  NamespaceUsage UsageOf(const std::string& ns) const;
  // Everything `owner` holds.
  std::vector<std::uint64_t> ReservationsOf(std::uint64_t owner) const;
  void EraseReservation(std::uint64_t id);  // the record only; the caller frees the object
  // An open reservation now holds `size` bytes (at most what it held) in `extent`, its copy in
  // `tier` trimmed to it: its owner's and namespace's counts follow.
  void ShrinkReservation(StoredObject& obj, std::uint64_t size, TierKind tier,
                         const Extent& extent);

  // Visits linked objects in name order from the first name not before `from` until visit
  // returns false.
  template <typename F>
  void ForEachNameFrom(NameView from, F&& visit) {
    for (auto it = names_.lower_bound(from); it != names_.end(); ++it) {
      if (!visit(NameView(it->first.first, it->first.second), *objects_.at(it->second))) return;
    }
  }
  std::uint64_t objects() const { return names_.size(); }
  std::uint64_t reservations() const { return reservations_; }
  std::uint64_t copies_in(TierKind t) const { return copies_in_[static_cast<int>(t)]; }
  // Bytes (extent lengths) of a namespace's copies in a tier.
  std::uint64_t TierBytesOf(const std::string& ns, TierKind tier) const;
  std::uint64_t HbmBytesOf(const std::string& ns) const { return TierBytesOf(ns, TierKind::kHbm); }
  std::uint64_t NextId() { return next_id_++; }

 private:
  using TierSets = std::array<std::array<RecencySet, 3>, kTierKindCount>;
  // The set a copy of obj in tier t is listed in.
  RecencySet& SetOf(const StoredObject& obj, int t, int set);
  void Unlist(StoredObject& obj);
  void UnlistCopy(StoredObject& obj, int tier);
  void EraseName(const StoredObject& obj);
  std::uint64_t NextUse() { return use_seq_.fetch_add(1, std::memory_order_relaxed) + 1; }
  // An entry of set `set` of tier t listed under an older use than its copy's (a get under the
  // shared lock touched it) moves to where its use puts it. True if that is at or after `next`
  // (a walk from `next` meets it again); false if it is still the oldest not yet visited.
  bool Rekeyed(StoredObject& obj, int t, int set, RecencySet& s, RecencySet::iterator here,
               RecencySet::iterator next);

  // Names in order (listing walks them), looked up by view: a lookup builds no strings (a key
  // past the short string size would cost an allocation per get and per put).
  struct NameOrder {
    using is_transparent = void;
    static NameView View(const Name& n) { return {n.first, n.second}; }
    static NameView View(const NameView& n) { return n; }
    template <typename A, typename B>
    bool operator()(const A& a, const B& b) const {
      return View(a) < View(b);
    }
  };
  std::unordered_map<std::uint64_t, std::unique_ptr<StoredObject>> objects_;
  std::map<Name, std::uint64_t, NameOrder> names_;
  std::vector<TierSets> sets_{1};  // by pool (kSharedPool for tiers not partitioned)
  std::array<bool, kTierKindCount> partitioned_{};
  std::array<bool, kTierKindCount> needs_guard_{};
  std::array<std::uint64_t, kTierKindCount> copies_in_{};
  std::unordered_map<std::string, std::array<std::uint64_t, kTierKindCount>> ns_tier_bytes_;
  std::atomic<std::uint64_t> use_seq_{0};
  std::uint64_t next_id_ = 1;

  void Count(std::uint64_t owner, std::int64_t reservations, std::int64_t bytes);

  std::unordered_map<std::uint64_t, OwnerHoldings> holdings_;  // owners holding anything
  std::unordered_map<std::string, NamespaceUsage> ns_usage_;   // namespaces holding anything
  void CountNs(const std::string& ns, std::int64_t bytes, std::int64_t objects);
  std::uint64_t reservations_ = 0;
  std::set<std::pair<std::uint64_t, std::uint64_t>> reservations_by_expiry_;
  std::set<std::pair<std::uint64_t, std::uint64_t>> reservations_by_owner_;
};

}  // namespace tierpool
