// The object store: the index of (namespace, key) -> object, placement across tiers, two-phase
// puts (reserve, write in place, commit), pins under leases, watermark-driven demotion, promotion
// on request and LRU eviction of `cache` objects. `retained` objects are never dropped.
//
// One mutex guards the index; bytes are copied outside it (migration) or by clients in place.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "common/status.h"
#include "tiers/nvme_tier.h"
#include "tiers/tier.h"

namespace tierpool {

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
};

struct StoreConfig {
  std::uint64_t reservation_ttl_ms = 30'000;  // an uncommitted reservation is freed after this
  std::uint64_t lease_ttl_ms = 60'000;        // a pin not released is dropped after this
  std::uint32_t max_key_bytes = 1024;
  std::uint32_t max_namespace_bytes = 256;
  std::uint32_t max_dtype_bytes = 32;
  std::uint32_t max_shape_dims = 16;
  std::uint64_t max_object_bytes = 0;  // 0: limited by tier capacity only
  std::uint32_t maintenance_interval_ms = 20;
  // What to do with a `cache` object when dram needs room and nvme exists: spill it like a
  // retained one, or drop it (a miss is recomputed) and keep nvme for retained objects.
  enum class CachePolicy : std::uint8_t { kSpill, kDrop };
  CachePolicy cache_policy = CachePolicy::kSpill;
  Status validate() const;
};

struct Reservation {
  std::uint64_t id = 0;
  Extent extent;
  TierKind tier = TierKind::kDram;
};

struct PinnedObject {
  std::uint64_t lease_id = 0;
  ObjectMeta meta;
  Extent extent;
};

struct TierUsage {
  TierStats tier;
  std::uint64_t object_count = 0;
  Watermarks watermarks;
};

struct StoreStats {
  std::vector<TierUsage> tiers;
  std::uint64_t objects = 0;
  std::uint64_t reservations_open = 0;
  std::uint64_t leases_open = 0;
  std::uint64_t puts = 0;
  std::uint64_t bytes_put = 0;
  std::uint64_t gets = 0;
  std::uint64_t get_misses = 0;
  std::uint64_t deletes = 0;
  std::uint64_t evictions = 0;
  std::uint64_t demotions = 0;
  std::uint64_t promotions = 0;
  std::uint64_t migrations_aborted = 0;
  std::uint64_t reservations_expired = 0;
  std::uint64_t leases_expired = 0;
  std::uint64_t resource_exhausted = 0;
  std::uint64_t sessions_cleaned = 0;
  std::uint64_t spills = 0;              // dram -> nvme
  std::uint64_t spill_failures = 0;      // the object stayed where it was
  std::uint64_t nvme_reads = 0;          // objects brought back from nvme
  std::uint64_t nvme_read_failures = 0;  // I/O error or checksum mismatch: an error to the caller
  std::uint64_t corrupt_in_memory = 0;   // bytes in dram no longer match their checksum at spill
};

class ObjectStore {
 public:
  // tiers: any subset of hbm and dram (dram required). Owner ids name who holds reservations and
  // leases (a connection); ReleaseOwner frees them all.
  static Result<std::unique_ptr<ObjectStore>> Create(StoreConfig config,
                                                     std::vector<std::unique_ptr<Tier>> tiers);
  ~ObjectStore();

  // Starts / stops the maintenance thread (expiry, demotion under watermark pressure).
  void Start();
  void Stop();

  Result<Reservation> Reserve(const PutSpec& spec, std::uint64_t owner);
  Status Commit(std::uint64_t reservation_id, std::uint64_t checksum, std::uint64_t owner);
  Status Abort(std::uint64_t reservation_id, std::uint64_t owner);
  // Reserve, copy, commit: for bytes that arrive in a frame. The checksum is computed here.
  Status PutCopy(const PutSpec& spec, const void* data, std::uint64_t owner);

  Result<PinnedObject> Pin(const std::string& ns, const std::string& key, std::uint64_t owner);
  Status Release(std::uint64_t lease_id, std::uint64_t owner);
  Result<ObjectMeta> Head(const std::string& ns, const std::string& key);
  // Copies the bytes out (under a short pin) into out.
  Result<ObjectMeta> ReadCopy(const std::string& ns, const std::string& key, std::string* out);

