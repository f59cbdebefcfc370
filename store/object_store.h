// The object store: the public face of store/. It keeps the index of (namespace, key) -> object
// (store/object_index.h), takes two-phase puts (reserve, write in place, commit; or room staged
// ahead of a connection's next put, named by its commit) and pinned reads under leases, and
// carries out the placement policy's decisions (store/placement_policy.h) through the mover
// (store/mover.h), which copies the bytes on its own threads. `retained` objects are never
// dropped.
//
// An object may have a copy in more than one tier: a move up keeps the copy below (it is clean:
// objects are immutable once committed, and a put of the same key is a new object), so dropping
// it from the upper tier later costs no transfer. A move down frees the copy above once the copy
// below has landed and been checked.
//
// Namespace pools (store/namespace_policy.h): an object lives in its namespace's pool's arenas
// in every partitioned tier (tiers/tier.h), and room for it is made from its pool's objects only.
//
// Locking: one reader-writer mutex (mu_, writer-preferring: common/shared_mutex.h) guards the
// index and the counters. The common cases take mu_ shared, so puts and gets from several I/O
// threads run at once: a get of a copy that is already where it is wanted and the release of
// its lease, a reserve in dram that free room holds, and the commit of such a reservation
// (freeing the object it replaces when nobody holds it). What they change is atomic or has a
// lock of its own: the index's parts (store/object_index.h says which, and how a commit frees
// an object while gets run), a copy's pins and recency, the sharded lease table and counters.
// Everything else, and any get or put that must wait, move, make room or change more, takes it
// exclusively. No bytes are copied under it but a compaction's (one window's
// worth; PutCopy copies between its reserve and its commit, ReadCopy under a pin).
// Calls that may wait (Reserve and PutCopy when room must be made, Pin of an object only on
// nvme, Promote) wait on a condition variable with mu_ released, and only for moves they
// started or joined; on a thread in a NoWaitScope (a server's I/O thread:
// common/no_wait_scope.h) they give up instead, with RefuseWait, before reserving or pinning
// anything. Move completions run on mover threads and take mu_. Lock order: mu_, then a lease
// table shard's lock or the mover's lock; never the reverse.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <span>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "common/clock.h"
#include "common/no_wait_scope.h"
#include "common/sharded_counter.h"
#include "common/shared_mutex.h"
#include "common/status.h"
#include "store/lease_table.h"
#include "store/mover.h"
#include "store/namespace_policy.h"
#include "store/object_index.h"
#include "store/owner_groups.h"
#include "store/persist_journal.h"
#include "store/placement_policy.h"
#include "tiers/tier.h"

