// The Tier interface: one class per tier (hbm, dram; remote and nvme later) behind it.
// A tier hands out extents and accounts for them; the store decides what lives where.
#pragma once

#include <cstddef>
#include <cstdint>
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

// A region clients map: the server passes fd to local clients over the Unix socket.
struct ArenaInfo {
  std::uint32_t id = 0;
  TierKind tier = TierKind::kDram;
  int fd = -1;
  std::uint64_t size = 0;
  int numa_node = -1;
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
  std::uint64_t free_extents = 0;
  std::uint64_t largest_free_extent = 0;
  double fragmentation = 0;
  std::uint64_t allocations = 0;
  std::uint64_t frees = 0;
  std::uint64_t failed_allocations = 0;
  bool pages_locked = false;
  std::string backend;       // e.g. "memfd/numa", "host-pinned"
  std::string state = "ok";  // ok, degraded (repeated I/O errors), full (ENOSPC)
  std::uint64_t read_errors = 0;
  std::uint64_t write_errors = 0;
  std::uint64_t checksum_failures = 0;
};

// Adds one allocator's figures to a tier's; FinishFragmentation once all are in.
struct ExtentAllocatorStats;
void AddAllocatorStats(const ExtentAllocatorStats& a, TierStats* s, std::uint64_t* free_bytes);
void FinishFragmentation(TierStats* s, std::uint64_t free_bytes);

class Tier {
 public:
  virtual ~Tier() = default;
  virtual TierKind kind() const = 0;
  // numa_hint < 0: any node.
  virtual Result<Extent> Allocate(std::uint64_t size, int numa_hint) = 0;
  virtual Status Free(const Extent& extent) = 0;
  // Host address of the extent's first byte; nullptr when the tier is not host-mapped.
  virtual std::byte* HostAddress(const Extent& extent) = 0;
  virtual std::vector<ArenaInfo> Arenas() const = 0;
  virtual TierStats Stats() const = 0;
  virtual std::uint64_t capacity() const = 0;
  virtual std::uint64_t used_bytes() const = 0;
  const Watermarks& watermarks() const { return watermarks_; }
  void set_watermarks(Watermarks w) { watermarks_ = w; }

 private:
  Watermarks watermarks_;
};

inline Status Watermarks::validate(std::string_view tier) const {
  if (!(low >= 0 && low <= high && high <= 1.0)) {
    return Status::InvalidArgument(std::string(tier) +
                                   " watermarks must satisfy 0 <= low <= high <= 1");
  }
  return Status::Ok();
}

}  // namespace tierpool
