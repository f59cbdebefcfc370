#include "tiers/hbm_tier.h"

#include <atomic>

#include "common/checksum.h"
#include "common/units.h"

namespace tierpool {

void HbmBackend::CopyIn(std::uint64_t, const std::byte*, std::uint64_t, IoCompletion done) {
  done(Status::Unimplemented(name() + " memory is host memory: the tier copies it"));
}

void HbmBackend::CopyOut(std::uint64_t, std::byte*, std::uint64_t, IoCompletion done) {
  done(Status::Unimplemented(name() + " memory is host memory: the tier copies it"));
}

#ifndef TIERPOOL_HAVE_CUDA
Result<std::unique_ptr<HbmBackend>> MakeCudaHbmBackend(int /*device*/, CudaHbmOptions /*options*/) {
  return Status::Unavailable("tierpool was built without CUDA (-DTIERPOOL_CUDA=OFF)");
}
#endif

Status CudaHbmOptions::validate() const {
  if (checksum_threads < 0 || checksum_threads > 256) {
    return Status::InvalidArgument("hbm checksum threads must be 0 to 256");
  }
  if (completion_group_bytes > (1ull << 30)) {
    return Status::InvalidArgument("an hbm completion group holds at most 1 GiB");
  }
  return Status::Ok();
}

Status HostPinnedHbmBackend::Init(std::uint64_t capacity) {
  auto arena = MemfdArena::Create(
      {.name = "tierpool-hbm", .size = capacity, .numa_node = -1, .lock_pages = true});
  if (!arena.ok()) return arena.status();
  arena_ = std::move(arena).value();
  return Status::Ok();
}

Status HbmTierConfig::validate() const {
  if (alignment == 0 || (alignment & (alignment - 1)) != 0) {
    return Status::InvalidArgument("hbm alignment must be a power of two");
  }
  if (capacity != 0 && capacity < alignment) {
    return Status::InvalidArgument("hbm capacity below one extent");
  }
  std::uint64_t pooled = 0;
  for (std::uint64_t p : pools) pooled += p / alignment * alignment;
  if (pooled > capacity / alignment * alignment) {
    return Status::InvalidArgument("the namespace pools' hbm (" + FormatBytes(pooled) +
                                   ") is more than the tier's " + FormatBytes(capacity));
  }
  return Status::Ok();
}

Result<std::unique_ptr<HbmTier>> HbmTier::Create(const HbmTierConfig& config,
                                                 std::unique_ptr<HbmBackend> backend) {
  TIERPOOL_RETURN_IF_ERROR(config.validate());
  if (!backend) return Status::InvalidArgument("hbm tier needs a backend");
  std::unique_ptr<HbmTier> tier(new HbmTier(std::move(backend)));
  std::uint64_t shared = config.capacity / config.alignment * config.alignment;
  for (std::size_t p = 0; p < config.pools.size(); ++p) {
    const std::uint64_t size = config.pools[p] / config.alignment * config.alignment;
    if (size == 0) continue;
    shared -= size;
    tier->backends_.push_back(tier->backends_.front()->Another());
    TIERPOOL_RETURN_IF_ERROR(tier->AddBackendRegion(
        *tier->backends_.back(), config.first_pool_arena_id + static_cast<std::uint32_t>(p), size,
        static_cast<std::uint32_t>(p + 1), config.alignment));
  }
  if (shared > 0) {
    TIERPOOL_RETURN_IF_ERROR(tier->AddBackendRegion(*tier->backends_.front(), config.arena_id,
                                                    shared, kSharedPool, config.alignment));
  }
  return tier;
}

Status HbmTier::AddBackendRegion(HbmBackend& backend, std::uint32_t arena_id, std::uint64_t size,
                                 std::uint32_t pool, std::uint64_t alignment) {
  TIERPOOL_RETURN_IF_ERROR(backend.Init(size));
  AddRegion(arena_id, backend.host_base(), size, backend.export_fd(), backend.export_read_only_fd(),
            -1, pool, alignment, {backend.device(), backend.ipc_handle()});
  region_backends_.emplace_back(arena_id, &backend);
  // Locked only if every region is.
  all_locked_ = all_locked_ && backend.pages_locked();
  set_pages_locked(all_locked_);
  return Status::Ok();
}

}  // namespace tierpool

