// Shared accounting for tiers made of host-addressable regions (dram arenas, the hbm stand-in):
// one extent allocator per region, a mutex around them, and the Tier methods on top.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "tiers/extent_allocator.h"
#include "tiers/tier.h"

namespace tierpool {

class ArenaTier : public Tier {
 public:
  TierKind kind() const override { return kind_; }
  Result<Extent> Allocate(std::uint64_t size, int numa_hint) override;
  Status Free(const Extent& extent) override;
  std::byte* HostAddress(const Extent& extent) override;
  std::vector<ArenaInfo> Arenas() const override;
  TierStats Stats() const override;
  std::uint64_t capacity() const override { return capacity_; }
  std::uint64_t used_bytes() const override;

 protected:
  ArenaTier(TierKind kind, std::string backend) : kind_(kind), backend_(std::move(backend)) {}
  void AddRegion(std::uint32_t arena_id, std::byte* base, std::uint64_t size, int fd, int numa_node,
                 std::uint64_t alignment);
  void set_pages_locked(bool locked) { pages_locked_ = locked; }

 private:
  struct Region {
    std::uint32_t arena_id;
    std::byte* base;
    std::uint64_t size;
    int fd;
    int numa_node;
    ExtentAllocator allocator;
  };
  Region* FindRegion(std::uint32_t arena_id);

  TierKind kind_;
  std::string backend_;
  bool pages_locked_ = false;
  std::uint64_t capacity_ = 0;
  mutable std::mutex mu_;
  std::vector<Region> regions_;
};

}  // namespace tierpool
