#include "common/byte_rate_limiter.h"

#include <gtest/gtest.h>

namespace tierpool {
namespace {

TEST(ByteRateLimiter, StartsNoMoreThanTheRatePlusOneBurst) {
  ManualClock clock;
  ByteRateLimiter limit(1000, 500, &clock);  // 1000 bytes a second, 500 at once
  EXPECT_TRUE(limit.TryTake(300));
  EXPECT_TRUE(limit.TryTake(200));
  EXPECT_FALSE(limit.TryTake(1));  // the burst is spent
  clock.Advance(100'000);          // 0.1 s: 100 bytes back
  EXPECT_TRUE(limit.TryTake(100));
  EXPECT_FALSE(limit.TryTake(1));
  // Over 10 s of asking every 10 ms, what starts stays within 10 s at the rate plus the burst.
  std::uint64_t started = 0;
  for (int i = 0; i < 1000; ++i) {
    clock.Advance(10'000);
    while (limit.TryTake(64)) started += 64;
  }
  EXPECT_LE(started, 10'000u + 500u);
  EXPECT_GE(started, 10'000u - 64u);
}

TEST(ByteRateLimiter, WorkLargerThanTheBurstStartsWhenFullAndIsPaidBack) {
  ManualClock clock;
  ByteRateLimiter limit(1000, 500, &clock);
  EXPECT_TRUE(limit.TryTake(2000));  // full budget: it starts, 1500 owed
  clock.Advance(1'000'000);
  EXPECT_FALSE(limit.TryTake(1));  // still 500 owed
  clock.Advance(500'000);
  EXPECT_FALSE(limit.TryTake(1));  // back to zero only
  clock.Advance(500'000);
  EXPECT_TRUE(limit.TryTake(2000));  // full again
}

TEST(ByteRateLimiter, ZeroMeansNoBound) {
  ManualClock clock;
  ByteRateLimiter limit(0, 1, &clock);
  for (int i = 0; i < 100; ++i) EXPECT_TRUE(limit.TryTake(1ull << 30));
}

}  // namespace
}  // namespace tierpool
