// The hbm tier: the accelerator's memory, the top of the hierarchy. Memory comes from an
// HbmBackend; the tier does the accounting, so a CUDA backend gets the same budget, extents and
// counters as the host stand-in.
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
  // A descriptor clients can map: a memfd for host memory (CUDA IPC handles come later).
  virtual int export_fd() const = 0;
  // The same memory for mapping read-only (views); -1 where the backend cannot make one.
  virtual int export_read_only_fd() const = 0;
  // A new, uninitialized backend of the same kind: the region of a namespace pool.
  virtual std::unique_ptr<HbmBackend> Another() const = 0;
  virtual bool pages_locked() const = 0;
};

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

 private:
  explicit HbmTier(std::unique_ptr<HbmBackend> backend)
      : ArenaTier(TierKind::kHbm, /*level=*/0, backend->name()) {
    backends_.push_back(std::move(backend));
  }
  Status AddBackendRegion(HbmBackend& backend, std::uint32_t arena_id, std::uint64_t size,
                          std::uint32_t pool, std::uint64_t alignment);
  std::vector<std::unique_ptr<HbmBackend>> backends_;  // the shared pool's first
  bool all_locked_ = true;
};

}  // namespace tierpool
