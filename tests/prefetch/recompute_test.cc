#include "prefetch/recompute.h"

#include <gtest/gtest.h>

#include <random>

#include "prefetch/planner.h"
#include "prefetch/simulator.h"
#include "tests/prefetch/random_schedule.h"

namespace tierpool::prefetch {
namespace {

// The chain of 8 with a temporary that step `reader` alone reads (made the step before).
Chain WithTemporaryReadBy(std::uint32_t reader) {
  Chain c = TrainingChain(8, 1 << 20, 100);
  auto* tmp = c.s.add_tensors();
  tmp->set_id(static_cast<std::uint32_t>(c.s.tensors_size() - 1));
  tmp->set_name("tmp");
  tmp->set_size_bytes(1 << 20);
  tmp->set_def_step(static_cast<int>(reader) - 1);
  tmp->set_kind(schedule::ACTIVATION);
  tmp->add_use_steps(reader);
  return c;
}

google::protobuf::RepeatedPtrField<schedule::Recompute> One(std::uint32_t tensor,
                                                            std::uint32_t at) {
  google::protobuf::RepeatedPtrField<schedule::Recompute> r;
  auto* x = r.Add();
  x->set_tensor(tensor);
  x->set_at_step(at);
  return r;
}

TEST(Recompute, TheCopyTakesTheUsesAfterTheGapAndItsStepTheDefiningCompute) {
  const Chain c = TrainingChain(8, 1 << 20, 100);
  ASSERT_TRUE(Validate(c.s).ok()) << Validate(c.s).ToString();
  const std::uint32_t x2 = c.x(2);
  const std::uint32_t at = c.backward(3) - 1;  // the step before x2's first backward use
  auto r = ApplyRecomputes(c.s, One(x2, at));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->tensors_size(), c.s.tensors_size() + 1);
  const auto& kept = r->tensors(static_cast<int>(x2));
  const auto& copy = r->tensors(c.s.tensors_size());
  EXPECT_EQ(copy.name(), "x2@recompute");
  EXPECT_EQ(copy.id(), static_cast<std::uint32_t>(c.s.tensors_size()));
  EXPECT_EQ(copy.def_step(), static_cast<int>(at));
  EXPECT_EQ(copy.size_bytes(), kept.size_bytes());
  ASSERT_EQ(kept.use_steps_size(), 1);
  EXPECT_EQ(kept.use_steps(0), 3u);  // f3, in the forward pass
  ASSERT_EQ(copy.use_steps_size(), 2);
  EXPECT_EQ(copy.use_steps(0), c.backward(3));
  EXPECT_EQ(copy.use_steps(1), c.backward(2));
  // The defining step's inputs (x1, w2) are used at `at`; its compute is added there.
  auto uses = [&](std::uint32_t t) {
    const auto& u = r->tensors(static_cast<int>(t)).use_steps();
    return std::find(u.begin(), u.end(), at) != u.end();
  };
  EXPECT_TRUE(uses(c.x(1)));
  EXPECT_TRUE(uses(c.x(2) + 1));  // w2
  EXPECT_DOUBLE_EQ(r->steps(static_cast<int>(at)).compute_us(), 200);
  EXPECT_DOUBLE_EQ(r->steps(static_cast<int>(at)).kernel_us(), 200);
  // What the no-offload replay shows: one step's compute more, and x2 not held across the gap.
  const Lifetimes before(c.s), after(*r);
  auto device = BuiltinProfile("h100");
  ASSERT_TRUE(device.ok());
  auto t0 = Replay(c.s, before, *device, {});
  auto t1 = Replay(*r, after, *device, {});
  ASSERT_TRUE(t0.ok() && t1.ok());
  EXPECT_NEAR(t1->time_us - t0->time_us, 100, 1e-6);
  EXPECT_LT(after.memory_curve()[c.k], before.memory_curve()[c.k]);
}

TEST(Recompute, RecomputesThatAreNotAllowedAreRefusedByName) {
  const Chain c = TrainingChain(8, 1 << 20, 100);
  const std::uint32_t x2 = c.x(2), at = c.backward(3) - 1;
  struct Case {
    std::uint32_t tensor, at;
    const char* says;
  };
  const Case cases[] = {
      {9999, at, "the schedule has"},
      {x2, 9999, "steps"},
      {c.x(2) + 1, at, "only activations"},                         // w2, a weight
      {0, at, "only activations"},                                  // the input
      {x2, 3, "not between two of the tensor's uses"},              // at its own use
      {x2, 1, "not between two of the tensor's uses"},              // before its def
      {x2, c.backward(2), "not between two of the tensor's uses"},  // after its last use
  };
  for (const auto& k : cases) {
    auto r = ApplyRecomputes(c.s, One(k.tensor, k.at));
    ASSERT_FALSE(r.ok()) << k.says;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find(k.says), std::string::npos) << r.status().ToString();
    EXPECT_NE(r.status().message().find("recompute 0"), std::string::npos);
  }
  // x3's defining step reads a temporary that is dead by the step before x3's backward use.
  const Chain t = WithTemporaryReadBy(3);
  auto dead = ApplyRecomputes(t.s, One(t.x(3), t.backward(4) - 1));
  ASSERT_FALSE(dead.ok());
  EXPECT_NE(dead.status().message().find("input 'tmp' of its defining step is not in hbm"),
            std::string::npos)
      << dead.status().ToString();
  google::protobuf::RepeatedPtrField<schedule::Recompute> twice = One(x2, at);
  *twice.Add() = twice.Get(0);
  auto r = ApplyRecomputes(c.s, twice);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("recompute 1"), std::string::npos);
  EXPECT_NE(r.status().message().find("twice"), std::string::npos);
}

