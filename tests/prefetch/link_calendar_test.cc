#include "prefetch/link_calendar.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <iterator>
#include <map>
#include <random>

namespace tierpool::prefetch {
namespace {

// The calendar the planner had before blocks: one ordered map of busy intervals, searched one
// interval at a time. The blocked calendar must answer every query as it does.
class MapCalendar {
 public:
  double Place(double release, double dur) const {
    double t = release;
    auto it = busy_.upper_bound(t);
    if (it != busy_.begin()) t = std::max(t, std::prev(it)->second);
    for (; it != busy_.end() && it->first < t + dur; ++it) t = std::max(t, it->second);
    return t;
  }
  void Reserve(double from, double to) {
    auto next = busy_.lower_bound(from);
    if (next != busy_.end() && next->first <= to) {
      to = std::max(to, next->second);
      next = busy_.erase(next);
    }
    if (next != busy_.begin()) {
      auto prev = std::prev(next);
      if (prev->second >= from) {
        prev->second = std::max(prev->second, to);
        return;
      }
    }
    busy_.emplace(from, to);
  }

 private:
  std::map<double, double> busy_;
};

TEST(LinkCalendar, PlacesEveryCopyWhereASearchOfEveryIntervalWould) {
  std::mt19937_64 rng(11);
  for (int round = 0; round < 40; ++round) {
    LinkCalendar blocked;
    MapCalendar plain;
    // Whole-number times make exact fits and touching intervals common, as the planner's are
    // not; durations from tiny to long fragment the timeline into many blocks.
    const bool integral = round % 2 == 0;
    auto draw = [&](double hi) {
      double v = std::uniform_real_distribution<double>(0, hi)(rng);
      return integral ? std::floor(v) : v;
    };
    for (int op = 0; op < 3000; ++op) {
      const double release = draw(20000);
      const double dur = rng() % 8 == 0 ? draw(400) : draw(12) + (integral ? 1 : 0.01);
      const double at = plain.Place(release, dur);
      ASSERT_EQ(blocked.Place(release, dur), at) << "round " << round << " op " << op;
      // Most places are kept, as the planner keeps the copy-out it chooses; some are only
      // asked (candidates it did not take).
      if (rng() % 4 != 0) {
        plain.Reserve(at, at + dur);
        blocked.Reserve(at, at + dur);
      }
    }
  }
}

}  // namespace
}  // namespace tierpool::prefetch
