// The object index: names -> objects, each object's copies in the tiers, open reservations, and
// the candidate sets the placement policy picks victims from (read leases are in
// store/lease_table.h). It moves no bytes and makes no decisions; it keeps the bookkeeping
// consistent and every lookup cheap.
//
// Locking. The ObjectStore's reader-writer mutex (mu_) says who may call what:
//   - held exclusively: every method. Nothing else runs in the index then.
//   - held shared: the paths that run in parallel, puts that need nothing moved and gets of a
//     copy that is where it is wanted: Find, Lookup, WithName, AddReservationIf,
//     ClaimReservation, ShrinkReservation and Commit (of the object it claimed), Erase (of the
//     object its commit unlinked), HoldingsOf, TouchShared.
// For the second, the index is split into parts with locks of their own (SpinMutex, taken
// inside each method, never held when it returns), so that puts and gets of different names,
// and puts from different threads, touch different memory:
//   - kParts parts, each with the names that hash to it and the bookkeeping of the objects
//     that belong to it: their candidate sets, per-namespace counts and copies per tier. An
//     object belongs to the part of the thread that made it (common/thread_slot.h), not to its
//     name's, so a thread's puts share only their names' entries with other threads. Totals
//     are sums over the parts; a victim search merges the parts' sets.
//   - kOwnerParts owner parts, by owner: per-owner holdings and the reservation records.
//   - kObjectShards object parts, by block of ids (ids come in blocks, one per thread at a
//     time): the objects themselves.
// Lock order: a part (never two at once), then an owner part, then an object part.
// Iterations (ForEachCandidate, ForEachNameFrom) take none and need mu_ exclusively.
//
// A StoredObject's fields are written under mu_ exclusively, except by a put under mu_ shared:
// it builds its object before any other thread can reach it, and a commit links it (and unlinks
// the object it replaces) under the name's lock, where a get under mu_ shared looks it up and
// pins it. So an object reached by name under mu_ shared is read under that lock (WithName) or
// after pinning it, and an object unlinked with no pins, holds or move is reachable by no other
// thread: its committer may free it. What other shared holders write is atomic: a copy's pins
// and last use.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/spin_mutex.h"
#include "store/mover.h"
#include "store/object_count_limits.h"
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
  // Recency, from the index's clock (NextUse). A get under the shared lock sets it without moving
  // the copy in its candidate sets (TouchShared); a victim search re-keys such entries as it meets
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

struct StoredObject;

// What one namespace holds, for its quota: bytes of every object the index keeps (reservations,
// committed objects, replaced or deleted ones not freed yet) and its linked (named) objects.
struct NamespaceUsage {
  std::uint64_t bytes = 0;
  std::uint64_t objects = 0;
  std::array<std::uint64_t, kTierKindCount> tier_bytes{};  // its copies' extents, by tier
};

// One namespace's counts in one part of the index, and how many of the part's objects point at
// them: the entry lives while one does, so an object reaches its counts through a pointer and a
// put hashes no namespace name (that hash and compare were 6% of a 4 KiB put batch's server time).
struct PartNamespaceCounts {
  NamespaceUsage usage;
  std::uint64_t objects = 0;  // the part's objects of the namespace, linked or not
  // The namespace's shared count (store/object_count_limits.h), and what this part has not added
  // to it yet.
  ObjectCountLimits::NamespaceTotal* total = nullptr;
  std::int64_t unflushed = 0;
};

// An object's place in one of its owner part's lists of open reservations. Intrusive, so that a
// put allocates nothing for them: with two std::sets instead (by owner, by deadline), batches of
// 64 small puts ran 6% slower (docs/benchmarks/redis.md, "Long keys").
struct ReservationLinks {
  StoredObject* prev = nullptr;
  StoredObject* next = nullptr;
};
struct ReservationList {
  StoredObject* head = nullptr;  // the oldest
  StoredObject* tail = nullptr;
};

