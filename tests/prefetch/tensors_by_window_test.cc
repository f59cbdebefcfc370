#include "prefetch/tensors_by_window.h"

#include <gtest/gtest.h>

#include <random>
#include <set>
#include <utility>
#include <vector>

namespace tierpool::prefetch {
namespace {

// Walked from the latest window down, the set gives the entries in the order a std::set of
// (window, tensor) gives walked backwards (the order eviction candidates were always looked at
// in), and walked up from a window the order of the set walked forwards from its lower bound
// (the order early loads were first made in), after any mix of inserts and erases, with windows
// spread over more than one bitmap word and summary word, with tensors that have no next window,
// and in a set emptied by Reset of what an earlier round left in it.
TEST(TensorsByWindow, WalksInTheOrderOfAnOrderedSetOfPairs) {
  std::mt19937_64 rng(3);
  TensorsByWindow reset(0);  // every other round: one set, emptied with what the last left in it
  for (int round = 0; round < 300; ++round) {
    const std::int64_t steps = 1 + static_cast<std::int64_t>(rng() % (round % 3 == 0 ? 9000 : 200));
    const std::uint32_t tensors = 1 + static_cast<std::uint32_t>(rng() % 300);
    TensorsByWindow fresh(steps);
    if (round % 2 == 1) reset.Reset(steps);
    TensorsByWindow& set = round % 2 == 1 ? reset : fresh;
    std::set<std::pair<std::int64_t, std::uint32_t>> want;
    std::vector<std::int64_t> window_of(tensors, -1);  // -1: not in
    for (int op = 0; op < 2000; ++op) {
      const auto t = static_cast<std::uint32_t>(rng() % tensors);
      if (window_of[t] != -1) {
        set.Erase(window_of[t], t);
        want.erase({window_of[t], t});
        window_of[t] = -1;
      } else {
        const std::int64_t w =
            rng() % 10 == 0 ? TensorsByWindow::kNoWindow : static_cast<std::int64_t>(rng() % steps);
        set.Insert(w, t);
        want.insert({w, t});
        window_of[t] = w;
      }
      if (op % 97 != 0 && op != 1999) continue;
      ASSERT_EQ(set.empty(), want.empty());
      auto it = set.Latest();
      for (auto w = want.rbegin(); w != want.rend(); ++w, it.Next()) {
        ASSERT_FALSE(it.done()) << "round " << round;
        ASSERT_EQ(it.window(), w->first) << "round " << round;
        ASSERT_EQ(it.tensor(), w->second) << "round " << round;
      }
      ASSERT_TRUE(it.done());
      // Walked up from a window, the order of the ordered set walked forwards from it.
      const std::int64_t from = static_cast<std::int64_t>(rng() % (steps + 2)) - 1;
      auto up = set.From(from);
      for (auto w = want.lower_bound({from, 0}); w != want.end(); ++w, up.Next()) {
        ASSERT_FALSE(up.done()) << "round " << round << " from " << from;
        ASSERT_EQ(up.window(), w->first) << "round " << round << " from " << from;
        ASSERT_EQ(up.tensor(), w->second) << "round " << round << " from " << from;
      }
      ASSERT_TRUE(up.done()) << "round " << round << " from " << from;
      std::size_t seen = 0;
      set.ForEach([&](std::int64_t, std::uint32_t listed) {
        ++seen;
        EXPECT_NE(window_of[listed], -1);
      });
      ASSERT_EQ(seen, want.size());
    }
  }
}

}  // namespace
}  // namespace tierpool::prefetch
