// The Tier interface: one class per tier (hbm, dram, nvme; remote later) behind it.
// A tier hands out extents, accounts for them, and reads and writes bytes in them; it knows its
// place in the hierarchy but nothing of objects or policy. The store decides what lives where and
// the mover (store/mover.h) decides when bytes move.
//
// Thread safety: every method may be called from any thread. Read and Write may block on the
// device (nvme) and must never be called with the store's lock held.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "tierpool/types.h"

namespace tierpool {

// Where an object's bytes are: an arena (a mappable region) and a range in it.
struct Extent {
  std::uint32_t arena_id = 0;
  std::uint64_t offset = 0;
  std::uint64_t length = 0;  // allocated length (>= the object's size)
};

// A region clients map: the server passes fd (read-write, for reservations) and read_only_fd
// (for views) to the local clients that may use the region's pool, over the Unix socket.
struct ArenaInfo {
  std::uint32_t id = 0;
  TierKind tier = TierKind::kDram;
  int fd = -1;
  std::uint64_t size = 0;
  int numa_node = -1;
  std::uint32_t pool = 0;  // kSharedPool, or the namespace pool that alone uses it
  int read_only_fd = -1;   // the same memory, opened read-only: cannot be mapped writable
  // Device memory (fd is -1): the device's ordinal and the CUDA IPC handle clients open it by.
  int device = -1;
  std::string ipc_handle;
};

// A tier whose memory clients map is split into pools, each its own arenas: the shared pool
// and one per namespace pool of the namespace policy, so that a client maps only the memory of
// namespaces it may use. Tiers that clients never map (nvme) have one pool for everything.
inline constexpr std::uint32_t kSharedPool = 0;

struct AllocationHint {
  int numa_node = -1;                // < 0: any node
  std::uint32_t pool = kSharedPool;  // ignored by tiers that are not partitioned
  // A cache object may be dropped and fetched again: a tier that keeps several copies for
  // safety (remote) keeps one.
  bool cache = false;
  // Room for a copy that replaces one lost (the store's rebuild): a tier may pace such copies
  // behind its clients' (remote: --remote-repair-rate) and refuse for now with
  // RESOURCE_EXHAUSTED.
  bool repair = false;
};

// A copy a tier lost for good (remote: every replica's peer is gone): its object, and the
// extent the store recorded for it.
struct LostCopy {
  std::uint64_t object_id = 0;
  Extent extent;
};

// One pool's room in a tier (the whole tier for a tier that is not partitioned).
struct PoolSpace {
  std::uint64_t capacity = 0;
  std::uint64_t used = 0;
};

struct Watermarks {
  double high = 0.90;  // above this fraction of capacity, the store moves objects down
  double low = 0.75;   // and stops once under this one
  Status validate(std::string_view tier) const;
};

struct TierStats {
  TierKind kind = TierKind::kDram;
  std::uint64_t capacity = 0;
  std::uint64_t used_bytes = 0;
  std::uint64_t peak_used_bytes = 0;  // the most ever in use at once since start
  std::uint64_t free_extents = 0;
  std::uint64_t largest_free_extent = 0;
  double fragmentation = 0;
  std::uint64_t allocations = 0;
  std::uint64_t frees = 0;
  std::uint64_t failed_allocations = 0;
  bool pages_locked = false;
  std::string backend;       // e.g. "memfd/numa", "host-pinned"
  std::string state = "ok";  // ok, degraded (repeated I/O errors), full (ENOSPC)
  std::string state_why;     // what made it so, for a person (the peers that do not answer)
  std::uint64_t read_errors = 0;
  std::uint64_t write_errors = 0;
  std::uint64_t checksum_failures = 0;
};

// What a tier is told about the bytes it reads or writes: enough to label and check them.
struct RecordInfo {
  std::uint64_t key_hash = 0;   // KeyHash(ns, key): a record names its object
  std::uint64_t object_id = 0;  // the store's id of the object
  std::uint64_t size = 0;       // payload bytes
  std::uint64_t checksum = 0;   // XXH3-64 of the payload
};

// XXH3-64 of namespace, a zero byte, and key: stored in records to catch index mix-ups.
std::uint64_t KeyHash(const std::string& ns, const std::string& key);

// Called exactly once when a Read or Write ends, on any thread (possibly the caller's, before
// Read or Write returns).
using IoCompletion = std::function<void(Status)>;

struct TierIoCounters {
  std::uint64_t reads = 0;
  std::uint64_t writes = 0;
  std::uint64_t bytes_read = 0;
  std::uint64_t bytes_written = 0;
  std::uint64_t failures = 0;  // reads or writes that completed with an error
};

// Adds one allocator's figures to a tier's; FinishFragmentation once all are in.
struct ExtentAllocatorStats;
void AddAllocatorStats(const ExtentAllocatorStats& a, TierStats* s, std::uint64_t* free_bytes);
void FinishFragmentation(TierStats* s, std::uint64_t free_bytes);

class Tier {
 public:
  virtual ~Tier() = default;
  virtual TierKind kind() const = 0;
  // Place in the hierarchy: 0 is the top (the fastest, nearest the accelerator); a move to a
  // larger level is a move down. The store's spill order may rank the tiers below dram
  // otherwise (StoreConfig::spill_order).
  virtual std::uint32_t level() const = 0;
  // Whether a copy here keeps a `retained` object safe on its own while the service runs: a
  // tier of this node does, the remote tier only with two replicas or more (one peer's death
  // would take a single copy with it). A retained object whose copies are all in tiers that do
  // not keeps one in a tier that does (store/placement_policy.h).
  virtual bool keeps_retained_alone() const { return true; }
  // Bytes an object of `size` takes here (a record adds its header and rounding).
  virtual std::uint64_t Footprint(std::uint64_t size) const { return size; }
  // An extent in hint.pool's arenas (a partitioned tier), on hint.numa_node's first.
  virtual Result<Extent> Allocate(std::uint64_t size, const AllocationHint& hint) = 0;
  virtual Status Free(const Extent& extent) = 0;
  // Gives the end of an extent back: what lies past its first `keep` bytes (0 < keep, rounded
  // up to the tier's alignment), and returns the extent that remains. Room staged for a put
  // larger than the one that took it is trimmed so. A tier that cannot trim returns the extent
  // whole.
  virtual Result<Extent> Trim(const Extent& extent, std::uint64_t /*keep*/) { return extent; }
  // For opening a window by moving copies aside (the store's compaction): the pool's free
  // extents in address order, and an extent taken at a chosen place (want.length bytes at
  // want.offset, inside one free extent). Tiers that cannot place extents so return none.
  virtual std::vector<Extent> FreeExtents(std::uint32_t /*pool*/) const { return {}; }
  virtual Result<Extent> AllocateAt(const Extent& /*want*/) {
    return Status::Unimplemented(std::string(TierName(kind())) + " does not place extents");
  }
  // An extent of `size` in `pool`'s room with no byte inside `avoid`.
  virtual Result<Extent> AllocateOutside(std::uint64_t /*size*/, std::uint32_t /*pool*/,
                                         const Extent& /*avoid*/) {
    return Status::Unimplemented(std::string(TierName(kind())) + " does not place extents");
  }
  // Host address of the extent's first byte; nullptr when the tier is not host-mapped.
  virtual std::byte* HostAddress(const Extent& extent) = 0;
  virtual std::vector<ArenaInfo> Arenas() const = 0;
  virtual TierStats Stats() const = 0;
  virtual std::uint64_t capacity() const = 0;
  virtual std::uint64_t used_bytes() const = 0;
  // Whether the tier is split into pools (see kSharedPool), and one pool's room.
  virtual bool partitioned() const { return false; }
  virtual PoolSpace SpaceOf(std::uint32_t /*pool*/) const { return {capacity(), used_bytes()}; }
  // OK when the tier takes writes now; RESOURCE_EXHAUSTED when full, UNAVAILABLE while degraded.
  virtual Status CheckWritable() { return Status::Ok(); }
  // Whether a read of the extent can be expected to answer now: false where every place that
  // holds it is known not to (peers that do not answer), so that a reader with another copy
  // reads that one instead of waiting out a timeout. Cheap: no I/O.
  virtual bool LikelyReadable(const Extent& /*extent*/) const { return true; }
  // The copies lost for good since the last call, so that the store drops them and places its
  // objects again before a reader finds out (tiers of this node lose nothing so: none).
  virtual std::vector<LostCopy> TakeLostCopies() { return {}; }
  // Starts TierStats::peak_used_bytes again from the use now.
  virtual void ResetPeak() {}
  const Watermarks& watermarks() const { return watermarks_; }
  void set_watermarks(Watermarks w) { watermarks_ = w; }