struct StoredObject {
  std::uint64_t id = 0;
  ObjectMeta meta;                   // meta.tier: the top tier holding a copy
  std::uint32_t pool = kSharedPool;  // its namespace's pool: the arenas its copies live in
  std::uint32_t part = 0;            // the index's part that keeps its bookkeeping
  // Its namespace's counts in that part: set as it is published, read under the part's lock.
  PartNamespaceCounts* ns_counts = nullptr;
  bool committed = false;
  bool reservation = false;     // an open reservation: committed, aborted or expired ends it
  bool staged = false;          // made as staged room, before it had a name
  bool up_on_commit = false;    // a put that wanted a device hbm: copied up once committed
  std::uint64_t owner = 0;      // who may commit the reservation
  std::uint64_t expiry_us = 0;  // reservation deadline
  // While a reservation: in its owner's list, and in its owner part's list of those with a
  // deadline (under the owner part's lock).
  ReservationLinks owner_links, due_links;
  std::array<ObjectCopy, kTierKindCount> copies;
  std::optional<ObjectMove> move;  // at most one move at a time
  Status last_move_error;          // how the last failed move ended (for whoever waited on it)
  std::uint32_t holds = 0;         // callers waiting on its move: its copies stay put for them
  bool linked = false;             // reachable by name
  bool doomed = false;             // deleted or replaced: freed once unpinned and not moving
  // Doomed while read: its pinned copies count as leaving their tiers until it is freed.
  bool leaving_on_unpin = false;
  bool nvme_journaled = false;  // its nvme copy's record is in the persist journal
  bool corrupt = false;         // quarantined: its bytes failed their checksum, or were lost
  std::string why_corrupt;      // what its gets say

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
//             lock): whoever acts on a candidate checks its pins;
//   kCache:   the movable copies of `cache` objects;
//   kRedundant: movable copies whose object has another copy: dropping one costs no transfer
//             (a retained object's last copy in a tier that keeps it alone is not redundant).
enum class CandidateSet : std::uint8_t { kMovable = 0, kCache = 1, kRedundant = 2 };

// What one owner (a connection) holds open: the per-client limits are checked against it. (Its
// leases are counted by the LeaseTable.)
struct OwnerHoldings {
  std::uint64_t reservations = 0;
  std::uint64_t reserved_bytes = 0;
  std::uint64_t staged = 0;  // of the reservations, those made as staged room
};

class ObjectIndex {
 public:
  using Name = std::pair<std::string, std::string>;  // (namespace, key)
  using NameView = std::pair<std::string_view, std::string_view>;
  static constexpr int kParts = 32;
  static constexpr int kOwnerParts = 16;
  static constexpr int kObjectShards = 32;

  ObjectIndex() = default;
  ObjectIndex(const ObjectIndex&) = delete;
  ObjectIndex& operator=(const ObjectIndex&) = delete;

