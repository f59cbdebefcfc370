// The last step of a pass on a repeating schedule (prefetch/periodic_copies.h): a plan whose kept
// prefetches came from the iteration before is made to leave each tensor's copies as that
// iteration did, and replays without losing an update or passing its budget.
#include "prefetch/periodic_copies.h"

#include <gtest/gtest.h>

#include <limits>
#include <string>
#include <vector>

#include "prefetch/device_profile.h"
#include "prefetch/simulator.h"
#include "tests/prefetch/random_schedule.h"

namespace tierpool::prefetch {
namespace {

constexpr std::uint64_t kBytes = 1 << 20;

// Five steps of 100 us, repeating; one weight W used by `uses`, updated by `updates`.
Schedule OneWeight(const std::vector<std::uint32_t>& uses,
                   const std::vector<std::uint32_t>& updates) {
  Schedule s;
  s.set_format_version(1);
  s.set_name("one-weight");
  s.set_repeats(true);
  for (int i = 0; i < 5; ++i) {
    auto* st = s.add_steps();
    st->set_name("op" + std::to_string(i));
    st->set_compute_us(100);
  }
  auto* w = AddShapedTensor(s, "W", kBytes / 4, 4, -1, schedule::WEIGHT);
  for (auto u : uses) w->add_use_steps(u);
  for (auto u : updates) w->add_update_steps(u);
  return s;
}

schedule::Action Act(schedule::ActionKind kind, std::uint32_t step, bool after,
                     std::uint32_t needed_by = 0) {
  schedule::Action a;
  a.set_kind(kind);
  a.set_tensor(0);
  a.set_step(step);
  a.set_after(after);
  if (kind == schedule::PREFETCH) a.set_needed_by(needed_by);
  return a;
}

schedule::Plan PlanOf(bool resident_at_start, const std::vector<schedule::Action>& actions) {
  schedule::Plan p;
  p.set_format_version(1);
  p.set_schedule("one-weight");
  p.set_hbm_budget_bytes(2 * kBytes);
  if (resident_at_start) p.add_resident_at_start(0);
  for (const auto& a : actions) *p.add_actions() = a;
  return p;
}

std::string Describe(const schedule::Plan& p) {
  std::string out = p.resident_at_start_size() > 0 ? "in;" : "out;";
  for (const auto& a : p.actions()) {
    out += schedule::ActionKind_Name(a.kind()) + "@" + std::to_string(a.step()) +
           (a.after() ? "+" : "") + ";";
  }
  return out;
}

// The breaches of the plan's replay under a budget of two weights (a replay that cannot run
// fails the test).
std::uint64_t BreachesOf(const Schedule& s, const Lifetimes& lt, const schedule::Plan& p) {
  auto d = BuiltinProfile("h100");
  auto r =
      d.ok() ? Replay(s, lt, *d, {.policy = Policy::kPlanned, .hbm_budget = 2 * kBytes, .plan = &p})
             : Result<ReplayReport>(d.status());
  if (!r.ok()) {
    ADD_FAILURE() << r.status().ToString();
    return std::numeric_limits<std::uint64_t>::max();
  }
  return r->breaches();
}

// W in hbm at the start, used by step 1 and freed after it (clean: it came in by a prefetch),
// loaded again for step 3, which updates it, and loaded at step 4 for the next iteration's step
// 1, as the iteration before did after evicting it. Nothing evicts it after step 3: run again
// and again, the load at step 4 finds it in hbm and the free after step 1 drops its update.
TEST(PeriodicCopies, EvictsAnUpdatedTensorThatTheNextLoadExpectsOut) {
  Schedule s = OneWeight({1, 3}, {3});
  Lifetimes lt(s);
  schedule::Plan plan =
      PlanOf(true, {Act(schedule::FREE, 1, true), Act(schedule::PREFETCH, 2, false, 3),
                    Act(schedule::PREFETCH, 4, false, 1)});
  EXPECT_GT(BreachesOf(s, lt, plan), 0u);  // what the fix is for
  KeepPeriodicCopiesCurrent(s, lt, &plan);
  EXPECT_EQ(Describe(plan), "in;FREE@1+;PREFETCH@2;OFFLOAD@3+;PREFETCH@4;");
  EXPECT_EQ(BreachesOf(s, lt, plan), 0u);
}

// A free that finds W dirty and has no load before it to blame becomes an offload.
TEST(PeriodicCopies, OffloadsWhereAFreeWouldDropAnUpdate) {
  Schedule s = OneWeight({1, 3}, {3});
  Lifetimes lt(s);
  schedule::Plan plan =
      PlanOf(false, {Act(schedule::PREFETCH, 0, false, 1), Act(schedule::FREE, 3, true)});
  KeepPeriodicCopiesCurrent(s, lt, &plan);
  EXPECT_EQ(Describe(plan), "out;PREFETCH@0;OFFLOAD@3+;");
  EXPECT_EQ(BreachesOf(s, lt, plan), 0u);
}

// A second load of a weight with no use since the first is only a repeat: it goes (and the
// free that would drop the weight's update becomes an offload).
TEST(PeriodicCopies, DropsALoadThatRepeatsTheOneBeforeIt) {
  Schedule s = OneWeight({2}, {2});
  Lifetimes lt(s);
  schedule::Plan plan =
      PlanOf(false, {Act(schedule::PREFETCH, 0, false, 2), Act(schedule::PREFETCH, 1, false, 2),
                     Act(schedule::FREE, 2, true)});
  KeepPeriodicCopiesCurrent(s, lt, &plan);
  EXPECT_EQ(Describe(plan), "out;PREFETCH@0;OFFLOAD@2+;");
}

// W in hbm at the start and loaded at step 0 for step 1, freed after it as if clean, loaded
// again for step 3, which updates it: the iteration before evicted it after step 3, so it starts
// out of hbm and goes, copied out, after that update.
TEST(PeriodicCopies, EvictsAcrossTheIterationsStart) {
  Schedule s = OneWeight({1, 3}, {3});
  Lifetimes lt(s);
  schedule::Plan plan =
      PlanOf(true, {Act(schedule::PREFETCH, 0, false, 1), Act(schedule::FREE, 1, true),
                    Act(schedule::PREFETCH, 2, false, 3)});
  EXPECT_GT(BreachesOf(s, lt, plan), 0u);
  KeepPeriodicCopiesCurrent(s, lt, &plan);
  EXPECT_EQ(Describe(plan), "out;PREFETCH@0;FREE@1+;PREFETCH@2;OFFLOAD@3+;");
  EXPECT_EQ(BreachesOf(s, lt, plan), 0u);
}

// A load that finds a weight nobody updates already in hbm is a no-op that leaves it there:
// nothing is added for it.
TEST(PeriodicCopies, LeavesARepeatedLoadOfACleanTensorAlone) {
  Schedule s = OneWeight({3}, {});
  Lifetimes lt(s);
  schedule::Plan plan = PlanOf(true, {Act(schedule::PREFETCH, 1, false, 3)});
  const std::string bytes = plan.SerializeAsString();
  KeepPeriodicCopiesCurrent(s, lt, &plan);
  EXPECT_EQ(plan.SerializeAsString(), bytes);
  EXPECT_EQ(BreachesOf(s, lt, plan), 0u);
}

// A plan whose iterations already agree is left as it is, byte for byte.
TEST(PeriodicCopies, LeavesAConsistentPlanAlone) {
  Schedule s = OneWeight({1, 3}, {3});
  Lifetimes lt(s);
  schedule::Plan plan =
      PlanOf(true, {Act(schedule::FREE, 1, true), Act(schedule::PREFETCH, 2, false, 3),
                    Act(schedule::OFFLOAD, 3, true), Act(schedule::PREFETCH, 4, false, 1)});
  const std::string bytes = plan.SerializeAsString();
  KeepPeriodicCopiesCurrent(s, lt, &plan);
  EXPECT_EQ(plan.SerializeAsString(), bytes);
}

}  // namespace
}  // namespace tierpool::prefetch