namespace tierpool {

// The owner id of the store's own reservations and pins (a snapshot's recovery, internal copies):
// no per-client limits or time limits apply to it. Connections have ids from 1.
inline constexpr std::uint64_t kStoreOwner = 0;

struct PutSpec {
  std::string ns;
  std::string key;
  std::uint64_t size = 0;
  std::string dtype;
  std::vector<std::int64_t> shape;
  ObjectKind kind = ObjectKind::kOther;
  Durability durability = Durability::kRetained;
  std::optional<TierKind> tier_hint;  // hbm or dram; default dram
  int numa_node = -1;
  // With tier_hint hbm on a device hbm: the client writes the bytes into device memory itself
  // (a device reservation; not with verify_commits, which reads host memory).
  bool device_ok = false;
};

struct StoreConfig {
  // How long a connection may hold a reservation open or a pin unreleased (0: as long as it
  // lives). Memory a client may still touch is never given to another object, so a holder past
  // its limit is not freed: its connection is marked overdue (every request refused until it
  // reconnects) and what it holds is freed when the connection closes.
  std::uint64_t reservation_ttl_ms = 0;
  std::uint64_t lease_ttl_ms = 0;
  // Per-connection limits (0: none). Bytes are those of open reservations: a connection that
  // holds one may open more only within this fraction of the tiers puts go to (its first may be
  // of any size).
  std::uint64_t max_reservations_per_client = 65'536;
  std::uint64_t max_leases_per_client = 262'144;
  double max_reserved_fraction_per_client = 0.5;
  // The same for all connections of one process, and of one user (their peer credentials), so
  // that opening more connections does not multiply the share (0: no limit). Summed only for a
  // connection that holds more than 1/256 of the process's share (1/1024 of the user's), so the
  // common small put never pays for it: a process may pass its share by that much per
  // connection at most.
  double max_reserved_fraction_per_process = 0.5;
  double max_reserved_fraction_per_user = 0.75;
  // Staged reservations (Stage) one connection may hold, and the largest: a client stages room
  // for its next put only (one, or two when commits race), of at most 4 MiB. Staged room has no
  // deadline, so these keep a connection from holding memory idle past the reservation limit.
  std::uint32_t max_staged_per_client = 4;
  std::uint64_t max_staged_bytes = 16ull << 20;
  std::uint32_t max_key_bytes = 1024;
  std::uint32_t max_namespace_bytes = 256;
  std::uint32_t max_dtype_bytes = 32;
  std::uint32_t max_shape_dims = 16;
  std::uint64_t max_object_bytes = 0;  // 0: limited by tier capacity only
  // Objects the server holds (reservations included), in all and per namespace: the metadata no
  // tier's capacity bounds (about 1-4 KB each, with the key). 0: no limit.
  std::uint64_t max_objects = 4ull << 20;
  std::uint64_t max_objects_per_namespace = 1ull << 20;
  std::uint32_t maintenance_interval_ms = 20;
  // How long a put or a read-back waits for moves that make room before it gives up.
  std::uint32_t room_wait_ms = 10'000;
  // What to do with a `cache` object when dram needs room and nvme exists: spill it like a
  // retained one, or drop it (a miss is recomputed) and keep nvme for retained objects.
  enum class CachePolicy : std::uint8_t { kSpill, kDrop };
  CachePolicy cache_policy = CachePolicy::kSpill;
  // Check a zero-copy commit's bytes against the checksum the client sent (one read pass over
  // the object on the server); a mismatch drops the put with DATA_LOSS. Off by default: puts
  // through the server's copy path are checksummed as they are copied, and a wrong checksum is
  // caught anyway when the object is spilled or read through a copy (quarantined, never returned).
  bool verify_commits = false;
  // The tiers below dram, nearest first: where dram spills, and where that tier spills in turn
  // (remote and nvme, each at most once). Empty: by each tier's level (remote, then nvme). A
  // node with fast flash and a slow network puts nvme first.
  std::vector<TierKind> spill_order;
  MoverConfig mover;
  Status validate() const;
};

struct Reservation {
  std::uint64_t id = 0;
  Extent extent;
  TierKind tier = TierKind::kDram;
};

struct PinnedObject {
  std::uint64_t lease_id = 0;
  std::uint64_t object_id = 0;
  // meta.tier: the tier of the pinned copy. Without its names, dtype and shape when the pin
  // asked for bytes_meta_only.
  ObjectMeta meta;
  Extent extent;
};

// How a get that wanted the hbm copy found its object.
enum class HbmUse : std::uint8_t {
  kHit,   // in hbm
  kLate,  // on its way into hbm: the get waited for that move
  kMiss,  // below, not moving: brought up on demand
};

struct PinOptions {
  // Pin this tier's copy: wait for a move into it already under way, or bring the object up on
  // demand (making room by the policy). When no room can be made, the nearest copy is pinned
  // (PinnedObject.meta.tier says which).
  std::optional<TierKind> want;
  // The caller can address device memory (a client that opened the device arenas): a wanted
  // copy in a device tier is the one pinned. Otherwise a mapped copy is, once the device copy
  // is there.
  bool device_ok = false;
  // PinnedObject.meta without ns, key, dtype and shape: a get that reads the bytes and knows
  // the name it asked for. No string is copied per pin then (long keys live out of line).
  bool bytes_meta_only = false;
};

// Where an object's copies are, for the executor.
struct ObjectPlacement {
  bool exists = false;
  bool in_hbm = false;
  bool leaving_hbm = false;  // in hbm, to be freed as its readers let go
  bool moving_to_hbm = false;
  bool moving_out_of_hbm = false;  // copied down, the hbm copy freed as it lands
  bool has_lower_copy = false;
  std::uint64_t size = 0;
};

// Runs once when a move ends, on a mover thread, with no store lock held.
using MoveDone = std::function<void(Status)>;
// Told of every get that wanted hbm (on the caller's thread, no store lock held).
using UseObserver = std::function<void(const std::string& ns, const std::string& key, HbmUse use,
                                       std::uint64_t wait_us)>;

struct TierUsage {
  TierStats tier;
  std::uint64_t object_count = 0;  // copies held in this tier
  Watermarks watermarks;
};

struct StoreStats {
  std::vector<TierUsage> tiers;
  std::vector<LinkStats> links;  // the mover's, one per (from, to) pair used so far
  std::uint64_t objects = 0;
  std::uint64_t reservations_open = 0;
  std::uint64_t leases_open = 0;
  std::uint64_t puts = 0;
  std::uint64_t bytes_put = 0;
  std::uint64_t gets = 0;
  std::uint64_t get_misses = 0;
  std::uint64_t deletes = 0;
  std::uint64_t evictions = 0;
  std::uint64_t demotions = 0;    // copies moved down between memory tiers
  std::uint64_t promotions = 0;   // copies moved up
  std::uint64_t clean_drops = 0;  // copies dropped with another copy below: no transfer
  // Copies wanted gone while a reader held them (a plan's FREE, a move down that landed), freed
  // when the last reader let go; cancelled: kept instead, read or prefetched again first.
  std::uint64_t drops_after_unpin = 0;
  std::uint64_t drops_cancelled = 0;
  // Waits for room within a plan's budget that ran out of time: what was leaving hbm did not
  // leave (its readers held it: a job off its plan holding its own reads, say).
  std::uint64_t plan_room_timeouts = 0;
  // Copies moved aside within their tier to open a window for an extent the free bytes allowed
  // but no free extent held (compaction), and their bytes.
  std::uint64_t relocations = 0;
  std::uint64_t relocated_bytes = 0;
  std::uint64_t migrations_aborted = 0;     // moves whose object was deleted meanwhile
  std::uint64_t reservations_overdue = 0;   // held past reservation_ttl_ms
  std::uint64_t leases_overdue = 0;         // held past lease_ttl_ms
  std::uint64_t clients_overdue = 0;        // connections marked overdue for those
  std::uint64_t client_limit_refusals = 0;  // reserves and pins past a per-connection limit
  std::uint64_t object_limit_refusals = 0;  // puts of a new name past max_objects(_per_namespace)
  // reserves and moves refused by a namespace quota (a put its hbm quota sent to dram counts)
  std::uint64_t quota_refusals = 0;
  std::uint64_t commits_rejected = 0;     // verify_commits: bytes did not match
  std::uint64_t reservations_staged = 0;  // made ahead of a connection's next put (Stage)
  std::uint64_t staged_commits = 0;       // puts that named a staged reservation: one round trip
  std::uint64_t resource_exhausted = 0;
  std::uint64_t sessions_cleaned = 0;
  std::uint64_t spills = 0;              // dram -> nvme
  std::uint64_t spill_failures = 0;      // the object stayed where it was
  std::uint64_t nvme_reads = 0;          // objects brought back from nvme
  std::uint64_t nvme_read_failures = 0;  // I/O error or checksum mismatch: an error to the caller
  std::uint64_t corrupt_in_memory = 0;   // bytes in memory no longer matched their checksum
  std::uint64_t quarantined = 0;         // objects set aside for that: gets fail with DATA_LOSS
  // Objects whose only copy was on peers that left: cache ones evicted, retained ones lost
  // (quarantined). Replication makes the second rare: it takes every replica's peer at once.
  std::uint64_t copies_lost_with_peers = 0;
  // Retained objects given a local copy (nvme) before going to a tier that does not keep them
  // alone (the remote tier with one replica).
  std::uint64_t guard_copies = 0;
  // Copies whose peers left, dropped when a read found them gone; the object was read from
  // another of its copies.
  std::uint64_t copies_lost_read_elsewhere = 0;
  // Copies a tier reported lost for good (Tier::TakeLostCopies), dropped before a read found
  // them; and the retained objects among them placed in that tier again from another copy (a
  // move started; remote: from the guard copy on nvme, paced by --remote-repair-rate).
  std::uint64_t copies_reported_lost = 0;
  std::uint64_t copies_replaced = 0;
};

class ObjectStore {
 public:
  // tiers: any subset of hbm and dram (dram required). Owner ids name who holds reservations and
  // leases (a connection); ReleaseOwner frees them all.
  static Result<std::unique_ptr<ObjectStore>> Create(StoreConfig config,
                                                     std::vector<std::unique_ptr<Tier>> tiers,
                                                     const Clock* clock = SystemClock::Default());
  ~ObjectStore();