TEST(Recompute, CandidatesAddNoMemoryAndTheCheapestPerByteComeFirst) {
  Chain c = TrainingChain(8, 1 << 20, 100);
  c.s.mutable_steps(4)->set_compute_us(10);  // x4 is ten times cheaper to make again
  const Lifetimes lt(c.s);
  auto cand = RecomputeCandidates(c.s, lt);
  ASSERT_FALSE(cand.empty());
  EXPECT_EQ(cand.front().tensor, c.x(4));
  for (const auto& k : cand) {
    // Each applies alone, and no step then touches more than the schedule's floor.
    auto r = ApplyRecomputes(c.s, One(k.tensor, k.at_step));
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_LE(Lifetimes(*r).step_floor_bytes(), lt.step_floor_bytes());
  }
  // Chosen ones apply together, within the cost, none an input of another's defining step.
  auto chosen = ChooseRecomputes(c.s, lt, cand, 250);
  ASSERT_FALSE(chosen.empty());
  google::protobuf::RepeatedPtrField<schedule::Recompute> field(chosen.begin(), chosen.end());
  EXPECT_TRUE(ApplyRecomputes(c.s, field).ok());
  double cost = 0;
  for (const auto& k : chosen) cost += c.s.steps(c.s.tensors(k.tensor()).def_step()).compute_us();
  EXPECT_LE(cost, 250);
  // A tensor whose defining step reads a temporary dead by then is no candidate.
  const Chain t = WithTemporaryReadBy(3);
  const Lifetimes tl(t.s);
  auto with_tmp = RecomputeCandidates(t.s, tl);
  EXPECT_EQ(with_tmp.size() + 1, cand.size());
  for (const auto& k : with_tmp) EXPECT_NE(k.tensor, t.x(3));
}

