// Shared accounting for tiers made of host-addressable regions (dram arenas, the hbm stand-in):
// one extent allocator per region, a mutex around them, and the Tier methods on top.
//
// Locking: mu_ guards the allocators and the use counts; each per-thread cache slot has a
// SpinMutex of its own. Order: mu_, then a slot's lock (never a slot's lock, then mu_). The
// regions never change once the tier is shared, so finding one takes no lock. A region's
// count of cached bytes is atomic and changes only under the slot lock of the cache the extent
// enters or leaves, so readers (SpaceOf, used_bytes) visit no cache.
#pragma once

#include <array>
#include <atomic>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <boost/container/static_vector.hpp>

#include "common/spin_mutex.h"
#include "tiers/extent_allocator.h"
#include "tiers/tier.h"

namespace tierpool {

// Where a region of device memory is: the device and the IPC handle clients open it by.
struct RegionDevice {
  int device = -1;
  std::string ipc_handle;
};

class ArenaTier : public Tier {
 public:
  TierKind kind() const override { return kind_; }
  std::uint32_t level() const override { return level_; }
  Result<Extent> Allocate(std::uint64_t size, const AllocationHint& hint) override;
  Status Free(const Extent& extent) override;
  Result<Extent> Trim(const Extent& extent, std::uint64_t keep) override;
  std::vector<Extent> FreeExtents(std::uint32_t pool) const override;
  Result<Extent> AllocateAt(const Extent& want) override;
  Result<Extent> AllocateOutside(std::uint64_t size, std::uint32_t pool,
                                 const Extent& avoid) override;
  std::byte* HostAddress(const Extent& extent) override;
  std::vector<ArenaInfo> Arenas() const override;
  TierStats Stats() const override;
  std::uint64_t capacity() const override { return capacity_; }
  std::uint64_t used_bytes() const override;
  void ResetPeak() override;
  bool partitioned() const override { return true; }
  PoolSpace SpaceOf(std::uint32_t pool) const override;

 protected:
  ArenaTier(TierKind kind, std::uint32_t level, std::string backend)
      : kind_(kind), level_(level), backend_(std::move(backend)) {}
  // A copy in host memory: completes on the calling thread. Both directions copy and checksum in
  // one pass (CopyAndChecksum) and fail with DATA_LOSS when the bytes do not match.
  void ReadImpl(const Extent& src, const RecordInfo& info, std::byte* dst,
                IoCompletion done) override;
  void WriteImpl(const Extent& dst, const RecordInfo& info, const std::byte* src,
                 IoCompletion done) override;
  // A region of `pool`, added before the tier is shared (its factory): regions never change
  // after that. fd and read_only_fd are what clients of the pool map (-1: none). A
  // region of device memory has no base (HostAddress is nullptr in it) and no descriptors, and
  // clients open it by device and ipc_handle instead.
  void AddRegion(std::uint32_t arena_id, std::byte* base, std::uint64_t size, int fd,
                 int read_only_fd, int numa_node, std::uint32_t pool, std::uint64_t alignment,
                 RegionDevice device = {});
  // An extent's region checked: Internal when it lies outside every region.
  Status CheckExtent(const Extent& extent) const;
  void set_pages_locked(bool locked) { pages_locked_ = locked; }
  // Before the tier is shared: what backs it, once its regions are made.
  void set_backend(std::string backend) { backend_ = std::move(backend); }
  // Before the tier is shared: small extents freed on a thread wait in a cache of that thread's
  // for its next allocation of the same length (below).
  void set_thread_caches(bool on) { thread_caches_ = on; }

 private:
  // An atomic byte count that can be copied while regions_ grows, before the tier is shared.
  struct CachedBytesCount {
    std::atomic<std::uint64_t> bytes{0};
    CachedBytesCount() = default;
    CachedBytesCount(const CachedBytesCount& other) : bytes(other.bytes.load()) {}
  };
  struct Region {
    std::uint32_t arena_id;
    std::byte* base;
    std::uint64_t size;
    int fd;
    int read_only_fd;
    int numa_node;
    std::uint32_t pool;
    ExtentAllocator allocator;
    RegionDevice device;
    // Bytes of this region's extents waiting in the thread caches (they count as used in the
    // allocator, as free in SpaceOf and used_bytes). Never above the allocator's used bytes.
    mutable CachedBytesCount cached;
  };
  // An extent freed on a thread, waiting for that thread's next allocation of its length.
  struct CachedExtent {
    Extent extent;
    std::uint32_t pool;
    int numa_node;
  };
  struct alignas(64) CacheSlot {
    SpinMutex mu;
    // Newest last. 64: a batch of puts that replaces as many objects reserves all its room
    // before its commit frees the old (64 x 4 KiB: 7% faster than with 16).
    boost::container::static_vector<CachedExtent, 64> extents GUARDED_BY(mu);
  };
  Region* FindRegion(std::uint32_t arena_id);
  // Allocate from the allocators.
  Result<Extent> AllocateLocked(std::uint64_t size, const AllocationHint& hint) REQUIRES(mu_);
  // Counts `range`, just allocated in r, in the tier's use and peak.
  Extent TakenLocked(const Region& r, const AllocatedRange& range) REQUIRES(mu_);
  const Region* FindRegion(std::uint32_t arena_id) const;
  // The allocation from the calling thread's cache, if one of its extents fits exactly.
  std::optional<Extent> TakeCached(std::uint64_t size, const AllocationHint& hint);
  // Keeps extent in the calling thread's cache. False: not cached (too large, cache full).
  Result<bool> CacheFreed(const Extent& extent);
  // Gives every cached extent back to its allocator: the slow paths see all the free space there
  // is. Returns the bytes given back.
  std::uint64_t DrainCachesLocked() const REQUIRES(mu_);
  // The allocators' used bytes, less what waits in the caches, of `pool` (nullopt: all pools).
  std::uint64_t UsedLocked(std::optional<std::uint32_t> pool) const REQUIRES(mu_);

  TierKind kind_;
  std::uint32_t level_;
  std::string backend_;
  bool pages_locked_ = false;
  std::uint64_t capacity_ = 0;
  mutable SpinMutex mu_;         // held for an allocator call: a few dozen ns
  std::vector<Region> regions_;  // fixed once shared; each allocator guarded by mu_
  // Bytes the allocators handed out, cached extents included (they count as free only in
  // used_bytes, SpaceOf and Stats); the peak is of this figure, so it may exceed the tier's true
  // peak by what the caches held at the time.
  mutable std::uint64_t used_ GUARDED_BY(mu_) = 0;  // (DrainCachesLocked, logically const)
  std::uint64_t peak_ GUARDED_BY(mu_) = 0;
  // Per-thread caches (common/thread_slot.h) of extents up to kMaxCachedExtent: a thread that
  // replaces what it wrote (a KV block, an activation per step) takes its extent back without
  // mu_ and the allocators' trees, which every core's puts would otherwise pass between them,
  // and writes memory its own core last wrote. Off unless set_thread_caches.
  static constexpr std::uint64_t kMaxCachedExtent = 64 << 10;
  static constexpr int kCacheSlots = 16;
  bool thread_caches_ = false;  // fixed once shared
  mutable std::array<CacheSlot, kCacheSlots> caches_;
};

}  // namespace tierpool