  // Reads the object in `src` into dst (host memory with room for src.length bytes), checking it
  // against info.checksum: DATA_LOSS on a mismatch, never unchecked bytes.
  void Read(const Extent& src, const RecordInfo& info, std::byte* dst, IoCompletion done);
  // Writes info.size bytes from src (host memory) into `dst`, checking them against
  // info.checksum on the way (in the same pass where the tier copies), so a tier never holds a
  // "verified" copy of bytes that were already wrong.
  void Write(const Extent& dst, const RecordInfo& info, const std::byte* src, IoCompletion done);
  TierIoCounters io_counters() const;

 protected:
  virtual void ReadImpl(const Extent& src, const RecordInfo& info, std::byte* dst,
                        IoCompletion done) = 0;
  virtual void WriteImpl(const Extent& dst, const RecordInfo& info, const std::byte* src,
                         IoCompletion done) = 0;

 private:
  IoCompletion Counted(IoCompletion done, bool is_write, std::uint64_t bytes);

  Watermarks watermarks_;
  std::atomic<std::uint64_t> reads_{0}, writes_{0}, bytes_read_{0}, bytes_written_{0},
      io_failures_{0};
};

inline Status Watermarks::validate(std::string_view tier) const {
  if (!(low >= 0 && low <= high && high <= 1.0)) {
    return Status::InvalidArgument(std::string(tier) +
                                   " watermarks must satisfy 0 <= low <= high <= 1");
  }
  return Status::Ok();
}

}  // namespace tierpool
