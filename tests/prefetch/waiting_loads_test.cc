#include "prefetch/waiting_loads.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

namespace tierpool::prefetch {
namespace {

// The rule the cut must follow, done the slow way: from the back, loads for later steps wait
// one at a time until the rest fit; a load for a step at or before `now` never waits.
std::size_t SlowCut(const std::vector<WaitingLoads::Entry>& loads,
                    const std::vector<std::uint64_t>& size, std::int64_t room, std::int64_t now) {
  std::int64_t bytes = 0;
  for (const auto& [use, t] : loads) bytes += static_cast<std::int64_t>(size[t]);
  std::size_t end = loads.size();
  while (bytes > room && end > 0 && loads[end - 1].first > now) {
    --end;
    bytes -= static_cast<std::int64_t>(size[loads[end].second]);
  }
  return end;
}

TEST(WaitingLoads, CutsWhereWaitingOneLoadAtATimeWouldAndCountsTheBytesBefore) {
  std::mt19937_64 rng(7);
  for (int round = 0; round < 2000; ++round) {
    const std::int64_t steps = 1 + static_cast<std::int64_t>(rng() % 50);
    const std::size_t tensors = 1 + rng() % 40;
    WaitingLoads w(steps, tensors);
    std::vector<std::uint64_t> size(tensors);
    for (auto& s : size)
      s = rng() % 8;  // small, so that a load often fits its room exactly; empty ones too
    for (std::size_t t = 0; t < tensors; ++t) {
      if (rng() % 3 != 0)
        w.Add(static_cast<std::uint32_t>(t), static_cast<std::int64_t>(rng() % steps), size[t]);
    }
    // A second Add of a waiting tensor changes nothing.
    if (!w.empty()) {
      const auto first = *w.begin();
      const std::uint64_t before = w.bytes();
      w.Add(first.second, steps - 1, 12345);
      EXPECT_EQ(w.bytes(), before);
    }
    // Issue some, as the planner does, then cut again.
    for (int cuts = 0; cuts < 3; ++cuts) {
      std::vector<WaitingLoads::Entry> loads(w.begin(), w.end());
      const std::int64_t room = static_cast<std::int64_t>(rng() % 120) - 5;
      const std::int64_t now = static_cast<std::int64_t>(rng() % steps) - 1;
      const auto cut = w.Cut(room, now);
      const auto expect = SlowCut(loads, size, room, now);
      ASSERT_EQ(static_cast<std::size_t>(std::distance(w.begin(), cut)), expect)
          << "round " << round << " room " << room << " now " << now;
      std::uint64_t bytes = 0;
      for (std::size_t i = 0; i < expect; ++i) bytes += size[loads[i].second];
      EXPECT_EQ(w.BytesBefore(cut), bytes);
      for (auto it = w.begin(); it != cut;) {
        EXPECT_TRUE(w.Contains(it->second));
        const auto t = it->second;
        it = w.Erase(it);
        EXPECT_FALSE(w.Contains(t));
      }
    }
  }
}

}  // namespace
}  // namespace tierpool::prefetch
