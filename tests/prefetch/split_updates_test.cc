#include "prefetch/split_updates.h"

#include <gtest/gtest.h>

#include <map>
#include <random>

#include "prefetch/cost_model.h"
#include "prefetch/planner.h"
#include "prefetch/reorder.h"
#include "prefetch/simulator.h"
#include "tests/prefetch/random_schedule.h"

namespace tierpool::prefetch {
namespace {

std::vector<std::uint32_t> Uses(const schedule::Tensor& t) {
  return {t.use_steps().begin(), t.use_steps().end()};
}
std::vector<std::uint32_t> Updates(const schedule::Tensor& t) {
  return {t.update_steps().begin(), t.update_steps().end()};
}

// One layer by hand: fwd (uses w), bwd (uses w, makes g), adam (reads w, g, m, v; writes w, m,
// v), then a step after it that reads w. w and g are bfloat16, m and v float32, `elements` each.
Schedule OneLayer(std::uint64_t elements) {
  Schedule s;
  s.set_format_version(1);
  s.set_name("one-layer");
  s.set_repeats(true);
  for (const char* op : {"mm", "mm", "adam", "mm"}) {
    auto* st = s.add_steps();
    st->set_name(std::string(op) + std::to_string(s.steps_size() - 1));
    st->set_op_type(op);
    st->set_compute_us(300);
    st->set_flops(3000);
    st->set_bytes_touched(6000);
  }
  auto tensor = [&](const char* name, std::uint64_t element_bytes, int def,
                    schedule::TensorKind kind, std::vector<std::uint32_t> uses,
                    std::vector<std::uint32_t> updates) {
    auto* t = AddShapedTensor(s, name, elements, element_bytes, def, kind);
    for (auto u : uses) t->add_use_steps(u);
    for (auto u : updates) t->add_update_steps(u);
  };
  tensor("w", 2, -1, schedule::WEIGHT, {0, 1, 2, 3}, {2});
  tensor("g", 2, 1, schedule::GRADIENT, {2}, {});
  tensor("m", 4, -1, schedule::OPTIMIZER_STATE, {2}, {2});
  tensor("v", 4, -1, schedule::OPTIMIZER_STATE, {2}, {2});
  return s;
}

TEST(SplitUpdates, SlicesTheUpdateAndEveryUseOfItsTensors) {
  // 3001 elements: m and v are 12,004 bytes; slices of at most 4 KiB are 1024 float32 elements,
  // so three slices of 1000, 1000 and 1001 elements.
  Schedule s = OneLayer(3001);
  auto r = SplitOptimizerUpdates(s, 4096);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->steps_split, 1u);
  EXPECT_EQ(r->chunk_steps, 3u);
  EXPECT_EQ(r->tensors_split, 4u);
  EXPECT_EQ(r->skipped, 0u);
  const Schedule& out = r->schedule;
  ASSERT_EQ(out.steps_size(), 6);
  EXPECT_EQ(out.steps(2).name(), "adam2[0/3]");
  EXPECT_EQ(out.steps(4).name(), "adam2[2/3]");
  EXPECT_EQ(out.steps(5).name(), "mm3");
  EXPECT_DOUBLE_EQ(out.steps(2).compute_us(), 300.0 * 1000 / 3001);
  EXPECT_DOUBLE_EQ(out.steps(4).compute_us(), 300.0 * 1001 / 3001);
  double compute = 0;
  for (int i = 2; i < 5; ++i) compute += out.steps(i).compute_us();
  EXPECT_NEAR(compute, 300.0, 1e-9);
  ASSERT_EQ(out.tensors_size(), 12);
  const std::uint64_t elements[] = {1000, 1000, 1001};
  for (std::uint32_t j = 0; j < 3; ++j) {
    SCOPED_TRACE("slice " + std::to_string(j));
    const auto& w = out.tensors(static_cast<int>(j));
    const auto& g = out.tensors(static_cast<int>(3 + j));
    const auto& m = out.tensors(static_cast<int>(6 + j));
    const std::uint32_t update = 2 + j;
    EXPECT_EQ(w.id(), j);
    EXPECT_EQ(w.name(), "w[" + std::to_string(j) + "/3]");
    EXPECT_EQ(w.size_bytes(), elements[j] * 2);
    ASSERT_EQ(w.shape_size(), 1);
    EXPECT_EQ(w.shape(0), static_cast<std::int64_t>(elements[j]));
    EXPECT_EQ(m.size_bytes(), elements[j] * 4);
    // Every slice of w is read by fwd, bwd and the step after the update, and by its own slice
    // of the update, which also writes it.
    EXPECT_EQ(Uses(w), (std::vector<std::uint32_t>{0, 1, update, 5}));
    EXPECT_EQ(Updates(w), (std::vector<std::uint32_t>{update}));
    EXPECT_EQ(g.def_step(), 1);  // bwd makes every slice of the gradient
    EXPECT_EQ(Uses(g), (std::vector<std::uint32_t>{update}));
    EXPECT_EQ(Uses(m), (std::vector<std::uint32_t>{update}));
    EXPECT_EQ(Updates(m), (std::vector<std::uint32_t>{update}));
  }
  // Nothing is lost or made up: the bytes of the slices are the bytes of the tensors.
  std::uint64_t before = 0, after = 0;
  for (const auto& t : s.tensors()) before += t.size_bytes();
  for (const auto& t : out.tensors()) after += t.size_bytes();
  EXPECT_EQ(after, before);
  // And the order of the slices is one the dependencies allow.
  std::vector<std::uint32_t> order(static_cast<std::size_t>(out.steps_size()));
  for (std::uint32_t i = 0; i < order.size(); ++i) order[i] = i;
  EXPECT_TRUE(CheckOrder(out, order).ok());
}

TEST(SplitUpdates, LeavesWhatItCannotSliceWhole) {
  // Small updates stay whole.
  Schedule small = OneLayer(1000);  // 4000-byte states
  auto r = SplitOptimizerUpdates(small, 4096);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->steps_split, 0u);
  EXPECT_EQ(r->skipped, 0u);
  EXPECT_EQ(r->schedule.SerializeAsString(), small.SerializeAsString());
  // A tensor without a shape, or with another element count: not provably elementwise.
  for (int variant = 0; variant < 2; ++variant) {
    Schedule s = OneLayer(3001);
    auto* m = s.mutable_tensors(2);
    if (variant == 0) {
      m->clear_shape();
    } else {
      m->set_size_bytes(3000 * 4);
      m->set_shape(0, 3000);
    }
    r = SplitOptimizerUpdates(s, 4096);
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(r->steps_split, 0u) << variant;
    EXPECT_EQ(r->skipped, 1u) << variant;
    EXPECT_EQ(r->schedule.SerializeAsString(), s.SerializeAsString()) << variant;
  }
  // Only optimizer updates are split, however large: an mm's output is not elementwise.
  Schedule s = OneLayer(3001);
  s.mutable_steps(2)->set_op_type("mm");
  r = SplitOptimizerUpdates(s, 4096);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->steps_split, 0u);
  EXPECT_FALSE(SplitOptimizerUpdates(s, 100).ok());  // below 4 KiB: refused
}