// On a link too slow for the activations' round trips, recomputing them beats moving them: the
// plan with recomputes replays faster, holds the budget, and breaks no invariant; with no share
// allowed, the planner recomputes nothing.
TEST(Recompute, PlansRecomputeWhereTheLinkCannotKeepUp) {
  const Chain c = TrainingChain(16, 55'000'000, 100);  // 1 ms each way per activation
  const Lifetimes lt(c.s);
  auto device = BuiltinProfile("h100");
  ASSERT_TRUE(device.ok());
  const std::uint64_t budget = BudgetAt(lt, 0.6);
  auto moves = BuildPlan(c.s, lt, *device, {.hbm_budget = budget});
  ASSERT_TRUE(moves.ok()) << moves.status().ToString();
  EXPECT_EQ(moves->recomputes_size(), 0);
  auto both = BuildPlan(c.s, lt, *device, {.hbm_budget = budget, .recompute_share = 0.5});
  ASSERT_TRUE(both.ok()) << both.status().ToString();
  EXPECT_GT(both->recomputes_size(), 0);
  auto r0 =
      Replay(c.s, lt, *device, {.policy = Policy::kPlanned, .hbm_budget = budget, .plan = &*moves});
  auto r1 =
      Replay(c.s, lt, *device, {.policy = Policy::kPlanned, .hbm_budget = budget, .plan = &*both});
  ASSERT_TRUE(r0.ok() && r1.ok());
  EXPECT_EQ(r1->breaches(), 0u);
  EXPECT_LE(r1->peak_hbm, budget);
  EXPECT_LT(r1->time_us, r0->time_us);
  EXPECT_EQ(r1->recomputed, static_cast<std::uint32_t>(both->recomputes_size()));
  EXPECT_GT(r1->recompute_us, 0);
  EXPECT_LE(r1->recompute_us, 0.5 * 3200 + 1e-6);  // the share of 32 steps of 100 us
  // Its compute is in the replay's: the no-offload compute plus what it recomputes.
  EXPECT_NEAR(r1->compute_us, 3200 + r1->recompute_us, 1e-6);
}

TEST(Recompute, PlansWithBadRecomputesAreRefusedNotReplayed) {
  const Chain c = TrainingChain(8, 1 << 20, 100);
  const Lifetimes lt(c.s);
  auto device = BuiltinProfile("h100");
  ASSERT_TRUE(device.ok());
  schedule::Plan plan;
  plan.set_schedule("chain");
  *plan.mutable_recomputes() = One(c.x(2) + 1, 5);  // a weight
  auto r = Replay(c.s, lt, *device,
                  {.policy = Policy::kPlanned, .hbm_budget = lt.peak_bytes(), .plan = &plan});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("only activations"), std::string::npos);
  // More recomputes than tensors: refused before any is applied.
  for (int i = 0; i < c.s.tensors_size(); ++i) *plan.add_recomputes() = plan.recomputes(0);
  EXPECT_FALSE(ValidatePlan(plan, c.s).ok());
  // An action on the copy is in range only for a plan that makes it.
  schedule::Plan on_copy;
  auto* a = on_copy.add_actions();
  a->set_kind(schedule::FREE);
  a->set_tensor(static_cast<std::uint32_t>(c.s.tensors_size()));
  EXPECT_FALSE(ValidatePlan(on_copy, c.s).ok());
  *on_copy.mutable_recomputes() = One(c.x(2), c.backward(3) - 1);
  EXPECT_TRUE(ValidatePlan(on_copy, c.s).ok());
}