  // Starts / stops the maintenance thread (expiry, demotion under watermark pressure). The
  // mover keeps running after Stop (reads of spilled objects still work) until destruction.
  void Start();
  void Stop();

  Result<Reservation> Reserve(const PutSpec& spec, std::uint64_t owner);
  // The same, taking spec's names into the object instead of copying them: a reservation
  // costs one copy of its key, not two (what a batch of puts from the wire calls).
  Result<Reservation> Reserve(PutSpec&& spec, std::uint64_t owner);
  // Room for a connection's next put, before it has a name (spec.key empty): a put that finds
  // one staged copies into it and names it in its commit, in one round trip instead of two.
  // Takes only free room below the tier's high watermark (never moves, drops or waits; hbm only
  // without a plan on the namespace), and has no deadline: it is idle by design. Freed by
  // Abort, by the commit that names it, or with its owner.
  Result<Reservation> Stage(const PutSpec& spec, std::uint64_t owner);
  // name: set exactly when the reservation was staged; its ns must be the staged one and its
  // size at most the staged size (the room past it goes back to its tier).
  // A commit that gives a name wrongly (or none for staged room) frees the reservation.
  Status Commit(std::uint64_t reservation_id, std::uint64_t checksum, std::uint64_t owner,
                const PutSpec* name = nullptr);
  Status Abort(std::uint64_t reservation_id, std::uint64_t owner);
  // Reserve, copy, commit: for bytes that arrive in a frame. The checksum is computed here.
  Status PutCopy(const PutSpec& spec, const void* data, std::uint64_t owner);