  Status Delete(const std::string& ns, const std::string& key);
  // Sorted by (namespace, key). ns empty with all_namespaces lists everything.
  std::vector<ObjectMeta> List(const std::string& ns, const std::string& prefix,
                               const std::string& start_after, std::uint32_t limit,
                               bool all_namespaces, bool* truncated);
  // Moves an object to target (hbm or dram), making room in hbm by demoting LRU objects.
  Status Promote(const std::string& ns, const std::string& key, TierKind target);

  void ReleaseOwner(std::uint64_t owner);
  // One pass of what the maintenance thread does; tests call it directly.
  void RunMaintenance();

  std::byte* HostAddress(const Extent& extent);
  std::vector<ArenaInfo> Arenas() const;
  StoreStats Stats() const;
  const StoreConfig& config() const { return config_; }

 private:
  struct Object;
  using ObjectKey = std::pair<std::string, std::string>;
  struct Lease {
    std::uint64_t object_id;
    std::uint64_t owner;
    std::uint64_t expiry_us;
  };

  ObjectStore(StoreConfig config, std::vector<std::unique_ptr<Tier>> tiers);
  Status ValidateName(const std::string& ns, const std::string& key) const;
  Tier* tier(TierKind kind) const { return tiers_[static_cast<int>(kind)].get(); }
  // Allocates in the kind's tier. dram makes room by spilling its LRU objects to nvme (may drop
  // the lock) and then by dropping LRU `cache` objects; nvme by dropping `cache` objects.
  Result<Extent> AllocateLocked(std::unique_lock<std::mutex>& lock, TierKind kind,
                                std::uint64_t size, int numa_hint);
  // Spills dram's least recently used movable object to nvme (or drops it, for `cache` under
  // CachePolicy::kDrop). False when nothing could move.
  bool SpillOneLocked(std::unique_lock<std::mutex>& lock);
  Status CopyBetweenTiers(TierKind from, const Extent& src, TierKind to, const Extent& dst,
                          const ObjectMeta& meta, std::uint64_t object_id);
  bool EvictOneLocked(TierKind kind);
  void FreeObjectLocked(std::uint64_t object_id);
  void UnlinkLocked(Object& obj);
  void UnpinLocked(std::uint64_t object_id);
  void TouchLocked(Object& obj);
  ObjectMeta MetaLocked(const Object& obj) const;
  // Copies obj to target outside the lock; aborts if the object was pinned meanwhile.
  Status MigrateLocked(std::unique_lock<std::mutex>& lock, std::uint64_t object_id,
                       TierKind target);
  void DemoteUnderPressureLocked(std::unique_lock<std::mutex>& lock, TierKind kind);
  void SpillUnderPressureLocked(std::unique_lock<std::mutex>& lock);
  // Brings an object on nvme back to dram (waiting for a move already under way).
  Status EnsureInMemoryLocked(std::unique_lock<std::mutex>& lock, const ObjectKey& key);
  void ExpireLocked(std::uint64_t now_us);
  void MaintenanceLoop();

  StoreConfig config_;
  std::unique_ptr<Tier> tiers_[kTierKindCount];

  mutable std::mutex mu_;
  std::unordered_map<std::uint64_t, std::unique_ptr<Object>> objects_;
  std::map<ObjectKey, std::uint64_t> index_;
  std::unordered_map<std::uint64_t, Lease> leases_;
  std::unordered_set<std::uint64_t> reservations_;  // ids of uncommitted objects
  std::list<std::uint64_t> lru_[kTierKindCount];    // front: least recently used
  std::uint64_t next_id_ = 1;
  StoreStats counters_;

  NvmeTier* nvme_ = nullptr;  // tiers_[kNvme], typed
  std::condition_variable migration_done_;
  std::thread maintenance_;
  std::condition_variable wake_;
  bool stopping_ = false;
};

}  // namespace tierpool
