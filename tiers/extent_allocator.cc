#include "tiers/extent_allocator.h"

#include <algorithm>
#include <string>

#include "tiers/tier.h"

namespace tierpool {

Status ExtentAllocatorConfig::validate() const {
  if (alignment == 0 || (alignment & (alignment - 1)) != 0) {
    return Status::InvalidArgument("extent alignment must be a power of two, got " +
                                   std::to_string(alignment));
  }
  if (capacity % alignment != 0) {
    return Status::InvalidArgument("capacity " + std::to_string(capacity) +
                                   " is not a multiple of the alignment " +
                                   std::to_string(alignment));
  }
  return Status::Ok();
}

ExtentAllocator::ExtentAllocator(ExtentAllocatorConfig config) : config_(config) {
  stats_.capacity = config_.capacity;
  stats_.free_bytes = config_.capacity;
  if (config_.capacity > 0) InsertFree(0, config_.capacity);
  stats_.free_extents = free_by_offset_.size();
  stats_.largest_free_extent = config_.capacity;
}

std::uint64_t ExtentAllocator::RoundUp(std::uint64_t size) const {
  return (size + config_.alignment - 1) & ~(config_.alignment - 1);
}

void ExtentAllocator::InsertFree(std::uint64_t offset, std::uint64_t length) {
  free_by_offset_.emplace(offset, length);
  free_by_size_.emplace(length, offset);
}

void ExtentAllocator::MoveFree(std::map<std::uint64_t, std::uint64_t>::iterator it,
                               std::uint64_t offset, std::uint64_t length) {
  auto by_size = free_by_size_.extract({it->second, it->first});
  auto by_offset = free_by_offset_.extract(it);
  by_size.value() = {length, offset};
  by_offset.key() = offset;
  by_offset.mapped() = length;
  free_by_size_.insert(std::move(by_size));
  free_by_offset_.insert(std::move(by_offset));
}

void ExtentAllocator::EraseFree(std::map<std::uint64_t, std::uint64_t>::iterator it) {
  free_by_size_.erase({it->second, it->first});
  free_by_offset_.erase(it);
}

void ExtentAllocator::CountTaken(std::uint64_t need) {
  stats_.used_bytes += need;
  stats_.free_bytes -= need;
  ++stats_.allocations;
  stats_.free_extents = free_by_offset_.size();
  stats_.largest_free_extent = free_by_size_.empty() ? 0 : free_by_size_.rbegin()->first;
}

std::optional<AllocatedRange> ExtentAllocator::Allocate(std::uint64_t size) {
  std::uint64_t need = RoundUp(size);
  if (size == 0 || need < size) {
    ++stats_.failed_allocations;
    return std::nullopt;
  }
  auto best = free_by_size_.lower_bound({need, 0});
  if (best == free_by_size_.end()) {
    ++stats_.failed_allocations;
    return std::nullopt;
  }
  auto [length, offset] = *best;
  if (length > need) {
    // The rest stays free: its two nodes are re-keyed in place, nothing is allocated.
    MoveFree(free_by_offset_.find(offset), offset + need, length - need);
  } else {
    EraseFree(free_by_offset_.find(offset));
  }
  CountTaken(need);
  return AllocatedRange{offset, need};
}

std::optional<AllocatedRange> ExtentAllocator::AllocateAt(std::uint64_t offset,
                                                          std::uint64_t size) {
  const std::uint64_t need = RoundUp(size);
  if (size == 0 || need < size || offset % config_.alignment != 0) return std::nullopt;
  auto it = free_by_offset_.upper_bound(offset);
  if (it == free_by_offset_.begin()) return std::nullopt;
  --it;  // the free extent starting at or before offset
  const std::uint64_t start = it->first, length = it->second;
  if (offset + need < offset || offset + need > start + length) return std::nullopt;
  // What is left on either side stays free.
  const std::uint64_t before = offset - start, after = start + length - (offset + need);
  if (before > 0) {
    MoveFree(it, start, before);
  } else {
    EraseFree(it);
  }
  if (after > 0) InsertFree(offset + need, after);
  CountTaken(need);
  return AllocatedRange{offset, need};
}

std::optional<AllocatedRange> ExtentAllocator::AllocateAvoiding(std::uint64_t size,
                                                                std::uint64_t avoid_offset,
                                                                std::uint64_t avoid_length) {
  const std::uint64_t need = RoundUp(size);
  if (size == 0 || need < size) return std::nullopt;
  const std::uint64_t lo = avoid_offset, hi = avoid_offset + avoid_length;
  // Smallest first, as Allocate; an extent the window cuts offers its part before or after it.
  for (auto it = free_by_size_.lower_bound({need, 0}); it != free_by_size_.end(); ++it) {
    const auto [length, offset] = *it;
    const std::uint64_t end = offset + length;
    std::optional<std::uint64_t> at;
    if (end <= lo || offset >= hi || (lo >= offset && lo - offset >= need)) {
      at = offset;
    } else if (end > hi && end - std::max(hi, offset) >= need) {
      at = RoundUp(std::max(hi, offset));
      if (*at + need > end) at.reset();
    }
    if (at) return AllocateAt(*at, size);
  }
  return std::nullopt;
}

std::vector<AllocatedRange> ExtentAllocator::FreeRanges() const {
  std::vector<AllocatedRange> out;
  out.reserve(free_by_offset_.size());
  for (const auto& [offset, length] : free_by_offset_) out.push_back({offset, length});
  return out;
}

Status ExtentAllocator::Free(AllocatedRange range) {
  if (range.length == 0 || range.offset % config_.alignment != 0 ||
      range.length % config_.alignment != 0 || range.offset + range.length > config_.capacity ||
      range.offset + range.length < range.offset) {
    return Status::Internal("free of an extent the allocator never handed out: offset " +
                            std::to_string(range.offset) + " length " +
                            std::to_string(range.length));
  }
  auto next = free_by_offset_.lower_bound(range.offset);
  if (next != free_by_offset_.end() && next->first < range.offset + range.length) {
    return Status::Internal("double free: extent at " + std::to_string(range.offset) +
                            " overlaps free space");
  }
  // Coalescing re-keys a neighbour's nodes rather than erasing and inserting them.
  auto prev = free_by_offset_.end();  // the free extent just before, when they touch
  if (next != free_by_offset_.begin()) {
    auto before = std::prev(next);
    if (before->first + before->second > range.offset) {
      return Status::Internal("double free: extent at " + std::to_string(range.offset) +
                              " overlaps free space");
    }
    if (before->first + before->second == range.offset) prev = before;
  }
  const bool join_next =
      next != free_by_offset_.end() && next->first == range.offset + range.length;
  if (prev != free_by_offset_.end()) {
    std::uint64_t length = prev->second + range.length;
    if (join_next) {
      length += next->second;
      EraseFree(next);
    }
    MoveFree(prev, prev->first, length);
  } else if (join_next) {
    MoveFree(next, range.offset, range.length + next->second);
  } else {
    InsertFree(range.offset, range.length);
  }
  stats_.used_bytes -= range.length;
  stats_.free_bytes += range.length;
  ++stats_.frees;
  stats_.free_extents = free_by_offset_.size();
  stats_.largest_free_extent = free_by_size_.rbegin()->first;
  return Status::Ok();
}

void AddAllocatorStats(const ExtentAllocatorStats& a, TierStats* s, std::uint64_t* free_bytes) {
  s->capacity += a.capacity;
  s->used_bytes += a.used_bytes;
  s->free_extents += a.free_extents;
  s->largest_free_extent = std::max(s->largest_free_extent, a.largest_free_extent);
  s->allocations += a.allocations;
  s->frees += a.frees;
  s->failed_allocations += a.failed_allocations;
  *free_bytes += a.free_bytes;
}

void FinishFragmentation(TierStats* s, std::uint64_t free_bytes) {
  s->fragmentation = free_bytes == 0 ? 0.0
                                     : 1.0 - static_cast<double>(s->largest_free_extent) /
                                                 static_cast<double>(free_bytes);
}

}  // namespace tierpool