  Result<PinnedObject> Pin(const std::string& ns, const std::string& key, std::uint64_t owner,
                           const PinOptions& options = {});
  Status Release(std::uint64_t lease_id, std::uint64_t owner);
  // Pins for a get batch of one owner, as Pin would make them, where the shared path takes
  // them: under one shared lock, one check of the owner's pin limit for the whole batch, and
  // one lease-table lock. Appends one entry per name to *out: the pin, NotFound for a name with
  // no object, or nothing where Pin must answer (an invalid name, an object to move or wait
  // for, a copy with a free pending, or every name when the batch would pass the pin limit).
  void PinAllShared(std::span<const ObjectIndex::NameView> names, std::uint64_t owner,
                    const PinOptions& options,
                    std::vector<std::optional<Result<PinnedObject>>>* out);
  // Takes back what PinAllShared did for items no get answered (the batch stopped for a worker,
  // which looks them up again): lets go of their pins, as ReleaseAll, and counts neither those
  // nor `misses` of its NotFound answers as gets.
  Status ReleaseUnused(std::span<const std::uint64_t> lease_ids, std::uint64_t misses,
                       std::uint64_t owner);
  // Release of each of lease_ids under one shared lock and one lease-table lock (a get batch's
  // pins). Returns Ok, or one refusal's status with how many of them were refused; the others
  // are released.
  Status ReleaseAll(std::span<const std::uint64_t> lease_ids, std::uint64_t owner);
  Result<ObjectMeta> Head(const std::string& ns, const std::string& key);
  // The tiers holding a copy of ns/key, top first (a move in flight not counted).
  Result<std::vector<TierKind>> CopiesOf(const std::string& ns, const std::string& key);
  // Copies a pinned object's bytes into out, checking them in the same pass; a mismatch
  // quarantines the object and is DATA_LOSS (out left empty).
  Status CopyOut(const PinnedObject& pinned, std::string* out);
  // Copies the bytes out (under a short pin) into out.
  Result<ObjectMeta> ReadCopy(const std::string& ns, const std::string& key, std::string* out);

  Status Delete(const std::string& ns, const std::string& key);
  // Deletes every object of `ns` whose key starts with `prefix` (none for an empty prefix);
  // returns how many.
  std::uint64_t DeletePrefix(const std::string& ns, const std::string& prefix);
  // Sorted by (namespace, key). ns empty with all_namespaces lists everything.
  std::vector<ObjectMeta> List(const std::string& ns, const std::string& prefix,
                               const std::string& start_after, std::uint32_t limit,
                               bool all_namespaces, bool* truncated);
  // Makes sure a copy is in target (hbm or dram), making room there by moving its least
  // recently used copies down; waits for the move. A copy a reader has pinned stays where it is.
  // Moving to a tier below the object's top copy drops the copies above (a demotion).
  Status Promote(const std::string& ns, const std::string& key, TierKind target);

  void ReleaseOwner(std::uint64_t owner);
  // The process and user a connection belongs to (its peer credentials, at its handshake): the
  // per-process and per-user limits on open reservations count it with its siblings.
  void SetOwnerIdentity(std::uint64_t owner, OwnerGroups::Identity who) { groups_.Set(owner, who); }
  // --persist: the journal that records the removals of watched names (answered once durable)
  // and, with kept nvme files, the retained objects' records there (store/persist_journal.h).
  // Set before serving.
  void set_persist_journal(PersistJournal* journal) { journal_ = journal; }
  // A tier, for setting up what works beside the store (--persist's kept nvme files); null when
  // the store has none of the kind.
  Tier* GetTier(TierKind kind) const { return tier(kind); }
  PersistJournal* persist_journal() const { return journal_; }
  // The (namespace, key) of open reservations (a commit's names, before it runs); ids that are
  // no reservation are left out.
  std::vector<std::pair<std::string, std::string>> NamesOfReservations(
      const std::vector<std::uint64_t>& ids);
  // Per-namespace limits (store/namespace_policy.h); a put that would pass one is refused.
  void SetQuotas(std::unordered_map<std::string, NamespaceQuota> quotas);
  // The namespace pools (store/namespace_policy.h): each pool's objects live in its own arenas
  // of the partitioned tiers, which the tiers were built with. Set before the first object.
  void SetPools(std::vector<NamespacePool> pools);
  std::uint32_t PoolOf(const std::string& ns) const;
  // A pool's room in a tier (zeros when the tier is off).
  PoolSpace SpaceOf(TierKind kind, std::uint32_t pool) const;
  // A namespace's bytes and named objects now, against its quota.
  NamespaceUsage UsageOf(const std::string& ns) const;
  // FAILED_PRECONDITION when the owner held something past its time limit (it must reconnect);
  // cheap when no owner is overdue.
  Status CheckOwner(std::uint64_t owner) const;
  // Whether the owner holds reservations or pins (the transport's idle timeout spares it).
  bool Holds(std::uint64_t owner) const;  // staged reservations aside
  // Bytes of these open reservations (the ids that are not are ignored).
  std::uint64_t ReservedBytes(const std::vector<std::uint64_t>& reservation_ids);
  // True when puts of these sizes might wait for room (or a plan's budget).
  bool ReserveMayWait(const std::string& ns, std::uint64_t total_bytes, std::uint64_t largest,
                      bool wants_hbm);
  // One pass of what the maintenance thread does (expiry; moves for tiers above their high
  // watermark, started, not waited for); tests call it directly, then Quiesce.
  void RunMaintenance();
  // Waits until no move is queued or in flight.
  void Quiesce();

