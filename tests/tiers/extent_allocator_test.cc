#include "tiers/extent_allocator.h"

#include <gtest/gtest.h>

#include <map>
#include <random>

namespace tierpool {
namespace {

TEST(ExtentAllocator, ValidatesConfig) {
  EXPECT_FALSE((ExtentAllocatorConfig{.capacity = 4096, .alignment = 3}).validate().ok());
  EXPECT_FALSE((ExtentAllocatorConfig{.capacity = 5000, .alignment = 4096}).validate().ok());
  EXPECT_TRUE((ExtentAllocatorConfig{.capacity = 8192, .alignment = 4096}).validate().ok());
}

TEST(ExtentAllocator, AllocatesAlignedAndCoalesces) {
  ExtentAllocator a({.capacity = 16 * 4096, .alignment = 4096});
  EXPECT_EQ(a.stats().largest_free_extent, 16u * 4096);
  EXPECT_EQ(a.stats().fragmentation(), 0.0);
  auto x = a.Allocate(1);
  auto y = a.Allocate(4097);
  auto z = a.Allocate(4096);
  ASSERT_TRUE(x && y && z);
  EXPECT_EQ(x->length, 4096u);
  EXPECT_EQ(y->length, 8192u);
  EXPECT_EQ(x->offset % 4096, 0u);
  EXPECT_EQ(a.stats().used_bytes, 4u * 4096);
  ASSERT_TRUE(a.Free(*y).ok());
  EXPECT_EQ(a.stats().free_extents, 2u);  // the hole, and the tail
  EXPECT_GT(a.stats().fragmentation(), 0.0);
  ASSERT_TRUE(a.Free(*x).ok());
  ASSERT_TRUE(a.Free(*z).ok());
  EXPECT_EQ(a.stats().free_extents, 1u);
  EXPECT_EQ(a.stats().largest_free_extent, 16u * 4096);
  EXPECT_EQ(a.stats().fragmentation(), 0.0);
}

TEST(ExtentAllocator, FailsWhenFullAndCountsIt) {
  ExtentAllocator a({.capacity = 2 * 4096, .alignment = 4096});
  EXPECT_FALSE(a.Allocate(0));
  EXPECT_FALSE(a.Allocate(3 * 4096));
  EXPECT_TRUE(a.Allocate(2 * 4096));
  EXPECT_FALSE(a.Allocate(1));
  EXPECT_EQ(a.stats().failed_allocations, 3u);
  EXPECT_FALSE(a.Allocate(~0ull));  // rounding up must not wrap around
}

TEST(ExtentAllocator, DetectsDoubleAndBogusFrees) {
  ExtentAllocator a({.capacity = 8 * 4096, .alignment = 4096});
  auto x = a.Allocate(4096);
  ASSERT_TRUE(x);
  ASSERT_TRUE(a.Free(*x).ok());
  EXPECT_FALSE(a.Free(*x).ok());
  EXPECT_FALSE(a.Free({4096 * 100, 4096}).ok());
  EXPECT_FALSE(a.Free({1, 4096}).ok());
  EXPECT_EQ(a.stats().used_bytes, 0u);
}

TEST(ExtentAllocator, AllocatesAtAChosenPlaceInsideOneFreeExtent) {
  ExtentAllocator a({.capacity = 16 * 4096, .alignment = 4096});
  auto x = a.Allocate(4 * 4096);  // [0, 4)
  ASSERT_TRUE(x);
  // Inside the free tail, leaving free space on both sides.
  auto mid = a.AllocateAt(8 * 4096, 4096 + 1);
  ASSERT_TRUE(mid);
  EXPECT_EQ(mid->offset, 8u * 4096);
  EXPECT_EQ(mid->length, 2u * 4096);
  const std::vector<AllocatedRange> free = a.FreeRanges();
  ASSERT_EQ(free.size(), 2u);
  EXPECT_EQ(free[0].offset, 4u * 4096);
  EXPECT_EQ(free[0].length, 4u * 4096);
  EXPECT_EQ(free[1].offset, 10u * 4096);
  EXPECT_EQ(free[1].length, 6u * 4096);
  EXPECT_EQ(a.stats().used_bytes, 6u * 4096);
  EXPECT_EQ(a.stats().largest_free_extent, 6u * 4096);
  // Not over allocated bytes, not across two free extents, not unaligned, not past the end.
  EXPECT_FALSE(a.AllocateAt(2 * 4096, 4096));
  EXPECT_FALSE(a.AllocateAt(6 * 4096, 4 * 4096));
  EXPECT_FALSE(a.AllocateAt(4 * 4096 + 1, 4096));
  EXPECT_FALSE(a.AllocateAt(15 * 4096, 2 * 4096));
  EXPECT_FALSE(a.AllocateAt(~0ull - 4095, 4096 * 2));
  // The whole of a free extent, then everything back as one extent.
  auto hole = a.AllocateAt(4 * 4096, 4 * 4096);
  ASSERT_TRUE(hole);
  EXPECT_EQ(a.FreeRanges().size(), 1u);
  ASSERT_TRUE(a.Free(*x).ok());
  ASSERT_TRUE(a.Free(*hole).ok());
  ASSERT_TRUE(a.Free(*mid).ok());
  EXPECT_EQ(a.FreeRanges().size(), 1u);
  EXPECT_EQ(a.stats().free_bytes, 16u * 4096);
}

TEST(ExtentAllocator, AllocatesAvoidingAWindow) {
  ExtentAllocator a({.capacity = 16 * 4096, .alignment = 4096});
  auto x = a.AllocateAt(4 * 4096, 4096);  // free: [0, 4) and [5, 16)
  ASSERT_TRUE(x);
  // Best fit would take [0, 2); the window [0, 3) leaves [3, 4), too short, so [5, 7) it is.
  auto y = a.AllocateAvoiding(2 * 4096, 0, 3 * 4096);
  ASSERT_TRUE(y);
  EXPECT_EQ(y->offset, 5u * 4096);
  // Free: [0, 4), [7, 16). A window over [0, 13): the part of the tail after it.
  auto z = a.AllocateAvoiding(3 * 4096, 0, 13 * 4096);
  ASSERT_TRUE(z);
  EXPECT_EQ(z->offset, 13u * 4096);
  // Free: [0, 4), [7, 13). A window over [1, 16): the part of [0, 4) before it.
  auto w = a.AllocateAvoiding(4096, 1 * 4096, 15 * 4096);
  ASSERT_TRUE(w);
  EXPECT_EQ(w->offset, 0u);
  EXPECT_FALSE(a.AllocateAvoiding(8 * 4096, 0, 4096));  // larger than any extent
  EXPECT_EQ(a.stats().used_bytes, 7u * 4096);
}

// Random allocate/free against a model: no two live extents overlap, accounting adds up, and
// freeing everything leaves one extent.
TEST(ExtentAllocator, RandomizedAgainstModel) {
  const std::uint64_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  ExtentAllocator a({.capacity = 1024 * 4096, .alignment = 4096});
  std::map<std::uint64_t, std::uint64_t> live;  // offset -> length
  std::uint64_t used = 0;
  for (int i = 0; i < 20000; ++i) {
    if (live.empty() || rng() % 3 != 0) {
      auto r = a.Allocate(1 + rng() % (40 * 4096));
      if (!r) continue;
      auto next = live.lower_bound(r->offset);
      if (next != live.end()) {
        ASSERT_LE(r->offset + r->length, next->first);
      }
      if (next != live.begin()) {
        auto prev = std::prev(next);
        ASSERT_LE(prev->first + prev->second, r->offset);
      }
      live[r->offset] = r->length;
      used += r->length;
    } else {
      auto it = live.begin();
      std::advance(it, static_cast<long>(rng() % live.size()));
      ASSERT_TRUE(a.Free({it->first, it->second}).ok());
      used -= it->second;
      live.erase(it);
    }
    ASSERT_EQ(a.stats().used_bytes, used);
    ASSERT_EQ(a.stats().used_bytes + a.stats().free_bytes, a.stats().capacity);
  }
  for (auto [off, len] : live) ASSERT_TRUE(a.Free({off, len}).ok());
  EXPECT_EQ(a.stats().free_extents, 1u);
}

}  // namespace
}  // namespace tierpool
