#include "transport/poll_window.h"

#include <gtest/gtest.h>

namespace tierpool::transport {
namespace {

using std::chrono::microseconds;

TEST(PollWindow, StartsAtTheBase) {
  PollWindow w(microseconds(50), microseconds(500));
  EXPECT_EQ(w.window(), microseconds(50));
}

TEST(PollWindow, GapsWithinABurstLeaveItAlone) {
  PollWindow w(microseconds(50), microseconds(500));
  for (int i = 0; i < 100; ++i) w.OnWorkAfter(microseconds(5));  // small requests back to back
  EXPECT_EQ(w.window(), microseconds(50));
}

TEST(PollWindow, GrowsToCoverAClientsThinkTime) {
  // A 1 MiB put copies ~70 µs between the reply that hands it room and its commit.
  PollWindow w(microseconds(50), microseconds(500));
  w.OnWorkAfter(microseconds(70));
  EXPECT_EQ(w.window(), microseconds(140));
  for (int i = 0; i < 20; ++i) w.OnWorkAfter(microseconds(70));
  EXPECT_EQ(w.window(), microseconds(140));
  // Short gaps in between (a small get) do not pull it back down.
  w.OnWorkAfter(microseconds(3));
  EXPECT_EQ(w.window(), microseconds(140));
}

TEST(PollWindow, FollowsTheAverageAndStaysWithinItsBounds) {
  PollWindow w(microseconds(50), microseconds(500));
  w.OnWorkAfter(microseconds(100));
  w.OnWorkAfter(microseconds(300));  // 100 + (300 - 100) / 4 = 150
  EXPECT_EQ(w.window(), microseconds(300));
  for (int i = 0; i < 50; ++i) w.OnWorkAfter(microseconds(400));
  EXPECT_EQ(w.window(), microseconds(500));  // twice 400 would pass the max
  // Gaps from half the base up are think times too: they pull it back down, not below the base.
  for (int i = 0; i < 50; ++i) w.OnWorkAfter(microseconds(30));
  EXPECT_GE(w.window(), microseconds(60));
  EXPECT_LT(w.window(), microseconds(61));
}

TEST(PollWindow, AQuietSpellPutsItBackToTheBase) {
  PollWindow w(microseconds(50), microseconds(500));
  for (int i = 0; i < 10; ++i) w.OnWorkAfter(microseconds(200));
  ASSERT_EQ(w.window(), microseconds(400));
  w.OnWorkAfter(std::chrono::milliseconds(20));  // the clients went quiet; the thread slept
  EXPECT_EQ(w.window(), microseconds(50));
  w.OnWorkAfter(microseconds(80));  // and it starts again from the next gap alone
  EXPECT_EQ(w.window(), microseconds(160));
}

TEST(PollWindow, AMaxAtOrBelowTheBaseIsAFixedWindow) {
  PollWindow w(microseconds(50), microseconds(0));
  for (int i = 0; i < 10; ++i) w.OnWorkAfter(microseconds(45));
  EXPECT_EQ(w.window(), microseconds(50));
  PollWindow same(microseconds(50), microseconds(50));
  same.OnWorkAfter(microseconds(40));
  EXPECT_EQ(same.window(), microseconds(50));
}

}  // namespace
}  // namespace tierpool::transport