// The point of it: an update whose tensors do not fit in hbm together cannot be planned whole,
// and streams through in slices.
TEST(SplitUpdates, AnUpdateLargerThanTheBudgetStreamsInSlices) {
  auto device = BuiltinProfile("h100");
  ASSERT_TRUE(device.ok());
  Schedule whole = OneLayer(4u << 20);  // w, g 8 MiB; m, v 16 MiB: 48 MiB for the update
  const std::uint64_t budget = 32u << 20;
  Lifetimes lt_whole(whole);
  EXPECT_FALSE(BuildPlan(whole, lt_whole, *device, {.hbm_budget = budget}).ok());
  auto r = SplitOptimizerUpdates(whole, 4u << 20);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->chunk_steps, 4u);
  Lifetimes lt(r->schedule);
  auto plan = BuildPlan(r->schedule, lt, *device, {.hbm_budget = budget});
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  auto replay = Replay(r->schedule, lt, *device,
                       {.policy = Policy::kPlanned, .hbm_budget = budget, .plan = &*plan});
  ASSERT_TRUE(replay.ok());
  EXPECT_EQ(replay->breaches(), 0u);
  EXPECT_LE(replay->peak_hbm, budget);
}

// On random training schedules: the split schedule validates, keeps every tensor's bytes (its
// slices summed), keeps the compute, and plans and replays with no breach; then reordered, too.
TEST(SplitUpdates, RandomTrainingSchedulesPlanWithoutBreaches) {
  std::mt19937_64 rng(PrintedSeed("SplitUpdates"));
  auto device = BuiltinProfile("h100");
  ASSERT_TRUE(device.ok());
  int split_rounds = 0;
  for (int round = 0; round < 12; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    Schedule s = TrainingSchedule(rng, 2 + static_cast<std::uint32_t>(rng() % 24));
    auto r = SplitOptimizerUpdates(s, 1u << 20);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    ASSERT_TRUE(Validate(r->schedule).ok());
    split_rounds += r->steps_split > 0;
    std::map<std::string, std::uint64_t> bytes;
    for (const auto& t : s.tensors()) bytes[t.name()] += t.size_bytes();
    for (const auto& t : r->schedule.tensors()) {
      bytes[t.name().substr(0, t.name().find('['))] -= t.size_bytes();
    }
    for (const auto& [name, left] : bytes) EXPECT_EQ(left, 0u) << name;
    double before = 0, after = 0;
    for (const auto& st : s.steps()) before += st.compute_us();
    for (const auto& st : r->schedule.steps()) after += st.compute_us();
    EXPECT_NEAR(after, before, 1e-6 * before);
    auto reordered = HoistOptimizerUpdates(r->schedule);
    ASSERT_TRUE(reordered.ok());
    for (const Schedule* plan_for : {&r->schedule, &reordered->schedule}) {
      Lifetimes lt(*plan_for);
      for (double f : {0.8, 0.5}) {
        auto budget = BudgetAt(lt, f);
        auto plan = BuildPlan(*plan_for, lt, *device, {.hbm_budget = budget});
        if (!plan.ok()) continue;
        auto replay = Replay(*plan_for, lt, *device,
                             {.policy = Policy::kPlanned, .hbm_budget = budget, .plan = &*plan});
        ASSERT_TRUE(replay.ok());
        EXPECT_EQ(replay->breaches(), 0u);
      }
    }
  }
  EXPECT_GT(split_rounds, 0);  // weights up to 4 MiB: most rounds have updates above 1 MiB
}

}  // namespace
}  // namespace tierpool::prefetch