  // --- moves a registered plan asks for (store/plan_binding.h); none of these waits ----------
  ObjectPlacement PlacementOf(const std::string& ns, const std::string& key);
  // Bytes of the namespace's copies in hbm plus the room held by its moves into hbm.
  std::uint64_t HbmBytesOf(const std::string& ns);
  // A planned namespace's highest HbmBytesOf since ResetHbmPeak (or since its plan came):
  // every allocation in hbm for it (a put, a move in) is counted as it is made.
  std::uint64_t HbmPeakOf(const std::string& ns);
  void ResetHbmPeak(const std::string& ns);
  // Starts copying the object into hbm at planned priority, ordered by deadline_us (an hbm copy
  // waiting for its readers to let go is kept instead: ALREADY_EXISTS). Room comes
  // only from dropping clean copies: the plan's budget is the executor's to keep. OK: started,
  // and `done` runs when it ends, never before this returns. ALREADY_EXISTS: done at once with
  // no transfer (an empty object); `done` never runs. Other errors: nothing happened.
  Status StartPrefetch(const std::string& ns, const std::string& key, std::uint64_t deadline_us,
                       MoveDone done);
  // Frees the hbm copy, first copying it down when no copy below exists; a pinned copy is
  // freed when its readers let go. Results as for StartPrefetch (ALREADY_EXISTS: a clean copy
  // was below; the hbm copy went at once, or goes as its readers let go).
  Status StartOffload(const std::string& ns, const std::string& key, MoveDone done);
  // Frees the hbm copy when a copy below exists, or as its last reader lets go when it is
  // pinned; FAILED_PRECONDITION when it is the only copy.
  Status DropHbmCopy(const std::string& ns, const std::string& key);
  // A plan owns the hbm placement of this namespace's objects: the policy leaves them there,
  // and puts into hbm keep the namespace's hbm bytes within hbm_budget (waiting for its
  // copy-outs in flight, else going to dram). hbm_budget 0: the plan is gone.
  void SetPlanned(const std::string& ns, std::uint64_t hbm_budget);
  void set_use_observer(UseObserver observer);
  const Clock* clock() const { return clock_; }

  std::byte* HostAddress(const Extent& extent);
  std::vector<ArenaInfo> Arenas() const;
  StoreStats Stats() const;
  void ResetPeaks();
  // The mover's record of moves that finished at or after since_us (this store's clock).
  std::vector<MoveRecord> RecentMoves(std::uint64_t since_us) const {
    return mover_->RecentMoves(since_us);
  }
  const StoreConfig& config() const { return config_; }

 private:
  using StoreLock = std::unique_lock<SharedMutex>;
  using Steady = std::chrono::steady_clock;
  // How long a call may wait for room or a move: room_wait_ms from the first time it is asked
  // for. Most gets and puts never wait, and reading the clock up front for each of them was a
  // twentieth of the server's time in a batch of small gets.
  class WaitDeadline {
   public:
    explicit WaitDeadline(std::uint64_t budget_ms) : budget_(budget_ms) {}
    Steady::time_point get() {
      if (!at_) at_ = Steady::now() + budget_;
      return *at_;
    }

   private:
    std::chrono::milliseconds budget_;
    std::optional<Steady::time_point> at_;
  };
  // Victims one search may name: bounds the work a single failing allocation can cause.
  static constexpr std::size_t kMaxDecisions = 64;

  ObjectStore(StoreConfig config, std::vector<std::unique_ptr<Tier>> tiers, const Clock* clock);
  Status ValidateName(std::string_view ns, std::string_view key) const;
  Tier* tier(TierKind kind) const { return tiers_[static_cast<int>(kind)].get(); }
  // Place in this store's hierarchy (0: top): its index in by_level_ (the constructor orders
  // the tiers by level, the ones below dram by spill_order first).
  std::uint32_t rank(TierKind kind) const { return rank_[static_cast<int>(kind)]; }
  // Host memory clients map (hbm's stand-in, dram); a device tier's memory is not mapped.
  bool mapped(TierKind kind) const { return mapped_[static_cast<int>(kind)]; }
  // Device memory (hbm on a GPU): bytes reach it only through moves. A put that wants it lands
  // in dram and is copied up as it is committed, its dram copy freed on arrival
  // (CopyUpAfterPutLocked); a get that wants it makes sure the object is there and reads a
  // mapped copy, or the device copy itself for a client that opened it (PinOptions::device_ok).
  bool on_device(TierKind kind) const { return on_device_[static_cast<int>(kind)]; }
  // The present copy nearest the top; with mapped_only, only tiers clients can map.
  std::optional<TierKind> TopCopy(const StoredObject& obj, bool mapped_only) const;
  // The copy to read from: the top one whose tier expects the read to answer now (a remote copy
  // whose peers are silent is passed over for a guard copy below), else the top one.
  std::optional<TierKind> ReadSource(const StoredObject& obj, bool mapped_only) const;
  void UpdateTopLocked(StoredObject& obj);
  ObjectMeta MetaLocked(const StoredObject& obj) const;
  // What a pin returns: MetaLocked, or its scalars only (PinOptions::bytes_meta_only), of the
  // copy in tier `t`.
  ObjectMeta PinnedMetaLocked(const StoredObject& obj, TierKind t, const PinOptions& options) const;

