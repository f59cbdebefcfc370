// Extent allocator over an address range [0, capacity): best fit, coalescing on free.
// It does no I/O and knows nothing of what the range is (memory arena, file), so it is shared by
// every tier and tested on its own. Not thread-safe: the owning tier serializes calls.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <utility>
#include <vector>

#include "common/status.h"

namespace tierpool {

struct ExtentAllocatorConfig {
  std::uint64_t capacity = 0;
  // Every extent starts on and is rounded up to this many bytes. Power of two.
  std::uint64_t alignment = 4096;
  Status validate() const;
};

struct ExtentAllocatorStats {
  std::uint64_t capacity = 0;
  std::uint64_t used_bytes = 0;  // allocated, including alignment padding
  std::uint64_t free_bytes = 0;
  std::uint64_t free_extents = 0;
  std::uint64_t largest_free_extent = 0;
  std::uint64_t allocations = 0;
  std::uint64_t frees = 0;
  std::uint64_t failed_allocations = 0;
  // 1 - largest_free / free: 0 when all free space is one extent, near 1 when it is shattered.
  double fragmentation() const {
    return free_bytes == 0
               ? 0.0
               : 1.0 - static_cast<double>(largest_free_extent) / static_cast<double>(free_bytes);
  }
};

struct AllocatedRange {
  std::uint64_t offset = 0;
  std::uint64_t length = 0;  // the rounded-up length actually held
};

class ExtentAllocator {
 public:
  explicit ExtentAllocator(ExtentAllocatorConfig config);

  // Returns nullopt when no free extent is large enough. size 0 allocates nothing and fails.
  std::optional<AllocatedRange> Allocate(std::uint64_t size);
  // The range [offset, offset + RoundUp(size)), which must lie in one free extent (nullopt
  // otherwise): how a caller that moved what stood there takes the window it opened.
  std::optional<AllocatedRange> AllocateAt(std::uint64_t offset, std::uint64_t size);
  // As Allocate (best fit), with no byte in [avoid_offset, avoid_offset + avoid_length).
  std::optional<AllocatedRange> AllocateAvoiding(std::uint64_t size, std::uint64_t avoid_offset,
                                                 std::uint64_t avoid_length);
  // The free extents in address order.
  std::vector<AllocatedRange> FreeRanges() const;
  // Returns a range from Allocate. Freeing a range that is not allocated is a bug; it is detected
  // (overlap with free space) and reported as an error instead of corrupting the free lists.
  Status Free(AllocatedRange range);

  std::uint64_t RoundUp(std::uint64_t size) const;
  const ExtentAllocatorStats& stats() const { return stats_; }

 private:
  void InsertFree(std::uint64_t offset, std::uint64_t length);
  // The stats of `need` bytes taken from the free lists.
  void CountTaken(std::uint64_t need);
  void EraseFree(std::map<std::uint64_t, std::uint64_t>::iterator it);
  // The free extent at `it` becomes [offset, offset + length), its nodes reused.
  void MoveFree(std::map<std::uint64_t, std::uint64_t>::iterator it, std::uint64_t offset,
                std::uint64_t length);

  ExtentAllocatorConfig config_;
  std::map<std::uint64_t, std::uint64_t> free_by_offset_;           // offset -> length
  std::set<std::pair<std::uint64_t, std::uint64_t>> free_by_size_;  // (length, offset)
  ExtentAllocatorStats stats_;
};

}  // namespace tierpool
