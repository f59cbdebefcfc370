// Shared accounting for tiers made of host-addressable regions (dram arenas, the hbm stand-in):
// one extent allocator per region, a mutex around them, and the Tier methods on top.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <vector>

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

 private:
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
  };
  Region* FindRegion(std::uint32_t arena_id);
  // Counts `range`, just allocated in r, in the tier's use and peak (mu_ held).
  Extent TakenLocked(const Region& r, const AllocatedRange& range);
  const Region* FindRegion(std::uint32_t arena_id) const;

  TierKind kind_;
  std::uint32_t level_;
  std::string backend_;
  bool pages_locked_ = false;
  std::uint64_t capacity_ = 0;
  mutable SpinMutex mu_;         // held for an allocator call: a few dozen ns
  std::vector<Region> regions_;  // fixed once shared; each allocator guarded by mu_
  std::uint64_t used_ = 0;       // guarded by mu_
  std::uint64_t peak_ = 0;       // guarded by mu_
};

}  // namespace tierpool
