#include "prefetch/transfer_lp.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <random>

#include "prefetch/planner.h"
#include "prefetch/simulator.h"
#include "tests/prefetch/random_schedule.h"

namespace tierpool::prefetch {
namespace {

// A is made by step 0 and used by step 2; B, as big, is made and dropped by step 1; the budget
// holds one of them. A leaves after step 0's compute with nothing to hide it (1000 us and the
// link's 10 us latency) and comes back during step 1's 200 us (810 us more), whatever step 0
// costs. The step bound, which leaves latency out, gives 1800.
TEST(TransferLpBound, MatchesAHandWorkedCase) {
  auto device = BuiltinProfile("h100");
  ASSERT_TRUE(device.ok());
  for (double step0 : {100.0, 5000.0}) {
    Schedule s = TwoTensors(step0);
    ASSERT_TRUE(Validate(s).ok());
    Lifetimes lt(s);
    for (bool integral : {false, true}) {
      auto b = TransferLpStallBound(s, lt, *device, 55'000'000, {.integral = integral});
      ASSERT_TRUE(b.ok()) << b.status().ToString();
      EXPECT_TRUE(b->proven);
      EXPECT_NEAR(b->stall_us, 1820.0, 0.01) << "step 0 " << step0 << " integral " << integral;
      EXPECT_EQ(b->windows, 3u);
    }
    auto none = TransferLpStallBound(s, lt, *device, 110'000'000);
    ASSERT_TRUE(none.ok());
    EXPECT_EQ(none->stall_us, 0.0);
  }
}

TEST(TransferLpBound, ABudgetBelowAStepsWorkingSetIsInfeasible) {
  auto device = BuiltinProfile("h100");
  Schedule s = TwoTensors(100);
  Lifetimes lt(s);
  auto b = TransferLpStallBound(s, lt, *device, 50'000'000);  // B alone does not fit
  ASSERT_TRUE(b.ok());
  EXPECT_FALSE(b->feasible);
  EXPECT_TRUE(std::isinf(b->stall_us));
  EXPECT_FALSE(TransferLpStallBound(s, lt, *device, 1, {.max_windows = 1}).ok());
}

// The step floor (Lifetimes::step_floor_bytes) is what a sweep reports as the budget no policy
// keeps below: one byte under it, the planner refuses, reactive-lru breaks the budget and the
// bound says infeasible (the relaxation alone, which keeps memory at its boundaries only, found a
// point below it on some schedules); at it, with a boundary at every step, the relaxation has
// one.
TEST(StepFloor, NoPolicyKeepsABudgetBelowIt) {
  const std::uint64_t seed = PrintedSeed("StepFloor");
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  auto device = H100WithSlowLinks();
  ASSERT_TRUE(device.ok());
  for (int round = 0; round < 12; ++round) {
    const auto steps = 8 + static_cast<std::uint32_t>(rng() % 40);
    Schedule s = RandomSchedule(rng, steps, rng() % 2 == 0);
    Lifetimes lt(s);
    SCOPED_TRACE("round " + std::to_string(round));
    const std::uint64_t floor = lt.step_floor_bytes();
    ASSERT_GT(floor, 0u);
    ASSERT_LE(floor, lt.peak_bytes());
    auto plan = BuildPlan(s, lt, *device, {.hbm_budget = floor - 1});
    EXPECT_EQ(plan.status().code(), StatusCode::kFailedPrecondition);
    auto below = TransferLpStallBound(s, lt, *device, floor - 1, {.max_windows = steps});
    ASSERT_TRUE(below.ok());
    EXPECT_FALSE(below->feasible);
    auto reactive =
        Replay(s, lt, *device, {.policy = Policy::kReactiveLru, .hbm_budget = floor - 1});
    ASSERT_TRUE(reactive.ok());
    EXPECT_GT(reactive->budget_violations + reactive->missing_at_use, 0u);
    auto at = TransferLpStallBound(s, lt, *device, floor, {.max_windows = steps});
    ASSERT_TRUE(at.ok());
    EXPECT_TRUE(at->feasible);
  }
}

// The bound's promise: no policy that keeps the budget stalls less. Checked against the
// planner and reactive-lru on random schedules, with every step a boundary and with few
// boundaries; the integral form on the small ones is at least the relaxation.
TEST(TransferLpBound, IsBelowEveryPolicysStallOnRandomSchedules) {
  const std::uint64_t seed = PrintedSeed("TransferLpBound");
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  auto device = H100WithSlowLinks();
  ASSERT_TRUE(device.ok());
  int checked = 0, positive = 0, tighter = 0, stalled = 0;
  for (int round = 0; round < 14; ++round) {
    const auto steps = 8 + static_cast<std::uint32_t>(rng() % 56);
    Schedule s = RandomSchedule(rng, steps, rng() % 2 == 0);
    Lifetimes lt(s);
    for (double f : {0.8, 0.6, 0.4}) {
      SCOPED_TRACE("round " + std::to_string(round) + " f " + std::to_string(f));
      auto budget = BudgetAt(lt, f);
      auto fine = TransferLpStallBound(s, lt, *device, budget);
      auto coarse = TransferLpStallBound(s, lt, *device, budget, {.max_windows = 6});
      ASSERT_TRUE(fine.ok() && coarse.ok());
      ASSERT_TRUE(fine->proven && coarse->proven);
      // Coarser windows drop constraints: never a higher bound.
      EXPECT_LE(coarse->stall_us, fine->stall_us + 1e-3);
      double bound = fine->stall_us;
      if (steps <= 14) {
        auto exact =
            TransferLpStallBound(s, lt, *device, budget, {.integral = true, .time_limit_s = 1});
        ASSERT_TRUE(exact.ok());
        if (exact->proven) {
          EXPECT_GE(exact->stall_us + 1e-3, fine->stall_us);
        }
        bound = std::max(bound, exact->stall_us);
      }
      std::vector<ReplayReport> replays;
      auto reactive =
          Replay(s, lt, *device, {.policy = Policy::kReactiveLru, .hbm_budget = budget});
      ASSERT_TRUE(reactive.ok());
      replays.push_back(*reactive);
      auto plan = BuildPlan(s, lt, *device, {.hbm_budget = budget});
      if (plan.ok()) {
        auto planned = Replay(s, lt, *device,
                              {.policy = Policy::kPlanned, .hbm_budget = budget, .plan = &*plan});
        ASSERT_TRUE(planned.ok());
        replays.push_back(*planned);
      }
      for (const auto& r : replays) {
        if (r.budget_violations + r.missing_at_use + r.bad_actions > 0) continue;
        ++checked;
        EXPECT_TRUE(fine->feasible) << r.policy << " kept a budget the relaxation finds infeasible";
        EXPECT_GE(r.stall_us + 1e-3, bound) << r.policy;
        positive += bound > 0;
        stalled += r.stall_us > 0;
        tighter += bound > r.stall_lower_bound_us + 1e-3;
      }
    }
  }
  std::printf("checked %d replays, %d with stall; bound > 0 at %d, above the step bound at %d\n",
              checked, stalled, positive, tighter);
  EXPECT_GT(checked, 30);
  EXPECT_GT(positive, 10);  // a bound that is always 0 proves nothing
}

}  // namespace
}  // namespace tierpool::prefetch
