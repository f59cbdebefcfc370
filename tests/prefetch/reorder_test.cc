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

// A branch made early and needed late: x -> big -> sum_big, and x -> wide -> relu -> sum_wide,
// with the two sums added. In file order `big` is held across the whole other branch.
Schedule BranchSchedule() {
  Schedule s;
  s.set_format_version(1);
  s.set_name("branch");
  s.set_repeats(true);
  for (const char* name : {"big", "wide", "relu", "sum_wide", "sum_big", "add"}) {
    auto* st = s.add_steps();
    st->set_name(name);
    st->set_op_type("op");
    st->set_compute_us(10);
  }
  auto tensor = [&](const char* name, std::uint64_t bytes, int def,
                    std::vector<std::uint32_t> uses) {
    auto* t = s.add_tensors();
    t->set_id(static_cast<std::uint32_t>(s.tensors_size() - 1));
    t->set_name(name);
    t->set_size_bytes(bytes);
    t->set_kind(def < 0 ? schedule::INPUT : schedule::ACTIVATION);
    t->set_def_step(def);
    for (auto u : uses) t->add_use_steps(u);
  };
  tensor("x", 10, -1, {0, 1});
  tensor("b", 100, 0, {4});
  tensor("a1", 100, 1, {2});
  tensor("a2", 100, 2, {3});
  tensor("a3", 1, 3, {5});
  tensor("c", 1, 4, {5});
  tensor("y", 1, 5, {});
  return s;
}

TEST(Reorder, ABranchRunsWhereItsResultIsNeeded) {
  Schedule s = BranchSchedule();
  ASSERT_TRUE(Validate(s).ok()) << Validate(s).ToString();
  EXPECT_EQ(Lifetimes(s).peak_bytes(), 310u);  // relu: x, b, a1 and a2
  auto r = LowerPeakOrder(s);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_TRUE(CheckOrder(s, r->order).ok()) << CheckOrder(s, r->order).ToString();
  std::vector<std::string> names;
  for (const auto& st : r->schedule.steps()) names.push_back(st.name());
  // `big` is summed (and freed) at once, before the other branch starts.
  EXPECT_EQ(names, (std::vector<std::string>{"big", "sum_big", "wide", "relu", "sum_wide", "add"}));
  EXPECT_EQ(Lifetimes(r->schedule).peak_bytes(), 211u);  // relu: x, a1, a2 and c
  EXPECT_EQ(r->moved, 4u);
  // Nothing to gain: the order comes back as it was.
  auto again = LowerPeakOrder(r->schedule);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->moved, 0u);
  EXPECT_EQ(Lifetimes(again->schedule).peak_bytes(), 211u);
}

// On random training and plain schedules: both reorders keep every dependency, plan and
// replay with no breach, and never raise the no-offload peak.
TEST(Reorder, ReorderedRandomSchedulesPlanWithoutBreaches) {
  std::mt19937_64 rng(PrintedSeed("Reorder"));
  auto device = BuiltinProfile("h100");
  ASSERT_TRUE(device.ok());
  for (int round = 0; round < 12; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    Schedule s = round % 3 == 2
                     ? RandomSchedule(rng, 10 + static_cast<std::uint32_t>(rng() % 80), true)
                     : TrainingSchedule(rng, 2 + static_cast<std::uint32_t>(rng() % 40));
    auto hoisted = HoistOptimizerUpdates(s);
    ASSERT_TRUE(hoisted.ok()) << hoisted.status().ToString();
    auto lower = LowerPeakOrder(s);
    ASSERT_TRUE(lower.ok()) << lower.status().ToString();
    for (const ReorderResult* r : {&*hoisted, &*lower}) {
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
    // Where the lower-peak order moves nothing, it is the schedule as given.
    if (lower->moved == 0) {
      EXPECT_EQ(lower->schedule.SerializeAsString(), s.SerializeAsString());
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