  // Allocates in `pool`'s room in `kind`, making room by the policy's decisions. With
  // may_wait, it starts moves down at `priority` and waits for them (mu_ released) up to
  // room_wait_ms.
  Result<Extent> AllocateLocked(StoreLock& lock, TierKind kind, std::uint64_t size,
                                AllocationHint hint, bool may_wait, MovePriority priority);
  std::uint32_t PoolOfLocked(const std::string& ns) const { return tierpool::PoolOf(pools_, ns); }
  std::uint32_t PoolCount() const { return static_cast<std::uint32_t>(pools_.size() + 1); }
  // "dram" or "namespace pool bob's dram", for messages.
  std::string RoomNameLocked(TierKind kind, std::uint32_t pool) const;
  // Bytes on their way out of `pool`'s room in `kind`.
  std::uint64_t& LeavingLocked(TierKind kind, std::uint32_t pool);
  // RESOURCE_EXHAUSTED when `bytes` more of ns's copies in `kind` would pass its tier quota.
  Status WithinTierQuotaLocked(const std::string& ns, TierKind kind, std::uint64_t bytes);
  // Where `pool`'s room in `kind` has `size` free bytes but no free extent that large: moves the
  // fewest bytes of movable copies aside within the tier (one at a time, copied and checked
  // under mu_ at memory speed, none larger than `size`, so the tier's use never passes where
  // this allocation leaves it) and returns an extent of `size` in the window they left.
  // Host-memory tiers only (object_store_compaction.cc).
  Result<Extent> OpenWindowLocked(TierKind kind, std::uint32_t pool, std::uint64_t size);
  // Carries out one decision; false when it no longer applies or could not start.
  bool ApplyLocked(const PlacementDecision& d, MovePriority priority);
  // Starts copying obj's copy in `from` to `to` (dst allocated there, or allocated here with
  // instant room only). On success obj.move is set and the mover has the operation.
  Status StartMoveLocked(StoredObject& obj, TierKind from, TierKind to, MovePriority priority,
                         std::uint64_t deadline_us, bool drop_source,
                         std::optional<Extent> dst = std::nullopt, MoveDone done = nullptr);
  // A failed move found its source's bytes gone (NOT_FOUND from a tier that is not memory):
  // drops what is lost and says so in last_move_error. False when it left things as they were
  // (a pinned copy among others).
  bool CopyLostLocked(StoredObject& obj, TierKind from, const Status& why);
  // A move down that frees `from`, through a guard copy first where the object needs one
  // (store/placement_policy.h); FAILED_PRECONDITION where no tier could hold that copy.
  Status StartMoveDownLocked(StoredObject& obj, TierKind from, TierKind to, MovePriority priority);
  // A committed put that wanted device hbm: starts its copy up (room now, or it stays in dram).
  void CopyUpAfterPutLocked(StoredObject& obj);
  // Copies object `id` into `to` at demand priority from its nearest copy (a mapped one with
  // mapped_source_only), making room there and waiting for the move. OK: the move ran (its
  // outcome is the copy's presence, or last_move_error); ABORTED: the object changed meanwhile,
  // look again; other errors: no room, or the move could not start.
  Status MoveOnDemandLocked(StoreLock& lock, std::uint64_t id, TierKind to, bool mapped_source_only,
                            Steady::time_point deadline);
  // Clears obj.move and undoes what starting it counted (bytes leaving, room incoming); the
  // caller frees or keeps its destination extent.
  ObjectMove EndMoveLocked(StoredObject& obj);
  void OnMoveDone(std::uint64_t object_id, const MoveResult& result);
  void OnMoveDoneLocked(std::uint64_t object_id, const MoveResult& result,
                        std::vector<MoveDone>* callbacks);
  std::uint64_t HbmBytesOfLocked(const std::string& ns) const;
  // Folds a planned namespace's hbm bytes now into its peak (after an allocation there).
  void NoteHbmUseLocked(const std::string& ns);
  // The skip predicate for the policy: hbm copies in planned namespaces.
  bool PlanOwnedLocked(const StoredObject& obj, TierKind tier) const;
  // For a planned namespace: true when `size` more bytes in hbm keep it within the job's budget,
  // waiting (mu_ released) while copies are leaving hbm. True for other namespaces.
  bool WithinPlanBudgetLocked(StoreLock& lock, const std::string& ns, std::uint64_t size);
  // Waits (mu_ released) until obj has no move in flight or the deadline passes. False on
  // timeout. obj may be freed meanwhile: callers look it up again by id.
  bool WaitForMoveLocked(StoreLock& lock, std::uint64_t object_id, Steady::time_point deadline);
  // Makes sure the named object has a copy clients can map (bringing it back from nvme if it
  // must), and returns it with that copy's tier.
  Result<std::pair<StoredObject*, TierKind>> EnsureMappedLocked(StoreLock& lock,
                                                                const std::string& ns,
                                                                const std::string& key);
  void FreeCopyLocked(StoredObject& obj, TierKind t);
  // A retained object's record landed on nvme at `at`: the persist journal records it.
  void JournalNvmeCopyLocked(StoredObject& obj, const Extent& at);
  // Frees obj's copy in t now, or when its last reader lets go (free_on_unpin). The object must
  // have another copy.
  void FreeCopyWhenUnpinnedLocked(StoredObject& obj, TierKind t);
  // Undoes FreeCopyWhenUnpinnedLocked: the copy stays (it is wanted again).
  void KeepCopyLocked(StoredObject& obj, TierKind t);
  // KeepCopyLocked for a reader or a prefetch that wants the copy again, counted as such.
  void CancelFreeOnUnpinLocked(StoredObject& obj, TierKind t);
  void DoomLocked(StoredObject& obj);
  void MaybeFreeLocked(StoredObject& obj);
  void FreeReservationLocked(std::uint64_t id);
  void QuarantineLocked(StoredObject& obj, const Status& why);
  void UnpinLocked(std::uint64_t object_id, TierKind tier);
  // What a copy's last reader letting go may leave to do (a free asked for while it was read, a
  // deleted object to free); a release under the shared lock that finds either comes back here
  // with mu_ held exclusively.
  void SettleUnpinnedLocked(std::uint64_t object_id, TierKind tier);
  // Under mu_ shared: lets go of a taken lease's pin; true when that was its copy's last and
  // something waits on it (SettleUnpinnedLocked, under mu_ exclusive, then).
  bool UnpinShared(const Lease& lease);
  // A get taken under mu_ held shared: the pinned copy, or nothing when the get needs the
  // exclusive path (anything to wait for, move, or change besides the pin).
  std::optional<Result<PinnedObject>> TryPinShared(const std::string& ns, const std::string& key,
                                                   std::uint64_t owner, const PinOptions& options);
  // Under mu_ shared: pins ns/key's top mapped copy (the wanted tier's, if options name one)
  // under the name's lock, setting *obj and *t. kNone: no such object; kExclusive: one the
  // shared path does not take (corrupt, to be moved, a free pending), nothing pinned.
  enum class SharedPin { kNone, kPinned, kExclusive };
  SharedPin PinUnderNameShared(std::string_view ns, std::string_view key, const PinOptions& options,
                               StoredObject** obj, TierKind* t);
  // Per-connection and per-namespace limits (object_store_admission.cc).
  Status AdmitReserveLocked(const PutSpec& spec, std::uint64_t owner);
  // A put of a new name (a reservation) past max_objects or max_objects_per_namespace.
  Status WithinObjectLimitsLocked(const PutSpec& spec, std::uint64_t owner);
  // A reservation of `size` more by owner past its process's or its user's share.
  Status WithinGroupLimitsLocked(std::uint64_t owner, std::uint64_t size);
  // Whether a connection holding `h` must be counted with its siblings before it reserves size.
  bool NeedsGroupCheck(const OwnerHoldings& h, std::uint64_t size) const {
    return h.reserved_bytes + size > group_check_bytes_;
  }
  // Why a connection holding `h` may not reserve `size` bytes more (its per-connection limits),
  // or empty when it may.
  std::string OverClientLimits(const OwnerHoldings& h, std::uint64_t size) const;
  // A new reservation's meta: what the put spec says (its names taken), its copy in `tier`.
  static ObjectMeta MetaOf(PutSpec&& spec, TierKind tier);
  // When a new reservation of owner's falls due (0: never).
  std::uint64_t ReservationDue(std::uint64_t owner) const;
  // A reserve under mu_ held shared, beside other puts and gets: a put into dram that free room
  // holds now, within its connection's limits, in a namespace without a quota; staged room
  // (Stage's case) also within the staged-room limit and below dram's high watermark. nullopt:
  // anything else, left to the exclusive path (nothing was changed, spec included). A
  // reservation made takes spec's names (ns, key, dtype, shape) instead of copying them.
  std::optional<Reservation> TryReserveShared(PutSpec& spec, std::uint64_t owner, bool staged);
  // A commit under mu_ held shared: of a reservation made for a key, or of staged room named
  // by `name` (its namespace, at most its size), with nothing more to do as it commits (no copy
  // up). The object it replaces is freed here when no other thread can reach it; otherwise its
  // id is left in *doom for the exclusive path. nullopt: not this reservation's case (or not
  // this owner's), nothing changed.
  std::optional<Status> TryCommitShared(std::uint64_t reservation_id, std::uint64_t checksum,
                                        std::uint64_t owner, const PutSpec* name,
                                        std::uint64_t created_unix_ms, std::uint64_t* doom);
  // Frees an object no other thread can reach (unlinked as its replacement committed, with no
  // pins, holds or move) under mu_ held shared, when all its copies are in host memory. False:
  // left as it was.
  bool FreeUnreachableShared(StoredObject& obj);
  // The limits every put spec must keep; named: a key is required (else it must be empty).
  Status CheckPutSpec(const PutSpec& spec, bool named) const;
  // Names a staged reservation after `name` (checked); frees it and says why when it cannot.
  Status BindStagedLocked(StoredObject& obj, const PutSpec& name);
  // Whether staged room may take a put of `name` (its namespace, at most its size).
  static bool StagedRoomTakes(const StoredObject& room, const PutSpec& name);
  // Gives staged room the name, trimmed to the put's size (the rest back to its tier); the
  // trim's error, if any, with nothing named. Under mu_ exclusive, or shared once claimed.
  Status NameStagedRoom(StoredObject& room, const PutSpec& name);
  // The per-connection pin limit reached (the lease table's count; mu_ held, either mode).
  bool AtPinLimit(std::uint64_t owner) const;
  // When a new lease of owner's falls due (0: never).
  std::uint64_t LeaseDue(std::uint64_t owner) const;
  Status AdmitPinLocked(std::uint64_t owner);
  void ExpireLocked(std::uint64_t now_us);
  void RelieveWatermarksLocked();
  // Drops the copies tiers lost for good and gives the retained objects among them a copy in
  // that tier again (store/object_store_rebuild.cc).
  void TakeLostCopiesLocked();
  void ReplaceLostCopiesLocked();
  void MaintenanceLoop();

