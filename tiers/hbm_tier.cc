#include "tiers/hbm_tier.h"

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
  return Status::Ok();
}

Result<std::unique_ptr<HbmTier>> HbmTier::Create(const HbmTierConfig& config,
                                                 std::unique_ptr<HbmBackend> backend) {
  TIERPOOL_RETURN_IF_ERROR(config.validate());
  if (!backend) return Status::InvalidArgument("hbm tier needs a backend");
  std::unique_ptr<HbmTier> tier(new HbmTier(std::move(backend)));
  std::uint64_t size = config.capacity / config.alignment * config.alignment;
  if (size > 0) {
    TIERPOOL_RETURN_IF_ERROR(tier->backend_->Init(size));
    tier->AddRegion(config.arena_id, tier->backend_->host_base(), size, tier->backend_->export_fd(),
                    -1, config.alignment);
    tier->set_pages_locked(tier->backend_->pages_locked());
  }
  return tier;
}

}  // namespace tierpool
