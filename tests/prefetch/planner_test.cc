#include "prefetch/planner.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <random>

#include "common/units.h"
#include "prefetch/report.h"
#include "prefetch/simulator.h"
#include "tests/prefetch/random_schedule.h"

namespace tierpool::prefetch {
namespace {

// Whatever the schedule and budget, a plan the planner accepts keeps hbm within the budget,
// has every tensor in hbm when a step uses it, and never acts on a dead tensor.
TEST(Planner, InvariantsHoldOnRandomSchedules) {
  const std::uint64_t seed = PrintedSeed("Planner invariants");
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  auto device = BuiltinProfile("h100");
  ASSERT_TRUE(device.ok());
  int planned = 0;
  for (int round = 0; round < 30; ++round) {
    Schedule s = RandomSchedule(rng, 8 + static_cast<std::uint32_t>(rng() % 120), rng() % 2 == 0);
    ASSERT_TRUE(Validate(s).ok()) << Validate(s).ToString();
    Lifetimes lt(s);
    for (double f : {1.0, 0.8, 0.6, 0.45, 0.3}) {
      auto budget = BudgetAt(lt, f);
      auto plan = BuildPlan(s, lt, *device, {.hbm_budget = budget});
      if (!plan.ok()) {
        ASSERT_EQ(plan.status().code(), StatusCode::kFailedPrecondition)
            << plan.status().ToString();
        continue;
      }
      ++planned;
      EXPECT_LE(plan->predicted_peak_bytes(), budget);
      auto r = Replay(s, lt, *device,
                      {.policy = Policy::kPlanned, .hbm_budget = budget, .plan = &*plan});
      ASSERT_TRUE(r.ok());
      std::string problems;
      for (const auto& p : r->problems) problems += p + "\n";
      EXPECT_EQ(r->budget_violations, 0u) << "round " << round << " f " << f << "\n" << problems;
      EXPECT_EQ(r->missing_at_use, 0u) << "round " << round << " f " << f << "\n" << problems;
      EXPECT_EQ(r->bad_actions, 0u) << "round " << round << " f " << f << "\n" << problems;
      EXPECT_LE(r->peak_hbm, budget);
      EXPECT_GE(r->stall_us + 1e-6, r->stall_lower_bound_us);
      // The bound holds for any policy that keeps the budget, the runtime baseline included.
      auto reactive =
          Replay(s, lt, *device, {.policy = Policy::kReactiveLru, .hbm_budget = budget});
      ASSERT_TRUE(reactive.ok());
      EXPECT_EQ(reactive->budget_violations, 0u);
      EXPECT_GE(reactive->stall_us + 1e-6, reactive->stall_lower_bound_us)
          << "round " << round << " f " << f;
    }
  }
  EXPECT_GT(planned, 60);
}

// A is defined at step 0 and used at step 2; B, as big, is made and dropped at step 1; the budget
// holds one of them. A must go out before step 1 with no compute to hide it, and come back
// during step 1's 200 us: the bound is 1000 us out + (1000 - 200) us in on a 55 GB/s link.
TEST(StallLowerBound, MatchesAHandWorkedCase) {
  Schedule s = TwoTensors();
  constexpr std::uint64_t kBytes = 55'000'000;  // 1000 us on the link
  ASSERT_TRUE(Validate(s).ok()) << Validate(s).ToString();
  Lifetimes lt(s);
  auto device = BuiltinProfile("h100");
  EXPECT_NEAR(StallLowerBound(s, lt, *device, kBytes), 1800.0, 1e-6);
  EXPECT_EQ(StallLowerBound(s, lt, *device, 2 * kBytes), 0.0);
  auto reactive = Replay(s, lt, *device, {.policy = Policy::kReactiveLru, .hbm_budget = kBytes});
  ASSERT_TRUE(reactive.ok());
  EXPECT_EQ(reactive->budget_violations, 0u);
  EXPECT_GE(reactive->stall_us, 1800.0);
  // Every microsecond of that stall is named: what it waited for, largest first, and from where.
  ASSERT_FALSE(reactive->stall_causes.empty());
  double named = 0;
  for (std::size_t i = 0; i < reactive->stall_causes.size(); ++i) {
    named += reactive->stall_causes[i].us;
    if (i > 0) {
      EXPECT_LE(reactive->stall_causes[i].us, reactive->stall_causes[i - 1].us);
    }
  }
  EXPECT_NEAR(named, reactive->stall_us, 1e-6);
  const auto& first = reactive->stall_causes.front();
  EXPECT_FALSE(first.why.empty());
  EXPECT_LT(first.step, 3u);
  EXPECT_EQ(first.step_name, s.steps(static_cast<int>(first.step)).name());
  bool waited_for_a = false;
  for (const auto& c : reactive->stall_causes) waited_for_a |= c.tensor == s.tensors(0).name();
  EXPECT_TRUE(waited_for_a);
  EXPECT_NE(StallCausesText(*reactive, "  ").find(" ms waiting: "), std::string::npos);
}

TEST(Planner, RefusesABudgetBelowAStepsWorkingSet) {
  std::mt19937_64 rng(5);
  Schedule s = RandomSchedule(rng, 40, true);
  Lifetimes lt(s);
  auto device = BuiltinProfile("gh200");
  auto plan = BuildPlan(s, lt, *device, {.hbm_budget = 1});
  EXPECT_EQ(plan.status().code(), StatusCode::kFailedPrecondition);
  // The first refusal names the floor and its step: no budget between the one asked and the
  // floor is refused again for another step.
  const std::string floor_step = "step " + std::to_string(lt.step_floor_step()) + " (" +
                                 s.steps(static_cast<int>(lt.step_floor_step())).name() + ")";
  EXPECT_NE(plan.status().message().find("floor of " + FormatBytes(lt.step_floor_bytes())),
            std::string::npos)
      << plan.status().message();
  EXPECT_NE(plan.status().message().find(floor_step), std::string::npos);
  EXPECT_TRUE(BuildPlan(s, lt, *device, {.hbm_budget = lt.step_floor_bytes()}).ok());
  for (std::uint64_t budget : {lt.step_floor_bytes() / 2, lt.step_floor_bytes() - 1}) {
    auto again = BuildPlan(s, lt, *device, {.hbm_budget = budget});
    EXPECT_NE(again.status().message().find(floor_step), std::string::npos);
  }
}

TEST(Planner, BeatsReactiveLruAndTheNoneBaselineHasNoStalls) {
  std::mt19937_64 rng(11);
  Schedule s = RandomSchedule(rng, 200, true);
  Lifetimes lt(s);
  auto device = BuiltinProfile("gh200");
  auto none = Replay(s, lt, *device, {.policy = Policy::kNone});
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(none->stall_us, 0);
  EXPECT_EQ(none->peak_hbm, lt.peak_bytes());
  auto budget = lt.peak_bytes() * 6 / 10;
  auto plan = BuildPlan(s, lt, *device, {.hbm_budget = budget});
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  auto planned =
      Replay(s, lt, *device, {.policy = Policy::kPlanned, .hbm_budget = budget, .plan = &*plan});
  auto reactive = Replay(s, lt, *device, {.policy = Policy::kReactiveLru, .hbm_budget = budget});
  ASSERT_TRUE(planned.ok() && reactive.ok());
  EXPECT_LE(planned->peak_hbm, budget);
  EXPECT_LE(reactive->peak_hbm, budget);
  EXPECT_LE(planned->stall_us, reactive->stall_us * 0.5 + 1);
}

TEST(Planner, PlansTenThousandStepsInUnderASecond) {
  std::mt19937_64 rng(3);
  Schedule s = RandomSchedule(rng, 10000, true);
  Lifetimes lt(s);
  auto device = BuiltinProfile("h100");
  auto t0 = std::chrono::steady_clock::now();
  auto plan = BuildPlan(s, lt, *device, {.hbm_budget = lt.peak_bytes() / 2});
  double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  std::printf("planned %d steps, %d tensors in %.1f ms\n", s.steps_size(), s.tensors_size(), ms);
  // Not a timing assertion (machines vary): the figure goes to docs/benchmarks.md.
  EXPECT_GT(plan->actions_size(), 0);
}

TEST(Report, TraceAndSvgAreWellFormed) {
  std::mt19937_64 rng(9);
  Schedule s = RandomSchedule(rng, 30, true);
  Lifetimes lt(s);
  auto device = BuiltinProfile("h100");
  auto budget = lt.peak_bytes() * 7 / 10;
  auto plan = BuildPlan(s, lt, *device, {.hbm_budget = budget});
  ASSERT_TRUE(plan.ok());
  auto r = Replay(
      s, lt, *device,
      {.policy = Policy::kPlanned, .hbm_budget = budget, .plan = &*plan, .record_timeline = true});
  ASSERT_TRUE(r.ok());
  std::string trace = ChromeTraceJson(*r);
  EXPECT_NE(trace.find("\"traceEvents\""), std::string::npos);
  EXPECT_NE(trace.find("\"ph\":\"C\""), std::string::npos);
  EXPECT_NE(trace.find("\"ph\":\"X\""), std::string::npos);
  std::string svg = MemorySvg(*r, "random");
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  EXPECT_NE(svg.find("</svg>"), std::string::npos);
  // Beside the run, the schedule without offload and under reactive-lru, and the marks of where
  // compute waited: the picture says why a run is slower.
  auto none = Replay(s, lt, *device, {.policy = Policy::kNone, .record_timeline = true});
  auto reactive =
      Replay(s, lt, *device,
             {.policy = Policy::kReactiveLru, .hbm_budget = budget, .record_timeline = true});
  ASSERT_TRUE(none.ok() && reactive.ok());
  ASSERT_GT(reactive->stall_us, 0);
  svg = MemorySvg(*reactive, "random", {&*none, &*r});
  EXPECT_NE(svg.find("hbm bytes without offload"), std::string::npos);
  EXPECT_NE(svg.find("hbm bytes, planned"), std::string::npos);
  EXPECT_NE(svg.find("waiting for its tensors"), std::string::npos);
  EXPECT_NE(svg.find("fill='#c00'><title>"), std::string::npos);  // a stall mark, its step named
  EXPECT_EQ(svg.find("nan"), std::string::npos);
  auto sweep = Sweep(s, lt, *device, {.max_overhead = 0.01});
  ASSERT_TRUE(sweep.ok());
  EXPECT_FALSE(sweep->rows.empty());
  EXPECT_NE(SweepTable(*sweep, s, *device).find("LP ms"), std::string::npos);
  EXPECT_NE(SweepJson(*sweep, s, *device).find("\"lp_bound\""), std::string::npos);
  for (const auto& row : sweep->rows) {
    ASSERT_TRUE(row.lp.has_value());
    if (row.planned_ok) {
      EXPECT_GE(row.planned.stall_us + 1e-3, row.lp->stall_us);
    }
    EXPECT_GE(row.reactive.stall_us + 1e-3, row.lp->stall_us);
  }
  EXPECT_FALSE(Sweep(s, lt, *device, {.lp = {.max_windows = 1}}).ok());
  EXPECT_FALSE(Sweep(s, lt, *device, {.jobs = 0}).ok());
}

// Where the step floor falls between two of the sweep's budgets, the sweep tries it too: the
// lowest budget any policy keeps. Rows stay in falling budget order, and none below the floor
// has a plan.
TEST(Report, SweepTriesTheStepFloor) {
  auto device = BuiltinProfile("h100");
  ASSERT_TRUE(device.ok());
  int tried = 0;
  for (std::uint64_t seed : {21, 22, 23, 24, 25, 26}) {
    std::mt19937_64 rng(seed);
    Schedule s = RandomSchedule(rng, 30, true);
    Lifetimes lt(s);
    auto sweep = Sweep(s, lt, *device, {.step = 0.1, .lowest = 0.05, .lp_bound = false});
    ASSERT_TRUE(sweep.ok());
    const std::uint64_t floor = lt.step_floor_bytes();
    int at_floor = 0;
    for (std::size_t i = 0; i < sweep->rows.size(); ++i) {
      const auto& row = sweep->rows[i];
      if (i > 0) {
        EXPECT_LT(row.budget, sweep->rows[i - 1].budget) << "seed " << seed;
      }
      if (row.budget < floor) {
        EXPECT_FALSE(row.planned_ok) << "seed " << seed;
      }
      if (row.at_step_floor) {
        ++at_floor;
        EXPECT_EQ(row.budget, floor);
        EXPECT_DOUBLE_EQ(row.fraction, static_cast<double>(floor) / lt.peak_bytes());
      }
    }
    // Between two budgets of the sweep (multiples of a tenth of the peak, down to 10%).
    const double f = static_cast<double>(floor) / static_cast<double>(lt.peak_bytes());
    const bool between = f > 0.1 && f < 1 && std::abs(f * 10 - std::round(f * 10)) > 1e-6;
    EXPECT_EQ(at_floor, between ? 1 : 0) << "seed " << seed << " floor " << f;
    tried += at_floor;
    if (at_floor == 1) {
      EXPECT_NE(SweepJson(*sweep, s, *device).find("\"at_step_floor\": true"), std::string::npos);
    }
  }
  EXPECT_GT(tried, 0);
}

TEST(Report, SweepWithSeveralJobsGivesTheSameRows) {
  std::mt19937_64 rng(11);
  Schedule s = RandomSchedule(rng, 40, true);
  Lifetimes lt(s);
  auto device = BuiltinProfile("h100");
  auto one = Sweep(s, lt, *device, {.step = 0.1, .lowest = 0.3});
  auto three = Sweep(s, lt, *device, {.step = 0.1, .lowest = 0.3, .jobs = 3});
  ASSERT_TRUE(one.ok() && three.ok());
  ASSERT_EQ(one->rows.size(), three->rows.size());
  for (std::size_t i = 0; i < one->rows.size(); ++i) {
    const auto &a = one->rows[i], &b = three->rows[i];
    EXPECT_EQ(a.budget, b.budget) << "row " << i;
    EXPECT_EQ(a.planned_ok, b.planned_ok) << "row " << i;
    EXPECT_EQ(a.planned.time_us, b.planned.time_us) << "row " << i;
    EXPECT_EQ(a.reactive.time_us, b.reactive.time_us) << "row " << i;
    ASSERT_TRUE(a.lp && b.lp);
    EXPECT_EQ(a.lp->stall_us, b.lp->stall_us) << "row " << i;
    EXPECT_EQ(a.guided.has_value(), b.guided.has_value()) << "row " << i;
  }
  EXPECT_EQ(one->smallest_within, three->smallest_within);
  EXPECT_EQ(one->smallest_within_guided, three->smallest_within_guided);
}

}  // namespace
}  // namespace tierpool::prefetch
