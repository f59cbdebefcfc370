// Schedules for the planner's, the bounds' and the schedule transforms' tests: random ones for the
// property tests, training-shaped ones, and the hand-worked two-tensor case.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "prefetch/device_profile.h"
#include "prefetch/schedule.h"

namespace tierpool::prefetch {

// A fresh seed, printed so that a failure can be replayed: TIERPOOL_TEST_SEED=N runs with N.
inline std::uint64_t PrintedSeed(const char* test) {
  const char* fixed = std::getenv("TIERPOOL_TEST_SEED");
  const std::uint64_t seed =
      fixed != nullptr ? std::strtoull(fixed, nullptr, 10) : std::random_device{}();
  std::printf("%s seed %llu\n", test, static_cast<unsigned long long>(seed));
  // Out before the work: a test that crashes must still have named its seed (a CI run of
  // 2026-12-08 had one die with the line still in the buffer).
  std::fflush(stdout);
  return seed;
}

// `fraction` of a schedule's no-offload peak, as an hbm budget.
inline std::uint64_t BudgetAt(const Lifetimes& lt, double fraction) {
  return static_cast<std::uint64_t>(static_cast<double>(lt.peak_bytes()) * fraction);
}

// h100 with links a fifth as fast, so that random schedules' transfers do not all hide.
inline Result<DeviceProfile> H100WithSlowLinks() {
  auto d = BuiltinProfile("h100");
  if (d.ok()) {
    d->h2d_gbps /= 5;
    d->d2h_gbps /= 5;
  }
  return d;
}

// A random training-like schedule: weights used in a forward and a backward half, activations
// defined in the forward half and used again in the backward half, some short-lived temporaries.
inline Schedule RandomSchedule(std::mt19937_64& rng, std::uint32_t steps, bool repeats) {
  Schedule s;
  s.set_format_version(1);
  s.set_name("random");
  s.set_repeats(repeats);
  for (std::uint32_t i = 0; i < steps; ++i) {
    auto* st = s.add_steps();
    st->set_name("op" + std::to_string(i));
    st->set_compute_us(5 + static_cast<double>(rng() % 200));
  }
  auto add = [&](std::uint64_t size, int def, std::vector<std::uint32_t> uses,
                 schedule::TensorKind kind) {
    std::sort(uses.begin(), uses.end());
    uses.erase(std::unique(uses.begin(), uses.end()), uses.end());
    auto* t = s.add_tensors();
    t->set_id(static_cast<std::uint32_t>(s.tensors_size() - 1));
    t->set_name("t" + std::to_string(t->id()));
    t->set_size_bytes(size);
    t->set_def_step(def);
    t->set_kind(kind);
    for (auto u : uses) t->add_use_steps(u);
    return t;
  };
  std::uint32_t half = steps / 2;
  for (std::uint32_t i = 0; i < half; ++i) {
    // A weight used at i and at its mirror step in the backward half.
    auto* w = add(1 + rng() % (4 << 20), -1, {i, steps - 1 - i}, schedule::WEIGHT);
    if (rng() % 3 == 0) w->add_update_steps(steps - 1 - i);
    // An activation saved for backward.
    if (i + 1 < half)
      add(1 + rng() % (8 << 20), static_cast<int>(i), {i + 1, steps - 2 - i},
          schedule::SAVED_ACTIVATION);
    // A temporary.
    if (i + 1 < steps)
      add(1 + rng() % (1 << 20), static_cast<int>(i), {i + 1}, schedule::ACTIVATION);
  }
  return s;
}

// The hand-worked case: A, made by step 0 and used by step 2, and B, as big (55 MB: 1000 us on
// h100's 55 GB/s links), made and dropped by step 1; steps of step0_us, 200 and 100 us. A budget
// of one tensor forces A out for step 1.
inline Schedule TwoTensors(double step0_us = 100.0) {
  Schedule s;
  s.set_format_version(1);
  s.set_name("two-tensors");
  for (double c : {step0_us, 200.0, 100.0}) {
    auto* st = s.add_steps();
    st->set_name("op" + std::to_string(s.steps_size()));
    st->set_compute_us(c);
  }
  for (int i = 0; i < 2; ++i) {
    auto* t = s.add_tensors();
    t->set_id(static_cast<std::uint32_t>(i));
    t->set_name(i == 0 ? "A" : "B");
    t->set_size_bytes(55'000'000);
    t->set_def_step(i);
    t->set_kind(schedule::ACTIVATION);
    if (i == 0) t->add_use_steps(2);
  }
  return s;
}

// A chain trained for one iteration: forward steps f0..f(k-1), each making activation x_i from
// x_(i-1) and weight w_i, then backward steps b(k-1)..b0, b_i reading x_i and x_(i-1). The
// loss step (the last forward one) also uses a workspace of `workspace` activations, so that a
// step holding a recompute's copy and inputs stays within the schedule's step floor (the
// recompute tests' schedule, and the replay fuzz target's).
struct Chain {
  Schedule s;
  std::uint32_t k;
  std::uint32_t x(std::uint32_t i) const { return 2 + 2 * i; }             // tensor ids
  std::uint32_t backward(std::uint32_t i) const { return 2 * k - 1 - i; }  // b_i's step
};

inline Chain TrainingChain(std::uint32_t k, std::uint64_t bytes, double compute_us,
                           int workspace = 6) {
  Chain c{.k = k};
  Schedule& s = c.s;
  s.set_format_version(1);
  s.set_name("chain");
  for (std::uint32_t i = 0; i < 2 * k; ++i) {
    auto* st = s.add_steps();
    st->set_name(i < k ? "f" + std::to_string(i) : "b" + std::to_string(2 * k - 1 - i));
    st->set_compute_us(compute_us);
    st->set_kernel_us(compute_us);
  }
  auto add = [&](const std::string& name, std::uint64_t size, int def,
                 std::vector<std::uint32_t> uses, schedule::TensorKind kind) {
    std::sort(uses.begin(), uses.end());
    uses.erase(std::unique(uses.begin(), uses.end()), uses.end());
    auto* t = s.add_tensors();
    t->set_id(static_cast<std::uint32_t>(s.tensors_size() - 1));
    t->set_name(name);
    t->set_size_bytes(size);
    t->set_def_step(def);
    t->set_kind(kind);
    for (auto u : uses) t->add_use_steps(u);
  };
  add("input", bytes, -1, {0, c.backward(0)}, schedule::INPUT);  // id 0
  add("workspace", workspace * bytes, static_cast<int>(k) - 2, {k - 1}, schedule::ACTIVATION);
  for (std::uint32_t i = 0; i < k; ++i) {
    std::vector<std::uint32_t> uses = {c.backward(i)};
    if (i + 1 < k) {
      uses.push_back(i + 1);
      uses.push_back(c.backward(i + 1));
    }
    add("x" + std::to_string(i), bytes, static_cast<int>(i), uses, schedule::SAVED_ACTIVATION);
    add("w" + std::to_string(i), bytes / 16, -1, {i, c.backward(i)}, schedule::WEIGHT);
  }
  return c;
}

// Appends a tensor of one dimension, `elements` long, of element_bytes each (bfloat16 when 2,
// else float32), made by step `def` (-1: before the schedule starts).
inline schedule::Tensor* AddShapedTensor(Schedule& s, const std::string& name,
                                         std::uint64_t elements, std::uint64_t element_bytes,
                                         int def, schedule::TensorKind kind) {
  auto* t = s.add_tensors();
  t->set_id(static_cast<std::uint32_t>(s.tensors_size() - 1));
  t->set_name(name);
  t->set_size_bytes(elements * element_bytes);
  t->set_dtype(element_bytes == 2 ? "bfloat16" : "float32");
  t->add_shape(static_cast<std::int64_t>(elements));
  t->set_def_step(def);
  t->set_kind(kind);
  return t;
}

// A training step as the torch hook writes one: a forward half, a backward half that makes one
// gradient per weight (in reverse order), then one Adam update per weight that reads the weight,
// its gradient and two states and writes the weight and the states. Weights and gradients are
// bfloat16, the states float32, each with its shape (one dimension), as the hook writes them.
inline Schedule TrainingSchedule(std::mt19937_64& rng, std::uint32_t layers) {
  Schedule s;
  s.set_format_version(1);
  s.set_name("training");
  s.set_repeats(true);
  auto step = [&](const std::string& name, const std::string& op) {
    auto* st = s.add_steps();
    st->set_name(name);
    st->set_op_type(op);
    st->set_compute_us(20 + static_cast<double>(rng() % 200));
    return static_cast<std::uint32_t>(s.steps_size() - 1);
  };
  std::vector<std::uint32_t> fwd(layers), bwd(layers);
  for (std::uint32_t l = 0; l < layers; ++l) fwd[l] = step("fwd" + std::to_string(l), "mm");
  for (std::uint32_t l = layers; l-- > 0;) bwd[l] = step("bwd" + std::to_string(l), "mm");
  std::vector<schedule::Tensor*> weights, grads;
  std::vector<std::uint64_t> welements(layers);
  for (std::uint32_t l = 0; l < layers; ++l) {
    welements[l] = 1 + rng() % (4 << 20) / 2;  // up to 4 MiB
    auto* w = AddShapedTensor(s, "w" + std::to_string(l), welements[l], 2, -1, schedule::WEIGHT);
    w->add_use_steps(fwd[l]);
    w->add_use_steps(bwd[l]);
    weights.push_back(w);
    auto* a = AddShapedTensor(s, "act" + std::to_string(l), 1 + rng() % (8 << 20) / 2, 2,
                              static_cast<int>(fwd[l]), schedule::SAVED_ACTIVATION);
    a->add_use_steps(bwd[l]);
    if (l + 1 < layers) a->add_use_steps(fwd[l + 1]);
    std::sort(a->mutable_use_steps()->begin(), a->mutable_use_steps()->end());
    grads.push_back(AddShapedTensor(s, "grad" + std::to_string(l), welements[l], 2,
                                    static_cast<int>(bwd[l]), schedule::GRADIENT));
  }
  for (std::uint32_t l = layers; l-- > 0;) {
    auto u = step("adam_update.w" + std::to_string(l), "adam");
    weights[l]->add_use_steps(u);
    weights[l]->add_update_steps(u);
    grads[l]->add_use_steps(u);
    for (const char* state : {".exp_avg", ".exp_avg_sq"}) {
      auto* st = AddShapedTensor(s, "w" + std::to_string(l) + state, welements[l], 4, -1,
                                 schedule::OPTIMIZER_STATE);
      st->add_use_steps(u);
      st->add_update_steps(u);
    }
  }
  return s;
}

}  // namespace tierpool::prefetch
