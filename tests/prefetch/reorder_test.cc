#include "prefetch/reorder.h"

#include <gtest/gtest.h>

#include <random>

#include "prefetch/cost_model.h"
#include "prefetch/planner.h"
#include "prefetch/simulator.h"
#include "tests/prefetch/random_schedule.h"

namespace tierpool::prefetch {
namespace {

TEST(Reorder, EachUpdateRunsRightAfterItsGradient) {
  std::mt19937_64 rng(3);
  Schedule s = TrainingSchedule(rng, 6);
  ASSERT_TRUE(Validate(s).ok()) << Validate(s).ToString();
  auto r = HoistOptimizerUpdates(s);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_TRUE(CheckOrder(s, r->order).ok()) << CheckOrder(s, r->order).ToString();
  ASSERT_TRUE(Validate(r->schedule).ok());
  EXPECT_EQ(r->hoisted, 5u);  // every update but the last, which was already right there
  // The new order: fwd0..5, then for each layer from the last, its backward and its update.
  std::vector<std::string> names;
  for (const auto& st : r->schedule.steps()) names.push_back(st.name());
  std::vector<std::string> expected = {"fwd0", "fwd1", "fwd2", "fwd3", "fwd4", "fwd5"};
  for (int l = 5; l >= 0; --l) {
    expected.push_back("bwd" + std::to_string(l));
    expected.push_back("adam_update.w" + std::to_string(l));
  }
  EXPECT_EQ(names, expected);
  // Gradients now die one at a time: the peak without offload is lower.
  EXPECT_LT(Lifetimes(r->schedule).peak_bytes(), Lifetimes(s).peak_bytes());
}

TEST(Reorder, CheckOrderNamesTheBrokenDependency) {
  std::mt19937_64 rng(4);
  Schedule s = TrainingSchedule(rng, 3);
  std::vector<std::uint32_t> order(static_cast<std::size_t>(s.steps_size()));
  for (std::uint32_t i = 0; i < order.size(); ++i) order[i] = i;
  EXPECT_TRUE(CheckOrder(s, order).ok());
  std::swap(order[0], order[1]);  // fwd1 reads fwd0's activation
  Status st = CheckOrder(s, order);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("fwd1"), std::string::npos) << st.ToString();
  order = {0, 1, 2};
  EXPECT_FALSE(CheckOrder(s, order).ok());  // not every step
  order.assign(static_cast<std::size_t>(s.steps_size()), 0);
  EXPECT_FALSE(CheckOrder(s, order).ok());  // not a permutation
  // An update may not move before a read of the value it replaces.
  order.clear();
  for (std::uint32_t i = 0; i < static_cast<std::uint32_t>(s.steps_size()); ++i) order.push_back(i);
  auto last = order.back();  // adam_update.w0, which must follow bwd0 and fwd0
  order.pop_back();
  order.insert(order.begin(), last);
  EXPECT_FALSE(CheckOrder(s, order).ok());
}

// On random training schedules: the reordered schedule keeps every dependency, plans and
// replays with no breach, and never raises the no-offload peak.
TEST(Reorder, ReorderedRandomSchedulesPlanWithoutBreaches) {
  std::mt19937_64 rng(PrintedSeed("Reorder"));
  auto device = BuiltinProfile("h100");
  ASSERT_TRUE(device.ok());
  for (int round = 0; round < 12; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    Schedule s = TrainingSchedule(rng, 2 + static_cast<std::uint32_t>(rng() % 40));
    auto r = HoistOptimizerUpdates(s);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    ASSERT_TRUE(CheckOrder(s, r->order).ok()) << CheckOrder(s, r->order).ToString();
    ASSERT_TRUE(Validate(r->schedule).ok());
    Lifetimes lt(r->schedule);
    EXPECT_LE(lt.peak_bytes(), Lifetimes(s).peak_bytes());
    for (double f : {0.8, 0.5}) {
      auto budget = BudgetAt(lt, f);
      auto plan = BuildPlan(r->schedule, lt, *device, {.hbm_budget = budget});
      if (!plan.ok()) continue;
      auto replay = Replay(r->schedule, lt, *device,
                           {.policy = Policy::kPlanned, .hbm_budget = budget, .plan = &*plan});
      ASSERT_TRUE(replay.ok());
      EXPECT_EQ(replay->missing_at_use + replay->budget_violations + replay->bad_actions, 0u);
    }
  }
  // The random schedules of the planner's tests (no optimizer steps) come back unchanged.
  Schedule plain = RandomSchedule(rng, 50, true);
  auto r = HoistOptimizerUpdates(plain);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->moved, 0u);
}

}  // namespace
}  // namespace tierpool::prefetch