namespace tierpool {

HbmBackend* HbmTier::BackendOf(std::uint32_t arena_id) const {
  for (const auto& [id, backend] : region_backends_) {
    if (id == arena_id) return backend;
  }
  return nullptr;
}

Status HbmTier::RegisterHostMemory(void* base, std::uint64_t size) {
  // Every region's backend shares its device's registrations; registering once is enough.
  return backends_.front()->RegisterHostMemory(base, size);
}

namespace {

Status Mismatch(const RecordInfo& info, const char* side) {
  return Status::DataLoss("bytes of object " + std::to_string(info.object_id) + " moving " + side +
                          " device memory do not match their checksum");
}

// A write's two halves, the copy and the checksum of its source, run side by side; the write
// ends when both have.
struct WriteJoin {
  std::atomic<int> left{2};
  Status copied;
  bool matched = false;
  IoCompletion done;
  RecordInfo info;
  void Finish() {
    if (left.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
    done(!copied.ok() ? copied : matched ? Status::Ok() : Mismatch(info, "into"));
  }
};

}  // namespace

HbmBackend* HbmTier::DeviceCopyOf(const Extent& e, std::uint64_t size, const IoCompletion& done) {
  if (Status s = CheckExtent(e); !s.ok()) {
    done(s);
    return nullptr;
  }
  HbmBackend* backend = BackendOf(e.arena_id);
  if (backend == nullptr) {
    done(Status::Internal("copy in an unknown hbm region"));
    return nullptr;
  }
  if (size == 0) {
    done(Status::Ok());
    return nullptr;
  }
  return backend;
}

void HbmTier::WriteImpl(const Extent& dst, const RecordInfo& info, const std::byte* src,
                        IoCompletion done) {
  if (!device_memory()) return ArenaTier::WriteImpl(dst, info, src, std::move(done));
  HbmBackend* backend = DeviceCopyOf(dst, info.size, done);
  if (backend == nullptr) return;
  // Checked on the device where the backend can (the bytes that landed); else the source is
  // checked while the copy engine reads it. Either way a mismatch fails the write and the store
  // frees the extent, so wrong bytes never become an hbm copy.
  if (backend->CopyInChecked(dst.offset, src, info.size, info.checksum, done)) return;
  auto join = std::make_shared<WriteJoin>();
  join->done = std::move(done);
  join->info = info;
  backend->CopyIn(dst.offset, src, info.size, [join](Status s) {
    join->copied = std::move(s);
    join->Finish();
  });
  backend->Post([join, src] {
    join->matched = Xxh3(src, join->info.size) == join->info.checksum;
    join->Finish();
  });
}

void HbmTier::ReadImpl(const Extent& src, const RecordInfo& info, std::byte* dst,
                       IoCompletion done) {
  if (!device_memory()) return ArenaTier::ReadImpl(src, info, dst, std::move(done));
  HbmBackend* backend = DeviceCopyOf(src, info.size, done);
  if (backend == nullptr) return;
  // Checked on the device beside the copy where the backend can; else once the bytes have landed
  // in host memory. Either way before anyone hears they arrived.
  if (backend->CopyOutChecked(src.offset, dst, info.size, info.checksum, done)) return;
  backend->CopyOut(
      src.offset, dst, info.size, [backend, info, dst, done = std::move(done)](Status s) mutable {
        if (!s.ok()) return done(std::move(s));
        backend->Post([info, dst, done = std::move(done)] {
          done(Xxh3(dst, info.size) == info.checksum ? Status::Ok() : Mismatch(info, "out of"));
        });
      });
}

}  // namespace tierpool
