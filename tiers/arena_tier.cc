#include "tiers/arena_tier.h"

#include <algorithm>

#include <spdlog/spdlog.h>
#include <boost/container/small_vector.hpp>

#include "common/checksum.h"
#include "common/thread_slot.h"
#include "common/units.h"

namespace tierpool {

void ArenaTier::AddRegion(std::uint32_t arena_id, std::byte* base, std::uint64_t size, int fd,
                          int read_only_fd, int numa_node, std::uint32_t pool,
                          std::uint64_t alignment, RegionDevice device) {
  SpinLock lock(mu_);
  regions_.push_back(Region{arena_id, base, size, fd, read_only_fd, numa_node, pool,
                            ExtentAllocator({.capacity = size, .alignment = alignment}),
                            std::move(device)});
  capacity_ += size;
}

ArenaTier::Region* ArenaTier::FindRegion(std::uint32_t arena_id) {
  for (auto& r : regions_) {
    if (r.arena_id == arena_id) return &r;
  }
  return nullptr;
}

const ArenaTier::Region* ArenaTier::FindRegion(std::uint32_t arena_id) const {
  return const_cast<ArenaTier*>(this)->FindRegion(arena_id);
}

Status ArenaTier::CheckExtent(const Extent& extent) const {
  SpinLock lock(mu_);
  const Region* r = FindRegion(extent.arena_id);
  if (r == nullptr || extent.offset > r->size || extent.length > r->size - extent.offset) {
    return Status::Internal("extent outside every " + std::string(TierName(kind_)) + " region");
  }
  return Status::Ok();
}

Extent ArenaTier::TakenLocked(const Region& r, const AllocatedRange& range) {
  used_ += range.length;
  peak_ = std::max(peak_, used_);
  return Extent{r.arena_id, range.offset, range.length};
}

std::optional<Extent> ArenaTier::TakeCached(std::uint64_t size, const AllocationHint& hint) {
  CacheSlot& slot = caches_[ThreadSlot() % kCacheSlots];
  SpinLock lock(slot.mu);
  for (auto it = slot.extents.end(); it != slot.extents.begin();) {  // the newest first
    --it;
    if (it->pool != hint.pool || (hint.numa_node >= 0 && it->numa_node != hint.numa_node)) {
      continue;
    }
    if (it->extent.length != FindRegion(it->extent.arena_id)->allocator.RoundUp(size)) continue;
    const Extent e = it->extent;
    slot.extents.erase(it);
    FindRegion(e.arena_id)->cached.bytes.fetch_sub(e.length, std::memory_order_relaxed);
    return e;
  }
  return std::nullopt;
}

Result<bool> ArenaTier::CacheFreed(const Extent& extent) {
  if (extent.length > kMaxCachedExtent) return false;
  const Region* r = FindRegion(extent.arena_id);
  // Only what the allocator could have handed out: checked here, since the allocator that
  // would have caught a bad free sees this one only when the cache is drained.
  if (r == nullptr || extent.length == 0 || extent.offset > r->size ||
      extent.length > r->size - extent.offset ||
      r->allocator.RoundUp(extent.length) != extent.length ||
      r->allocator.RoundUp(extent.offset) != extent.offset) {
    return Status::Internal("free of an extent no " + std::string(TierName(kind_)) +
                            " allocation could have made");
  }
  CacheSlot& slot = caches_[ThreadSlot() % kCacheSlots];
  SpinLock lock(slot.mu);
  for (const CachedExtent& c : slot.extents) {
    if (c.extent.arena_id == extent.arena_id && c.extent.offset == extent.offset) {
      return Status::Internal("free of an extent that is already free");
    }
  }
  if (slot.extents.size() == slot.extents.capacity()) return false;
  slot.extents.push_back({extent, r->pool, r->numa_node});
  r->cached.bytes.fetch_add(extent.length, std::memory_order_relaxed);
  return true;
}

std::uint64_t ArenaTier::DrainCachesLocked() const {
  // Logically const: what the tier says of its space and use is the same after as before (a
  // cached extent counts as free everywhere already); only where the free space waits changes.
  auto* self = const_cast<ArenaTier*>(this);
  std::uint64_t drained = 0;
  for (CacheSlot& slot : caches_) {
    SpinLock lock(slot.mu);
    for (const CachedExtent& c : slot.extents) {
      Region* r = self->FindRegion(c.extent.arena_id);
      // Checked as it was cached; a failure here is an extent freed twice, from two threads.
      if (Status s = r->allocator.Free({c.extent.offset, c.extent.length}); !s.ok()) {
        spdlog::error("{} cache of freed extents: {}", TierName(kind_), s.ToString());
        continue;
      }
      r->cached.bytes.fetch_sub(c.extent.length, std::memory_order_relaxed);
      used_ -= c.extent.length;
      drained += c.extent.length;
    }
    slot.extents.clear();
  }
  return drained;
}

std::uint64_t ArenaTier::UsedLocked(std::optional<std::uint32_t> pool) const {
  // Each region's cached count is below its allocator's used bytes whenever it is read: an
  // extent enters a cache while allocated and leaves it before the allocator frees it (mu_,
  // held here).
  std::uint64_t used = 0;
  for (const auto& r : regions_) {
    if (pool && r.pool != *pool) continue;
    used += r.allocator.stats().used_bytes - r.cached.bytes.load(std::memory_order_relaxed);
  }
  return used;
}

Result<Extent> ArenaTier::Allocate(std::uint64_t size, const AllocationHint& hint) {
  if (thread_caches_ && size > 0 && size <= kMaxCachedExtent) {
    if (auto e = TakeCached(size, hint)) return *e;
  }
  SpinLock lock(mu_);
  auto found = AllocateLocked(size, hint);
  // Room may be waiting in the caches: all of it goes back before the tier says it has none.
  if (!found.ok() && thread_caches_ && DrainCachesLocked() > 0) found = AllocateLocked(size, hint);
  return found;
}

Result<Extent> ArenaTier::AllocateLocked(std::uint64_t size, const AllocationHint& hint) {
  // Only the pool's regions; the hinted node first, then the others with the most free space
  // (ties in the order they were added). A tier has a region per NUMA node and pool: few, so
  // they are ordered on the stack, not in an allocated vector (this runs for every put).
  boost::container::small_vector<Region*, 8> order;
  for (auto& r : regions_) {
    if (r.pool == hint.pool) order.push_back(&r);
  }
  if (order.size() > 1) {
    std::sort(order.begin(), order.end(), [&](Region* a, Region* b) {
      bool ha = a->numa_node == hint.numa_node, hb = b->numa_node == hint.numa_node;
      if (ha != hb) return ha;
      const std::uint64_t fa = a->allocator.stats().free_bytes;
      const std::uint64_t fb = b->allocator.stats().free_bytes;
      return fa != fb ? fa > fb : a < b;  // regions_ is a vector: address order is added order
    });
  }
  for (Region* r : order) {
    if (auto range = r->allocator.Allocate(size)) return TakenLocked(*r, *range);
  }
  return Status::ResourceExhausted(std::string(TierName(kind_)) + " has no free extent of " +
                                   FormatBytes(size));
}

std::vector<Extent> ArenaTier::FreeExtents(std::uint32_t pool) const {
  SpinLock lock(mu_);
  DrainCachesLocked();  // the free space there is, all of it
  std::vector<Extent> out;
  for (const auto& r : regions_) {
    if (r.pool != pool) continue;
    for (const auto& f : r.allocator.FreeRanges()) out.push_back({r.arena_id, f.offset, f.length});
  }
  return out;
}

Result<Extent> ArenaTier::AllocateAt(const Extent& want) {
  SpinLock lock(mu_);
  DrainCachesLocked();  // a cached extent in the window would hold it
  Region* r = FindRegion(want.arena_id);
  auto range = r == nullptr ? std::nullopt : r->allocator.AllocateAt(want.offset, want.length);
  if (!range) {
    return Status::ResourceExhausted(std::string(TierName(kind_)) + ": no free extent at " +
                                     std::to_string(want.offset) + " of arena " +
                                     std::to_string(want.arena_id));
  }
  return TakenLocked(*r, *range);
}

Result<Extent> ArenaTier::AllocateOutside(std::uint64_t size, std::uint32_t pool,
                                          const Extent& avoid) {
  SpinLock lock(mu_);
  DrainCachesLocked();
  for (auto& r : regions_) {
    if (r.pool != pool) continue;
    auto range = r.arena_id == avoid.arena_id
                     ? r.allocator.AllocateAvoiding(size, avoid.offset, avoid.length)
                     : r.allocator.Allocate(size);
    if (range) return TakenLocked(r, *range);
  }
  return Status::ResourceExhausted(std::string(TierName(kind_)) + " has no free extent of " +
                                   FormatBytes(size) + " outside the window being opened");
}

Status ArenaTier::Free(const Extent& extent) {
  if (thread_caches_) {
    auto cached = CacheFreed(extent);
    if (!cached.ok()) return cached.status();
    if (*cached) return Status::Ok();
  }
  SpinLock lock(mu_);
  Region* r = FindRegion(extent.arena_id);
  if (r == nullptr) return Status::Internal("free of an extent in unknown arena");
  Status s = r->allocator.Free({extent.offset, extent.length});
  if (s.ok()) used_ -= extent.length;
  return s;
}

Result<Extent> ArenaTier::Trim(const Extent& extent, std::uint64_t keep) {
  SpinLock lock(mu_);
  Region* r = FindRegion(extent.arena_id);
  if (r == nullptr) return Status::Internal("trim of an extent in unknown arena");
  if (keep == 0) return Status::InvalidArgument("a trimmed extent keeps at least one byte");
  const std::uint64_t kept = r->allocator.RoundUp(keep);
  if (kept >= extent.length) return extent;
  const std::uint64_t tail = extent.length - kept;
  TIERPOOL_RETURN_IF_ERROR(r->allocator.Free({extent.offset + kept, tail}));
  used_ -= tail;
  return Extent{extent.arena_id, extent.offset, kept};
}

std::byte* ArenaTier::HostAddress(const Extent& extent) {
  // No lock: a region's place and size never change once the tier is shared (every put and get
  // asks this, from any thread).
  const Region* r = FindRegion(extent.arena_id);
  if (r == nullptr || r->base == nullptr || extent.offset + extent.length > r->size) return nullptr;
  return r->base + extent.offset;
}

std::vector<ArenaInfo> ArenaTier::Arenas() const {
  SpinLock lock(mu_);
  std::vector<ArenaInfo> out;
  for (const auto& r : regions_) {
    out.push_back({r.arena_id, kind_, r.fd, r.size, r.numa_node, r.pool, r.read_only_fd,
                   r.device.device, r.device.ipc_handle});
  }
  return out;
}

PoolSpace ArenaTier::SpaceOf(std::uint32_t pool) const {
  SpinLock lock(mu_);
  PoolSpace s;
  for (const auto& r : regions_) {
    if (r.pool == pool) s.capacity += r.size;
  }
  s.used = UsedLocked(pool);
  return s;
}

std::uint64_t ArenaTier::used_bytes() const {
  SpinLock lock(mu_);
  return UsedLocked(std::nullopt);
}

namespace {
Status Mismatch(TierKind kind, const RecordInfo& info) {
  return Status::DataLoss("bytes of object " + std::to_string(info.object_id) + " moving through " +
                          std::string(TierName(kind)) + " do not match their checksum");
}
}  // namespace

void ArenaTier::ReadImpl(const Extent& src, const RecordInfo& info, std::byte* dst,
                         IoCompletion done) {
  const std::byte* from = HostAddress(src);
  if (from == nullptr) return done(Status::Internal("read of an extent outside every arena"));
  if (info.size == 0) return done(Status::Ok());
  done(CopyAndChecksum(dst, from, info.size) == info.checksum ? Status::Ok()
                                                              : Mismatch(kind_, info));
}

void ArenaTier::WriteImpl(const Extent& dst, const RecordInfo& info, const std::byte* src,
                          IoCompletion done) {
  std::byte* to = HostAddress(dst);
  if (to == nullptr) return done(Status::Internal("write to an extent outside every arena"));
  if (info.size == 0) return done(Status::Ok());
  done(CopyAndChecksum(to, src, info.size, CopyTarget::kFresh) == info.checksum
           ? Status::Ok()
           : Mismatch(kind_, info));
}

void ArenaTier::ResetPeak() {
  SpinLock lock(mu_);
  DrainCachesLocked();
  peak_ = used_;
}

TierStats ArenaTier::Stats() const {
  SpinLock lock(mu_);
  // Exact figures (free extents, fragmentation) need the cached extents back in the allocators.
  DrainCachesLocked();
  TierStats s;
  s.kind = kind_;
  s.backend = backend_;
  s.pages_locked = pages_locked_;
  s.peak_used_bytes = peak_;
  std::uint64_t free_bytes = 0;
  for (const auto& r : regions_) AddAllocatorStats(r.allocator.stats(), &s, &free_bytes);
  FinishFragmentation(&s, free_bytes);
  return s;
}

}  // namespace tierpool
