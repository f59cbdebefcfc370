// Plans that stream persistent tensors through a ring (prefetch/streamed_tensors.h), alone and
// as the planner's candidates, on a loop shaped like a decoder's: every token reads each layer's
// weight once, in order.
#include "prefetch/streamed_tensors.h"

#include <gtest/gtest.h>

#include "prefetch/simulator.h"

namespace tierpool::prefetch {
namespace {

constexpr int kLayers = 32, kTokens = 4;
constexpr std::uint64_t kWeight = 100'000'000;  // 1.8 ms on h100's host link

// kTokens tokens over kLayers layers: step (token, layer) reads the layer's weight and the step
// before's small activation, and defines its own. 0.5 ms a step: a weight's load takes the
// compute of almost four layers, and the link carries 85% of the peak's missing share every
// token in 80% of the token's compute.
Schedule DecodeLike() {
  Schedule s;
  s.set_format_version(1);
  s.set_name("decode-like");
  s.set_repeats(true);
  for (int i = 0; i < kTokens * kLayers; ++i) {
    auto* st = s.add_steps();
    st->set_name("step" + std::to_string(i));
    st->set_compute_us(500);
  }
  for (int l = 0; l < kLayers; ++l) {
    auto* w = s.add_tensors();
    w->set_id(static_cast<std::uint32_t>(s.tensors_size() - 1));
    w->set_name("layers." + std::to_string(l) + ".weight");
    w->set_size_bytes(kWeight);
    w->set_kind(schedule::WEIGHT);
    w->set_def_step(-1);
    for (int k = 0; k < kTokens; ++k) w->add_use_steps(static_cast<std::uint32_t>(k * kLayers + l));
  }
  for (int i = 0; i + 1 < kTokens * kLayers; ++i) {
    auto* a = s.add_tensors();
    a->set_id(static_cast<std::uint32_t>(s.tensors_size() - 1));
    a->set_name("act" + std::to_string(i));
    a->set_size_bytes(1 << 20);
    a->set_kind(schedule::ACTIVATION);
    a->set_def_step(i);
    a->add_use_steps(static_cast<std::uint32_t>(i + 1));
  }
  return s;
}

TEST(StreamedTensors, AnEvenlySpreadShareStreamsThroughTheRing) {
  Schedule s = DecodeLike();
  ASSERT_TRUE(Validate(s).ok()) << Validate(s).ToString();
  Lifetimes lt(s);
  auto device = BuiltinProfile("h100");
  ASSERT_TRUE(device.ok());
  EXPECT_FALSE(StreamedTensorsPlan(s, lt, *device, {.budget = lt.peak_bytes()}))
      << "a plan where everything fits";
  const std::uint64_t budget = lt.peak_bytes() * 85 / 100;
  auto plan = StreamedTensorsPlan(s, lt, *device, {.budget = budget, .depth = 2});
  ASSERT_TRUE(plan);
  ASSERT_TRUE(ValidatePlan(*plan, s).ok()) << ValidatePlan(*plan, s).ToString();
  // Which weights stream: those not in hbm as the iteration starts, and the ring's two.
  std::vector<bool> resident(kLayers, false);
  for (auto t : plan->resident_at_start()) {
    if (t < kLayers) resident[t] = true;
  }
  std::vector<int> streamed;
  for (const auto& a : plan->actions()) {
    if (a.kind() == schedule::FREE && a.step() < kLayers) streamed.push_back(a.tensor());
  }
  // 15% of the peak plus two slots: 7 of 32 weights, never two in a row.
  ASSERT_EQ(streamed.size(), 7u);
  for (std::size_t i = 1; i < streamed.size(); ++i) {
    EXPECT_GT(streamed[i] - streamed[i - 1], 1)
        << "weights " << streamed[i - 1] << " and " << streamed[i] << " stream one after another";
  }
  for (std::size_t i = 0; i < streamed.size(); ++i) {
    EXPECT_EQ(resident[streamed[i]], i < 2) << "weight " << streamed[i];
  }
  auto r =
      Replay(s, lt, *device, {.policy = Policy::kPlanned, .hbm_budget = budget, .plan = &*plan});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->breaches(), 0u);
  EXPECT_LE(r->peak_hbm, budget);
  EXPECT_EQ(r->stall_us, 0) << "each load has the compute of the kept layers before it";
  EXPECT_EQ(r->h2d_bytes, 7 * kTokens * kWeight);
}

// The planner keeps a streamed plan where it stalls less than its own passes' best: on this loop
// at 85% of the peak they stalled 7.4% (evicting each weight as it was used, so that the next
// load waited for room), where the ring does not stall.
TEST(StreamedTensors, ThePlannerTakesTheRingWhereItStallsLess) {
  Schedule s = DecodeLike();
  Lifetimes lt(s);
  auto device = BuiltinProfile("h100");
  ASSERT_TRUE(device.ok());
  const std::uint64_t budget = lt.peak_bytes() * 85 / 100;
  auto plan = BuildPlan(s, lt, *device, {.hbm_budget = budget});
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  auto r =
      Replay(s, lt, *device, {.policy = Policy::kPlanned, .hbm_budget = budget, .plan = &*plan});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->breaches(), 0u);
  EXPECT_LT(r->stall_us, 0.01 * r->compute_us);
}

// Tensors a loop writes (a trainer's weights, updated each step) never stream: dropping one
// would lose its only current copy.
TEST(StreamedTensors, TensorsTheLoopWritesDoNotStream) {
  Schedule s = DecodeLike();
  for (int l = 0; l < kLayers; ++l) s.mutable_tensors(l)->add_update_steps(kTokens * kLayers - 1);
  ASSERT_TRUE(Validate(s).ok()) << Validate(s).ToString();
  Lifetimes lt(s);
  auto device = BuiltinProfile("h100");
  ASSERT_TRUE(device.ok());
  EXPECT_FALSE(StreamedTensorsPlan(s, lt, *device, {.budget = lt.peak_bytes() * 85 / 100}));
}

}  // namespace
}  // namespace tierpool::prefetch
