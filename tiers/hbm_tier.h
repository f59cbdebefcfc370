// The hbm tier: the accelerator's memory, the top of the hierarchy. Memory comes from an
// HbmBackend; the tier does the accounting, so a CUDA backend gets the same budget, extents and
// counters as the host stand-in.
//
// Host memory (the stand-in) is mapped by clients and copied by the tier itself. Device memory
// (CUDA, tiers/cuda_hbm_backend.h) is not host-addressable: its regions have no host address
// and no descriptor, clients open them by their IPC handle, and every byte moves through the
// backend's CopyIn / CopyOut, which the tier checks against the object's checksum on the host
// side of the copy.
//
// Thread safety: a backend's methods may be called from any thread once Init has returned;
// CopyIn and CopyOut never block on the copy (done runs later, on the backend's thread).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "tiers/arena_tier.h"
#include "tiers/memfd_arena.h"

namespace tierpool {

// One contiguous region of accelerator memory.
class HbmBackend {
 public:
  virtual ~HbmBackend() = default;
  virtual std::string name() const = 0;
  virtual Status Init(std::uint64_t capacity) = 0;
  // Host-visible base address (nullptr for device memory that the host cannot address).
  virtual std::byte* host_base() const = 0;
  // A descriptor clients can map: a memfd for host memory; -1 for device memory.
  virtual int export_fd() const = 0;
  // The same memory for mapping read-only (views); -1 where the backend cannot make one.
  virtual int export_read_only_fd() const = 0;
  // A new, uninitialized backend of the same kind: the region of a namespace pool.
  virtual std::unique_ptr<HbmBackend> Another() const = 0;
  virtual bool pages_locked() const = 0;

  // Device memory: the device's ordinal (-1: host memory) and the region's IPC handle, which a
  // client on the node opens once and addresses extents in by offset.
  virtual int device() const { return -1; }
  virtual std::string ipc_handle() const { return {}; }
  // Copies between the region (at offset) and host memory, on the device's copy engines for
  // device memory. `done` runs exactly once, on the backend's thread; the bytes are not
  // checked here (the tier does that). Host backends never get these calls.
  virtual void CopyIn(std::uint64_t offset, const std::byte* src, std::uint64_t size,
                      IoCompletion done);
  virtual void CopyOut(std::uint64_t offset, std::byte* dst, std::uint64_t size, IoCompletion done);
  // CopyIn / CopyOut with the bytes checked against `checksum` on the device (the bytes that
  // landed there, or those read from it): DATA_LOSS to `done` when they differ. False, with
  // nothing started and `done` not called, where the backend cannot (host memory, small or
  // unaligned copies, device checks off): the tier checks on the host side instead.
  virtual bool CopyInChecked(std::uint64_t /*offset*/, const std::byte* /*src*/,
                             std::uint64_t /*size*/, std::uint64_t /*checksum*/,
                             const IoCompletion& /*done*/) {
    return false;
  }
  virtual bool CopyOutChecked(std::uint64_t /*offset*/, std::byte* /*dst*/, std::uint64_t /*size*/,
                              std::uint64_t /*checksum*/, const IoCompletion& /*done*/) {
    return false;
  }
  // Runs `work` off the copy threads (a checksum pass beside the copy); inline by default.
  virtual void Post(std::function<void()> work) { work(); }
  // Host memory that copies will read and write (dram's arenas): registered with the device so
  // that copies run on its copy engines straight from it. A no-op for host memory.
  virtual Status RegisterHostMemory(void* /*base*/, std::uint64_t /*size*/) { return Status::Ok(); }
};

// A CUDA device's memory (--hbm-device N). UNAVAILABLE where tierpool was built without CUDA
// (-DTIERPOOL_CUDA=OFF) or no such device answers; the caller falls back to the stand-in.
// Bytes are checked on the device where they can be (device_checks, tiers/cuda_xxh3.h), else on
// the host by checksum_threads threads beside the copy engines (0: 3/4 of the host's cores, at
// most 12): one thread's XXH3 over memory the engine just wrote runs at 7-10 GB/s, a sixth of
// a PCIe 5 engine's rate (docs/benchmarks/hbm.md "hbm in a GPU's memory").
struct CudaHbmOptions {
  int checksum_threads = 0;  // host checks' threads (0: 3/4 of the host's cores, at most 12)
  bool device_checks = true;
  // Copies of at least this many bytes are checked on the device, smaller ones on the host
  // (where several objects are hashed at once): host checks measured faster up to 16 MiB on an
  // H100 (at 1 MiB on an H200 too), and slower from 64 MiB, where one object's pass on one
  // thread holds its copy's completion back (`tierpool bench hbm --device-check-min`).
  std::uint64_t device_check_min_bytes = 16ull << 20;
  // Unchecked copies queued back to back share one completion event until they hold this many
  // bytes (0: an event per copy; tiers/cuda_copy_engine.h, "Completion groups").
  std::uint64_t completion_group_bytes = 16ull << 20;
  Status validate() const;
};
Result<std::unique_ptr<HbmBackend>> MakeCudaHbmBackend(int device, CudaHbmOptions options = {});

// Stand-in for device memory: a page-locked, shared host arena with a fixed budget.
class HostPinnedHbmBackend final : public HbmBackend {
 public:
  std::string name() const override { return "host-pinned"; }
  Status Init(std::uint64_t capacity) override;
  std::byte* host_base() const override { return arena_ ? arena_->base() : nullptr; }
  int export_fd() const override { return arena_ ? arena_->fd() : -1; }
  int export_read_only_fd() const override { return arena_ ? arena_->read_only_fd() : -1; }
  std::unique_ptr<HbmBackend> Another() const override {
    return std::make_unique<HostPinnedHbmBackend>();
  }
  bool pages_locked() const override { return arena_ && arena_->locked(); }

