#include "prefetch/guided_plan.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <random>

#include "prefetch/residency_guide.h"
#include "tests/prefetch/random_schedule.h"

namespace tierpool::prefetch {
namespace {

TEST(ResidencyGuide, ReadsTheBoundaryAtOrAfterAStepAndWrapsToTheNextIteration) {
  ResidencyGuide g{.boundaries = {0, 4, 8}, .in_hbm = {{1.0f, 0.25f, 0.5f}, {}}};
  EXPECT_FLOAT_EQ(g.InHbm(0, 0), 1.0f);
  EXPECT_FLOAT_EQ(g.InHbm(0, 1), 0.25f);
  EXPECT_FLOAT_EQ(g.InHbm(0, 8), 0.5f);
  EXPECT_FLOAT_EQ(g.InHbm(0, 9), 1.0f);  // past the last: the next iteration's first
  EXPECT_FLOAT_EQ(g.InHbm(1, 5), 1.0f);  // not modelled: stays in hbm
  EXPECT_FLOAT_EQ(g.InHbm(7, 5), 1.0f);  // unknown tensor
  // Least share from step `from` to before `to`, on a timeline of iterations of 10 steps.
  EXPECT_FLOAT_EQ(g.LeastInHbm(0, 0, 4, 10), 1.0f);      // only boundary 0 is before step 4
  EXPECT_FLOAT_EQ(g.LeastInHbm(0, 0, 5, 10), 0.25f);     // 0 and 4
  EXPECT_FLOAT_EQ(g.LeastInHbm(0, 5, 6, 10), 0.5f);      // none before 6: the next one, 8
  EXPECT_FLOAT_EQ(g.LeastInHbm(0, 9, 13, 10), 1.0f);     // 10 (the next iteration's 0) only
  EXPECT_FLOAT_EQ(g.LeastInHbm(0, 9, 15, 10), 0.25f);    // 10 and 14
  EXPECT_FLOAT_EQ(g.LeastInHbm(0, 9, 1000, 10), 0.25f);  // at most one iteration: 10..18
  EXPECT_FLOAT_EQ(g.LeastInHbm(1, 0, 100, 10), 1.0f);
}

// Two activations as big as each other: A is made by step 0 and used by step 2, B is made and
// dropped by step 1, and the budget holds one of them. The LP's optimum has all of A out of hbm
// at step 1 and back at step 2.
TEST(TransferLpBound, ReportsTheRelaxationsResidency) {
  Schedule s = TwoTensors();
  auto device = BuiltinProfile("h100");
  ASSERT_TRUE(device.ok());
  Lifetimes lt(s);
  auto plain = TransferLpStallBound(s, lt, *device, 55'000'000);
  ASSERT_TRUE(plain.ok());
  EXPECT_TRUE(plain->residency.empty());  // only when asked for
  auto b = TransferLpStallBound(s, lt, *device, 55'000'000, {.residency = true});
  ASSERT_TRUE(b.ok());
  ASSERT_EQ(b->residency.boundaries, (std::vector<std::uint32_t>{0, 1, 2}));
  ASSERT_EQ(b->residency.in_hbm.size(), 2u);
  ASSERT_EQ(b->residency.in_hbm[0].size(), 3u);
  EXPECT_NEAR(b->residency.in_hbm[0][0], 1.0, 1e-6);  // made by step 0
  EXPECT_NEAR(b->residency.in_hbm[0][1], 0.0, 1e-6);  // B's room
  EXPECT_NEAR(b->residency.in_hbm[0][2], 1.0, 1e-6);  // its use
  EXPECT_NEAR(b->residency.InHbm(1, 1), 1.0, 1e-6);   // B, made there
}

// Guided or not, every kept plan keeps every invariant, never replays slower than the plain
// plan, and never stalls less than the LP's bound; the guide must also help somewhere, or it
// would be doing nothing.
TEST(GuidedPlan, IsNeverWorseThanThePlainPlanAndSometimesBetterOnRandomSchedules) {
  const std::uint64_t seed = PrintedSeed("GuidedPlan");
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  auto device = H100WithSlowLinks();
  ASSERT_TRUE(device.ok());
  int made = 0, better = 0, kept_guided = 0;
  for (int round = 0; round < 16; ++round) {
    const auto steps = 16 + static_cast<std::uint32_t>(rng() % 80);
    Schedule s = RandomSchedule(rng, steps, rng() % 2 == 0);
    Lifetimes lt(s);
    for (double f : {0.8, 0.6, 0.4}) {
      SCOPED_TRACE("round " + std::to_string(round) + " f " + std::to_string(f));
      auto budget = BudgetAt(lt, f);
      auto g = BuildLpGuidedPlan(s, lt, *device, {.hbm_budget = budget});
      if (!g.ok()) {
        EXPECT_EQ(g.status().code(), StatusCode::kFailedPrecondition) << g.status().ToString();
        continue;
      }
      auto kept = Replay(s, lt, *device,
                         {.policy = Policy::kPlanned, .hbm_budget = budget, .plan = &g->plan});
      ASSERT_TRUE(kept.ok());
      EXPECT_EQ(kept->missing_at_use + kept->budget_violations + kept->bad_actions, 0u)
          << (kept->problems.empty() ? "" : kept->problems.front());
      EXPECT_LE(kept->time_us, g->plain_replay.time_us + 1e-6);
      EXPECT_GE(kept->stall_us + 1e-3, g->guidance.lp.stall_us);
      if (!g->guidance.replay) continue;
      ++made;
      const auto& r = *g->guidance.replay;
      EXPECT_EQ(r.missing_at_use + r.budget_violations + r.bad_actions, 0u)
          << (r.problems.empty() ? "" : r.problems.front());
      EXPECT_GE(r.stall_us + 1e-3, g->guidance.lp.stall_us);
      better += r.stall_us < g->plain_replay.stall_us - 1e-3;
      kept_guided += g->guided;
    }
  }
  std::printf("guided plans made %d, stalling less than the plain plan %d, kept %d\n", made, better,
              kept_guided);
  EXPECT_GT(made, 10);
  EXPECT_GT(better, 0);
}

}  // namespace
}  // namespace tierpool::prefetch