// Whatever the random schedule, a plan the planner makes with recomputes keeps every invariant
// in its replay.
TEST(Recompute, InvariantsHoldOnRandomChainsWithRecomputes) {
  const std::uint64_t seed = PrintedSeed("Recompute invariants");
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  auto device = H100WithSlowLinks();
  ASSERT_TRUE(device.ok());
  int recomputed = 0;
  for (int round = 0; round < 8; ++round) {
    Chain c = TrainingChain(6 + static_cast<std::uint32_t>(rng() % 20),
                            (1 << 20) + rng() % (8 << 20), 20 + static_cast<double>(rng() % 200));
    for (int i = 0; i < c.s.steps_size(); ++i) {
      c.s.mutable_steps(i)->set_compute_us(5 + static_cast<double>(rng() % 300));
    }
    const Lifetimes lt(c.s);
    for (double f : {0.8, 0.6, 0.45}) {
      const std::uint64_t budget = BudgetAt(lt, f);
      auto plan = BuildPlan(c.s, lt, *device, {.hbm_budget = budget, .recompute_share = 0.3});
      if (!plan.ok()) continue;
      recomputed += plan->recomputes_size() > 0;
      auto r = Replay(c.s, lt, *device,
                      {.policy = Policy::kPlanned, .hbm_budget = budget, .plan = &*plan});
      ASSERT_TRUE(r.ok()) << r.status().ToString();
      EXPECT_EQ(r->breaches(), 0u) << "round " << round << " f " << f;
      EXPECT_LE(r->peak_hbm, budget);
    }
  }
  EXPECT_GT(recomputed, 0);
}

}  // namespace
}  // namespace tierpool::prefetch

namespace tierpool::prefetch {
namespace {

// A trainer's recorded steps do not list what their ops read: there a tensor is recomputed from
// its recipe (the op that made it: its inputs and its time), and only a tensor that has one.
TEST(Recompute, ARecipeSaysWhatTheOpReadsAndWhatItCosts) {
  Chain c = TrainingChain(8, 1 << 20, 100);
  c.s.set_recipes_only(true);
  const std::uint32_t x2 = c.x(2), at = c.backward(3) - 1;
  auto* recipe = c.s.mutable_tensors(static_cast<int>(x2))->mutable_recipe();
  recipe->add_inputs(c.x(1));
  recipe->set_compute_us(7);
  ASSERT_TRUE(Validate(c.s).ok()) << Validate(c.s).ToString();
  const Lifetimes lt(c.s);
  auto cand = RecomputeCandidates(c.s, lt);
  ASSERT_EQ(cand.size(), 1u);
  EXPECT_EQ(cand[0].tensor, x2);
  EXPECT_DOUBLE_EQ(cand[0].cost_us, 7);
  auto r = ApplyRecomputes(c.s, One(x2, at));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  auto uses = [&](std::uint32_t t) {
    const auto& u = r->tensors(static_cast<int>(t)).use_steps();
    return std::find(u.begin(), u.end(), at) != u.end();
  };
  EXPECT_TRUE(uses(c.x(1)));       // the recipe's input
  EXPECT_FALSE(uses(c.x(2) + 1));  // w2, which the defining step reads, is not
  EXPECT_DOUBLE_EQ(r->steps(static_cast<int>(at)).compute_us(), 107);
  schedule::Plan plan;
  *plan.mutable_recomputes() = One(x2, at);
  EXPECT_DOUBLE_EQ(RecomputeUs(c.s, plan), 7);
  // A tensor without one is refused by name.
  auto none = ApplyRecomputes(c.s, One(c.x(3), c.backward(4) - 1));
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("no recipe"), std::string::npos)
      << none.status().ToString();
  // A recipe from outside is checked: it reads tensors of the schedule defined by then.
  Schedule later = c.s;
  later.mutable_tensors(static_cast<int>(x2))->mutable_recipe()->add_inputs(c.x(5));
  EXPECT_NE(Validate(later).message().find("defined after it"), std::string::npos);
  Schedule self = c.s;
  self.mutable_tensors(static_cast<int>(x2))->mutable_recipe()->add_inputs(x2);
  EXPECT_NE(Validate(self).message().find("not another tensor"), std::string::npos);
  Schedule negative = c.s;
  negative.mutable_tensors(static_cast<int>(x2))->mutable_recipe()->set_compute_us(-1);
  EXPECT_NE(Validate(negative).message().find("absurd compute"), std::string::npos);
}

}  // namespace
}  // namespace tierpool::prefetch