 private:
  std::unique_ptr<MemfdArena> arena_;
};

struct HbmTierConfig {
  // The whole tier: the namespace pools' regions and the rest as the shared pool's.
  std::uint64_t capacity = 256ull * 1024 * 1024;
  std::uint64_t alignment = 4096;
  std::uint32_t arena_id = 0;  // the shared pool's region
  // Bytes of each namespace pool (pool i + 1), each its own region with arena id
  // first_pool_arena_id + i; 0: the pool has none.
  std::vector<std::uint64_t> pools;
  std::uint32_t first_pool_arena_id = 1u << 20;
  Status validate() const;
};

class HbmTier final : public ArenaTier {
 public:
  static Result<std::unique_ptr<HbmTier>> Create(const HbmTierConfig& config,
                                                 std::unique_ptr<HbmBackend> backend);
  // Host memory that moves to and from this tier read and write (dram's arenas).
  Status RegisterHostMemory(void* base, std::uint64_t size);
  bool device_memory() const { return backends_.front()->device() >= 0; }

 protected:
  // Device memory: the backend copies, and the bytes are checked on the host side (the source
  // of a write, beside its copy; the destination of a read, after it). Host memory: ArenaTier's.
  void ReadImpl(const Extent& src, const RecordInfo& info, std::byte* dst,
                IoCompletion done) override;
  void WriteImpl(const Extent& dst, const RecordInfo& info, const std::byte* src,
                 IoCompletion done) override;

 private:
  explicit HbmTier(std::unique_ptr<HbmBackend> backend)
      : ArenaTier(TierKind::kHbm, /*level=*/0, backend->name()) {
    backends_.push_back(std::move(backend));
  }
  Status AddBackendRegion(HbmBackend& backend, std::uint32_t arena_id, std::uint64_t size,
                          std::uint32_t pool, std::uint64_t alignment);
  HbmBackend* BackendOf(std::uint32_t arena_id) const;
  // The backend that copies `size` bytes of extent e of device memory; nullptr once `done` has
  // been answered (an extent outside every region, or nothing to copy).
  HbmBackend* DeviceCopyOf(const Extent& e, std::uint64_t size, const IoCompletion& done);
  std::vector<std::unique_ptr<HbmBackend>> backends_;  // the shared pool's first
  // Each region's arena id and backend; written in Create only.
  std::vector<std::pair<std::uint32_t, HbmBackend*>> region_backends_;
  bool all_locked_ = true;
};

}  // namespace tierpool
