#include "tiers/hbm_tier.h"

#include "common/units.h"

namespace tierpool {

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
            -1, pool, alignment);
  // Locked only if every region is.
  all_locked_ = all_locked_ && backend.pages_locked();
  set_pages_locked(all_locked_);
  return Status::Ok();
}

}  // namespace tierpool