  StoreConfig config_;
  const Clock* clock_;
  std::unique_ptr<Tier> tiers_[kTierKindCount];
  std::array<bool, kTierKindCount> mapped_{};
  std::array<bool, kTierKindCount> on_device_{};
  std::array<std::uint32_t, kTierKindCount> rank_{};
  std::vector<TierKind> by_level_;  // present tiers, top first (by rank)
  std::unique_ptr<PlacementPolicy> policy_;
  // Stopped first in the destructor, so its callbacks (which take mu_ and touch the index) are
  // done before anything they use goes away; declared after the tiers it copies between.
  std::unique_ptr<Mover> mover_;

  mutable SharedMutex mu_;
  ObjectIndex index_;  // guarded by mu_ (see its header for what a shared holder may do)
  LeaseTable leases_;  // its own locks; taken with mu_ held, shared or exclusive
  // Gets and gets of names that do not exist: counted by shared holders too (StoreStats reports
  // them with the rest).
  ShardedCounter gets_, get_misses_;
  // Puts, their bytes, staged room and the puts that named it: counted under mu_ shared too.
  ShardedCounter puts_, bytes_put_, reservations_staged_, staged_commits_;
  // guarded by mu_: bytes moving out, by pool (kSharedPool only, for tiers not partitioned)
  std::vector<std::array<std::uint64_t, kTierKindCount>> leaving_{1};
  std::vector<NamespacePool> pools_;  // guarded by mu_
  // guarded by mu_: moves out of each tier that failed for a reason other than corruption (a
  // failing device below); a caller waiting for room gives up after a few of these.
  std::array<std::uint64_t, kTierKindCount> failed_out_{};
  StoreStats counters_;                                          // guarded by mu_
  std::unordered_map<std::string, std::uint64_t> incoming_hbm_;  // guarded by mu_, per namespace
  std::unordered_map<std::string, std::uint64_t> planned_ns_;    // guarded by mu_: budgets
  std::unordered_map<std::string, std::uint64_t> hbm_peak_;      // guarded by mu_: planned ns
  std::unordered_set<std::uint64_t> overdue_;                    // guarded by mu_: owners
  std::unordered_map<std::string, NamespaceQuota> quotas_;       // guarded by mu_
  // guarded by mu_: lost copies not yet dropped (pinned, or moving), and the objects to give a
  // copy in a tier again, both until done or moot.
  std::vector<std::pair<TierKind, LostCopy>> lost_copies_;
  std::vector<std::pair<std::uint64_t, TierKind>> to_replace_;
  std::atomic<std::uint64_t> overdue_count_{0};   // overdue_.size(), read without mu_
  std::uint64_t max_reserved_bytes_ = 0;          // per client, from the fraction and the tiers
  std::uint64_t max_process_reserved_bytes_ = 0;  // the same per process (0: none)
  std::uint64_t max_user_reserved_bytes_ = 0;     // and per user
  // A connection holding more than this (with the reservation asked for) is counted with its
  // process's and user's other connections; ~0: never (no such limit).
  std::uint64_t group_check_bytes_ = ~0ull;
  OwnerGroups groups_;
  PersistJournal* journal_ = nullptr;  // set before serving
  UseObserver observer_;               // set before serving
  std::condition_variable_any moved_;  // a move ended
  std::thread maintenance_;
  std::condition_variable_any wake_;
  bool stopping_ = false;  // guarded by mu_
};

}  // namespace tierpool