  StoredObject* Find(std::uint64_t id);
  // Under mu_ shared, the object may be freed once the name's lock is let go (a commit that
  // replaced it): read it in WithName instead, or pin it there.
  StoredObject* Lookup(const std::string& ns, const std::string& key);
  // Runs f(StoredObject*) (nullptr when the name is free) with the name's lock held: a commit
  // cannot replace and free the object meanwhile. f must not call back into the index but for
  // TouchShared.
  template <typename F>
  decltype(auto) WithName(std::string_view ns, std::string_view key, F&& f) {
    Part& part = parts_[PartOf(ns, key)];
    std::lock_guard lock(part.mu);
    auto it = part.names.find(NameView(ns, key));
    return f(it == part.names.end() ? nullptr : it->second);
  }
  // Bounds on the objects held (reservations included): 0, none. Set before any object.
  void SetObjectLimits(std::uint64_t total, std::uint64_t per_namespace) {
    limits_.Set(total, per_namespace, kParts * ObjectCountLimits::kFlushEvery);
  }
  const ObjectCountLimits& object_limits() const { return limits_; }
  // Objects held, reservations included, in all and of `ns`: exact (every part's lock in turn).
  std::uint64_t ObjectsExactly() const;
  std::uint64_t ObjectsExactly(const std::string& ns) const;
  // A new, uncommitted object (a reservation) owned by `owner`, due at expiry_us (0: never).
  StoredObject& AddReservation(ObjectMeta meta, std::uint64_t owner, std::uint64_t expiry_us);
  // The same for an object built by the caller (meta and pool set; its id is given here), with
  // its copy in `tier` at `extent`, if admit(owner's holdings) says yes: the check and the
  // counting happen under one lock, so puts in parallel cannot pass a limit together. Refused
  // too where the object counts are near a limit (object_limits()): the exclusive path decides.
  // Returns the object (obj is the index's now), or nullptr (refused: obj is still the caller's).
  template <typename Admit>
  StoredObject* AddReservationIf(std::unique_ptr<StoredObject>& obj, std::uint64_t owner,
                                 std::uint64_t expiry_us, TierKind tier, const Extent& extent,
                                 Admit&& admit) {
    {
      OwnerPart& op = OwnerPartOf(owner);
      std::lock_guard lock(op.mu);
      if (!admit(HoldingsIn(op, owner))) return nullptr;
      obj->id = NextId();
      obj->owner = owner;
      obj->expiry_us = expiry_us;
      obj->reservation = true;
      obj->staged = obj->meta.key.empty();
      RecordReservation(op, *obj, +1);
    }
    StoredObject* added = Publish(obj, tier, &extent, /*limited=*/true);
    if (added == nullptr) {
      OwnerPart& op = OwnerPartOf(owner);
      std::lock_guard lock(op.mu);
      RecordReservation(op, *obj, -1);
    }
    return added;
  }
  // Ends reservation `id` for its commit, if it is `owner`'s and may(object) says so (both under
  // its owner's lock, so one commit at most claims it): the object is no longer a reservation
  // and is marked committed, not linked yet (Commit). nullptr: not claimed, nothing changed.
  template <typename May>
  StoredObject* ClaimReservation(std::uint64_t id, std::uint64_t owner, May&& may) {
    OwnerPart& op = OwnerPartOf(owner);
    std::lock_guard lock(op.mu);
    // Looked at with its object part locked: the id may name an object a commit is freeing
    // (not a reservation: its owner and flag say so, and neither changes then).
    ObjectShard& shard = ObjectShardOf(id);
    std::lock_guard shard_lock(shard.mu);
    auto it = shard.objects.find(id);
    StoredObject* obj = it == shard.objects.end() ? nullptr : it->second.get();
    if (obj == nullptr || obj->owner != owner || !obj->reservation || !may(*obj)) return nullptr;
    obj->reservation = false;
    RecordReservation(op, *obj, -1);
    obj->committed = true;
    return obj;
  }
  // Commits a reservation: links it under its name. Returns the object it replaced, if any
  // (still in the index, unlinked; the caller dooms or frees it). unused, when given, says
  // whether the replaced object had no pins, no holds and no move as it was unlinked (decided
  // under the name's lock, where gets under mu_ shared pin): then no other thread can reach it.
  StoredObject* Commit(StoredObject& obj, bool* unused = nullptr);
  // Makes the name point nowhere (the object stays until Erase).
  void Unlink(StoredObject& obj);
  // Gone, with its records (the caller found it: it is not looked up again).
  void Erase(StoredObject& obj);
  bool IsReservation(std::uint64_t id);  // mu_ exclusive

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
  // returns true (mu_ exclusive), the parts' sets merged. Entries a get touched under the shared
  // lock are moved to their place as the search meets them, at most kMaxRekeysPerSearch of them
  // per search: a search after a million gets and no search would otherwise re-key a million
  // entries under the exclusive lock (about 0.2 s here). Past that many, the rest are visited
  // where they are listed (their last use under the exclusive lock, or their arrival): least
  // recently used, approximately, until later searches have moved them.
  static constexpr int kMaxRekeysPerSearch = 1024;
  template <typename F>
  void ForEachCandidate(TierKind tier, std::uint32_t pool, CandidateSet set, F&& visit) {
    const int t = static_cast<int>(tier);
    const std::uint32_t p = partitioned_[t] ? pool : kSharedPool;
    struct Head {
      RecencySet* set;
      RecencySet::iterator next;
    };
    std::vector<Head> heads;  // each part's next entry, for parts with entries left
    for (Part& part : parts_) {
      if (p >= part.sets.size()) continue;
      RecencySet& s = part.sets[p][t][static_cast<int>(set)];
      if (!s.empty()) heads.push_back({&s, s.begin()});
    }
    int rekeys = 0;
    while (!heads.empty()) {
      std::size_t least = 0;
      for (std::size_t i = 1; i < heads.size(); ++i) {
        if (*heads[i].next < *heads[least].next) least = i;
      }
      Head& h = heads[least];
      StoredObject& obj = *FindExclusive(h.next->second);
      if (rekeys < kMaxRekeysPerSearch && h.next->first < UseOf(obj, t)) {
        // Used since it was listed: it moves to its place, and the part's next entry is
        // whichever of it and the one after comes first.
        ++rekeys;
        const auto after = std::next(h.next);
        const auto moved = Rekey(obj, t, static_cast<int>(set), *h.set, h.next, after);
        h.next = after == h.set->end() || *moved < *after ? moved : after;
        continue;
      }
      if (++h.next == h.set->end()) {
        heads[least] = heads.back();
        heads.pop_back();
      }
      if (visit(obj)) return;  // visit may refresh this object
    }
  }
  std::uint64_t candidates(TierKind tier, CandidateSet set) const {
    std::uint64_t n = 0;
    for (const Part& part : parts_) {
      for (const auto& pool : part.sets) {
        n += pool[static_cast<int>(tier)][static_cast<int>(set)].size();
      }
    }
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
  // returns false (mu_ exclusive): the parts' names merged.
  template <typename F>
  void ForEachNameFrom(NameView from, F&& visit) {
    using It = NameMap::iterator;
    std::vector<std::pair<It, It>> heads;  // (next, end) of each part with names left
    for (Part& part : parts_) {
      It it = part.names.lower_bound(from);
      if (it != part.names.end()) heads.emplace_back(it, part.names.end());
    }
    while (!heads.empty()) {
      std::size_t least = 0;
      for (std::size_t i = 1; i < heads.size(); ++i) {
        if (NameOrder()(heads[i].first->first, heads[least].first->first)) least = i;
      }
      It it = heads[least].first++;
      if (heads[least].first == heads[least].second) {
        heads[least] = heads.back();
        heads.pop_back();
      }
      if (!visit(NameView(it->first.first, it->first.second), *it->second)) return;
    }
  }
  std::uint64_t objects() const;
  std::uint64_t reservations() const;
  std::uint64_t copies_in(TierKind t) const;
  // Bytes (extent lengths) of a namespace's copies in a tier.
  std::uint64_t TierBytesOf(const std::string& ns, TierKind tier) const;
  std::uint64_t HbmBytesOf(const std::string& ns) const { return TierBytesOf(ns, TierKind::kHbm); }
  std::uint64_t NextId();

 private:
  using TierSets = std::array<std::array<RecencySet, 3>, kTierKindCount>;
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
  using NameMap = std::map<Name, StoredObject*, NameOrder>;
  // A part: the names that hash to it, and the bookkeeping of the objects that belong to it.
  struct alignas(64) Part {
    mutable SpinMutex mu;
    NameMap names;                  // guarded by mu
    std::vector<TierSets> sets{1};  // guarded by mu: by pool (kSharedPool: not partitioned)
    std::array<std::uint64_t, kTierKindCount> copies_in{};  // guarded by mu
    // guarded by mu: its objects' bytes and named objects per namespace, and their copies'
    // bytes per tier
    // (node-based: an entry stays where it is as others come and go, for its objects' pointers)
    std::unordered_map<std::string, PartNamespaceCounts> ns_usage;
    std::uint64_t linked = 0;    // guarded by mu: its objects reachable by name
    std::uint64_t objects = 0;   // guarded by mu: its objects, linked or not
    std::int64_t unflushed = 0;  // guarded by mu: of their change, not yet in limits_'s total
    // guarded by mu: nodes of entries that left its sets, for the next entries to enter them. A
    // put that replaces an object lists the new one's copy as the old one's leaves: without
    // these, a node made and freed per put.
    std::vector<RecencySet::node_type> spare_nodes;
  };
  // An owner's counts and its open reservations (oldest first).
  struct Owner {
    OwnerHoldings holdings;
    ReservationList reservations;
  };
  struct alignas(64) OwnerPart {
    mutable SpinMutex mu;
    std::unordered_map<std::uint64_t, Owner> owners;  // guarded by mu
    std::uint64_t reservations = 0;                   // guarded by mu
    // guarded by mu: its owners' open reservations with a deadline, in the order they were
    // made. Every deadline is the clock read before the lock plus one TTL, so the list is in
    // deadline order but for puts that raced to the lock (microseconds apart).
    ReservationList due;
  };
  struct alignas(64) ObjectShard {
    SpinMutex mu;
    std::unordered_map<std::uint64_t, std::unique_ptr<StoredObject>> objects;  // guarded by mu
  };

  static int PartOf(std::string_view ns, std::string_view key);
  // The sum of count(p) over parts, each read under its lock.
  template <typename Parts, typename Count>
  static std::uint64_t SumOver(const Parts& parts, Count&& count) {
    std::uint64_t n = 0;
    for (const auto& p : parts) {
      std::lock_guard lock(p.mu);
      n += count(p);
    }
    return n;
  }
  OwnerPart& OwnerPartOf(std::uint64_t owner) { return owner_parts_[owner % kOwnerParts]; }
  const OwnerPart& OwnerPartOf(std::uint64_t owner) const {
    return owner_parts_[owner % kOwnerParts];
  }
  // A block of ids lives in one object part: a thread's objects stay in the part it last wrote.
  ObjectShard& ObjectShardOf(std::uint64_t id) {
    return object_shards_[(id / kIdBlock) % kObjectShards];
  }
  // Find without the object part's lock: mu_ exclusive.
  StoredObject* FindExclusive(std::uint64_t id) {
    auto& objects = ObjectShardOf(id).objects;
    auto it = objects.find(id);
    return it == objects.end() ? nullptr : it->second.get();
  }
  // A new reservation's part, counts and copy (tier null: none yet), and the object made
  // reachable by id. Its owner's records are already made.
  // Puts obj in its part and its shard (obj is the index's then); with `limited`, not where the
  // object counts are near a limit: nullptr, and obj is still the caller's.
  StoredObject* Publish(std::unique_ptr<StoredObject>& obj, std::optional<TierKind> tier,
                        const Extent* extent, bool limited = false);
  // The owner part's records of obj as a reservation, made (+1) or ended (-1); op locked.
  static void RecordReservation(OwnerPart& op, StoredObject& obj, int sign);
  static OwnerHoldings HoldingsIn(const OwnerPart& op, std::uint64_t owner);

  // The *In methods need the object's part locked.
  void RefreshIn(Part& part, StoredObject& obj);
  void SetCopyIn(Part& part, StoredObject& obj, TierKind tier, const Extent& extent);
  void ClearCopyIn(Part& part, StoredObject& obj, TierKind tier);
  void UnlistCopyIn(Part& part, StoredObject& obj, int tier);
  // obj's namespace's counts in its part (part), changed by bytes and named objects.
  static void CountNs(Part& part, StoredObject& obj, std::int64_t bytes, std::int64_t objects);
  // The set a copy of obj in tier t is listed in.
  RecencySet& SetOf(Part& part, const StoredObject& obj, int t, int set);
  // An entry into a set of the part, at its end (the newest), and out of one: through the part's
  // spare nodes.
  static RecencySet::iterator ListNewest(Part& part, RecencySet& s,
                                         std::pair<std::uint64_t, std::uint64_t> entry);
  static void Unlist(Part& part, RecencySet& s, RecencySet::iterator at);
  static constexpr std::size_t kSpareNodes = 256;
  // Recency: the steady clock in nanoseconds, strictly rising on each thread (ties between
  // threads are broken by id in the sets). A shared counter was one more cache line that every
  // put and get moved between cores; the clock costs a read of a line no one writes.
  static std::uint64_t NextUse();
  static std::uint64_t UseOf(const StoredObject& obj, int t) {
    return obj.copies[t].last_use.load(std::memory_order_relaxed);
  }
  // The entry `here` of set `set` of tier t, listed under an older use than its copy's (a get
  // under the shared lock touched it), moves to where its use puts it (at or after `hint`).
  RecencySet::iterator Rekey(StoredObject& obj, int t, int set, RecencySet& s,
                             RecencySet::iterator here, RecencySet::iterator hint);

  ObjectCountLimits limits_;
  std::array<Part, kParts> parts_;
  std::array<OwnerPart, kOwnerParts> owner_parts_;
  std::array<ObjectShard, kObjectShards> object_shards_;
  std::array<bool, kTierKindCount> partitioned_{};  // set before any object
  std::array<bool, kTierKindCount> needs_guard_{};  // set before any object
  // Ids are handed out in blocks, a block at a time to each thread slot (common/thread_slot.h),
  // so that a put takes its id from a line its own core holds.
  static constexpr std::uint64_t kIdBlock = 64;
  static constexpr int kIdSlots = 16;
  struct alignas(64) IdSlot {
    SpinMutex mu;
    std::uint64_t next = 0;  // guarded by mu: the slot's next id
    std::uint64_t end = 0;   // guarded by mu: past its block's last id
  };
  std::array<IdSlot, kIdSlots> id_slots_;
  alignas(64) std::atomic<std::uint64_t> next_block_{1};  // block 0 would hold id 0: no object
};

}  // namespace tierpool
