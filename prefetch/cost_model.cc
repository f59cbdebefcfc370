#include "prefetch/cost_model.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <string>
#include <utility>
#include <vector>

namespace tierpool::prefetch {

namespace {

std::string Lower(std::string_view s) {
  std::string r(s);
  for (auto& c : r) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return r;
}

// Names are matched lower-cased, so "MatMul" and "matmul" are one entry. Sorted for the lookup.
constexpr std::array<std::pair<std::string_view, OpClass>, 86> kOps = {{
    {"_adaptive_avg_pool2d", OpClass::kReduction},
    {"_adaptive_avg_pool2d_backward", OpClass::kReduction},
    {"_log_softmax", OpClass::kNorm},
    {"_log_softmax_backward_data", OpClass::kNorm},
    {"_native_batch_norm_legit", OpClass::kNorm},
    {"_native_batch_norm_legit_functional", OpClass::kNorm},
    {"_native_batch_norm_legit_no_training", OpClass::kElementwise},
    {"_native_multi_head_attention", OpClass::kAttention},
    {"_scaled_dot_product_attention", OpClass::kAttention},
    {"_scaled_dot_product_efficient_attention", OpClass::kAttention},
    {"_scaled_dot_product_flash_attention", OpClass::kAttention},
    {"_softmax", OpClass::kNorm},
    {"_softmax_backward_data", OpClass::kNorm},
    {"_to_copy", OpClass::kCopy},
    {"_transformer_encoder_layer_fwd", OpClass::kAttention},
    {"adam", OpClass::kOptimizer},
    {"adamw", OpClass::kOptimizer},
    {"adaptive_avg_pool2d", OpClass::kReduction},
    {"addmm", OpClass::kGemm},
    {"amax", OpClass::kReduction},
    {"attention", OpClass::kAttention},
    {"averagepool", OpClass::kReduction},
    {"avg_pool2d", OpClass::kReduction},
    {"avg_pool2d_backward", OpClass::kReduction},
    {"baddbmm", OpClass::kGemm},
    {"batchnormalization", OpClass::kNorm},
    {"bmm", OpClass::kGemm},
    {"cast", OpClass::kCopy},
    {"cat", OpClass::kCopy},
    {"clone", OpClass::kCopy},
    {"concat", OpClass::kCopy},
    {"constant_pad_nd", OpClass::kCopy},
    {"conv", OpClass::kConv},
    {"convolution", OpClass::kConv},
    {"convolution_backward", OpClass::kConv},
    {"convtranspose", OpClass::kConv},
    {"copy", OpClass::kCopy},
    {"copy_", OpClass::kCopy},
    {"embedding", OpClass::kCopy},
    {"embedding_dense_backward", OpClass::kCopy},
    {"expand", OpClass::kCopy},
    {"gather", OpClass::kCopy},
    {"gemm", OpClass::kGemm},
    {"globalaveragepool", OpClass::kReduction},
    {"globalmaxpool", OpClass::kReduction},
    {"groupnormalization", OpClass::kNorm},
    {"index", OpClass::kCopy},
    {"index_select", OpClass::kCopy},
    {"instancenormalization", OpClass::kNorm},
    {"layernormalization", OpClass::kNorm},
    {"linear", OpClass::kGemm},
    {"logsoftmax", OpClass::kNorm},
    {"matmul", OpClass::kGemm},
    {"matmulinteger", OpClass::kGemm},
    {"max", OpClass::kReduction},
    {"max_pool2d_with_indices", OpClass::kReduction},
    {"max_pool2d_with_indices_backward", OpClass::kReduction},
    {"maxpool", OpClass::kReduction},
    {"mean", OpClass::kReduction},
    {"mm", OpClass::kGemm},
    {"multiheadattention", OpClass::kAttention},
    {"native_batch_norm", OpClass::kNorm},
    {"native_batch_norm_backward", OpClass::kNorm},
    {"native_group_norm", OpClass::kNorm},
    {"native_group_norm_backward", OpClass::kNorm},
    {"native_layer_norm", OpClass::kNorm},
    {"native_layer_norm_backward", OpClass::kNorm},
    {"new_empty", OpClass::kSync},
    {"nll_loss_backward", OpClass::kReduction},
    {"nll_loss_forward", OpClass::kReduction},
    {"pad", OpClass::kCopy},
    {"reducemax", OpClass::kReduction},
    {"reducemean", OpClass::kReduction},
    {"reducesum", OpClass::kReduction},
    {"scaled_dot_product_attention", OpClass::kAttention},
    {"select_backward", OpClass::kCopy},
    {"sgd", OpClass::kOptimizer},
    {"slice_backward", OpClass::kCopy},
    {"softmax", OpClass::kNorm},
    {"sum", OpClass::kReduction},
    {"sync", OpClass::kSync},
    {"tile", OpClass::kCopy},
    {"transpose", OpClass::kCopy},
    {"var_mean", OpClass::kReduction},
    {"where", OpClass::kElementwise},
    {"zeros_like", OpClass::kCopy},
}};

constexpr bool Sorted() {
  for (std::size_t i = 1; i < kOps.size(); ++i) {
    if (!(kOps[i - 1].first < kOps[i].first)) return false;
  }
  return true;
}
static_assert(Sorted(), "kOps must stay sorted for the binary search");

bool IsFloating(const std::string& dtype) {
  return dtype.find("float") != std::string::npos || dtype == "double" || dtype == "half" ||
         dtype.find("bf16") != std::string::npos || dtype.find("fp") == 0;
}

// Whether a step carries what the model estimates from; others keep the time they were given.
bool HasCostInputs(const schedule::Step& st) { return st.flops() > 0 || st.bytes_touched() > 0; }

}  // namespace

OpClass ClassifyOp(std::string_view op_type) {
  const std::string key = Lower(op_type);
  auto it = std::lower_bound(kOps.begin(), kOps.end(), key,
                             [](const auto& e, const std::string& k) { return e.first < k; });
  if (it != kOps.end() && it->first == key) return it->second;
  return OpClass::kElementwise;  // the long tail of aten/ONNX ops: pointwise, memory-bound
}

MathMode MathModeOf(std::string_view dtype, OpClass c, const DeviceProfile& d) {
  const std::string t = Lower(dtype);
  if (t.find("float8") != std::string::npos || t.find("fp8") != std::string::npos) {
    return MathMode::kFp8;
  }
  if (t.find("bfloat16") != std::string::npos || t.find("float16") != std::string::npos ||
      t == "half" || t == "bf16" || t == "fp16") {
    return MathMode::kBf16;
  }
  if (t == "float64" || t == "double") return MathMode::kFp64;
  if ((c == OpClass::kConv && d.fp32_conv_uses_tf32) ||
      ((c == OpClass::kGemm || c == OpClass::kAttention) && d.fp32_matmul_uses_tf32)) {
    return MathMode::kTf32;
  }
  return MathMode::kFp32;
}

StepTime EstimateStep(const DeviceProfile& d, StepKind kind, double flops, std::uint64_t bytes) {
  const OpClassCost& c = d.op(kind.op_class);
  StepTime t;
  if (flops > 0) {
    const double rate = d.peak(kind.math) * 1e12 * c.compute_efficiency *
                        d.math_efficiency[static_cast<std::size_t>(kind.math)];
    t.compute_us = flops / rate * 1e6;
  }
  if (bytes > 0) {
    t.memory_us = static_cast<double>(bytes) / (d.hbm_gbps * 1e9 * c.memory_efficiency) * 1e6;
  }
  t.launch_us = c.launches * d.launch_us;
  t.dispatch_us = c.launches * d.dispatch_us;
  t.total_us = std::max(t.device_us(), t.dispatch_us);
  return t;
}

std::vector<StepKind> StepKinds(const schedule::Schedule& s, const DeviceProfile& d) {
  const auto steps = static_cast<std::uint32_t>(s.steps_size());
  // The largest floating-point tensor each step reads, and the largest it defines.
  std::vector<std::pair<std::uint64_t, int>> read(steps, {0, -1}), made(steps, {0, -1});
  for (int i = 0; i < s.tensors_size(); ++i) {
    const auto& t = s.tensors(i);
    if (!IsFloating(Lower(t.dtype()))) continue;
    auto consider = [&](std::vector<std::pair<std::uint64_t, int>>& v, std::uint32_t st) {
      if (st < steps && t.size_bytes() > v[st].first) v[st] = {t.size_bytes(), i};
    };
    for (auto u : t.use_steps()) consider(read, u);
    if (t.def_step() >= 0) consider(made, static_cast<std::uint32_t>(t.def_step()));
  }
  std::vector<StepKind> kinds(steps);
  for (std::uint32_t i = 0; i < steps; ++i) {
    kinds[i].op_class = ClassifyOp(s.steps(static_cast<int>(i)).op_type());
    int t = read[i].second >= 0 ? read[i].second : made[i].second;
    if (t >= 0) kinds[i].math = MathModeOf(s.tensors(t).dtype(), kinds[i].op_class, d);
  }
  return kinds;
}

void ApplyCostModel(const DeviceProfile& d, schedule::Schedule* s) {
  const auto kinds = StepKinds(*s, d);
  for (int i = 0; i < s->steps_size(); ++i) {
    auto* st = s->mutable_steps(i);
    // Measured steps, and steps that carry no cost inputs, keep the time they were given.
    if (st->measured() || !HasCostInputs(*st)) continue;
    st->set_compute_us(EstimateStep(d, kinds[i], st->flops(), st->bytes_touched()).total_us);
  }
  s->set_device(d.name);
}

std::array<ClassCost, kOpClasses> CostByClass(const DeviceProfile& d, const schedule::Schedule& s) {
  std::array<ClassCost, kOpClasses> r{};
  const auto kinds = StepKinds(s, d);
  for (int i = 0; i < s.steps_size(); ++i) {
    const auto& st = s.steps(i);
    if (!HasCostInputs(st)) continue;
    const StepTime t = EstimateStep(d, kinds[i], st.flops(), st.bytes_touched());
    auto& c = r[static_cast<std::size_t>(kinds[i].op_class)];
    c.steps++;
    c.flops += st.flops();
    c.bytes += st.bytes_touched();
    c.total_us += t.total_us;
    if (t.compute_us > t.memory_us) c.compute_bound++;
    if (t.dispatch_bound()) c.dispatch_bound++;
  }
  return r;
}

// Fewer measured steps of a kind than this leave the base's efficiency for it: a handful of
// small kernels (ResNet-50's three GEMMs) says more about their fixed cost than about the class,
// and a profile fitted to them misjudges the large ones of another model (+226% on ViT-B/16).
constexpr std::uint32_t kMinFitSteps = 8;

ProfileFit FitProfile(const DeviceProfile& base, const schedule::Schedule& s, double dispatch_us) {
  ProfileFit fit;
  fit.profile = base;
  if (dispatch_us > 0) fit.profile.dispatch_us = dispatch_us;
  // Per class: the time the measured steps would take at efficiency 1, and what they took.
  struct Sums {
    double ideal_compute = 0, actual_compute = 0, ideal_memory = 0, actual_memory = 0;
    std::uint32_t compute_steps = 0, memory_steps = 0;
  };
  std::array<Sums, kOpClasses> sums{};
  const auto kinds = StepKinds(s, base);
  for (int i = 0; i < s.steps_size(); ++i) {
    const auto& st = s.steps(i);
    if (!st.measured() || !HasCostInputs(st)) continue;
    const auto c = static_cast<std::size_t>(kinds[i].op_class);
    const StepTime modeled = EstimateStep(base, kinds[i], st.flops(), st.bytes_touched());
    auto& row = fit.by_class[c];
    row.steps++;
    row.modeled_us += modeled.total_us;
    row.measured_us += st.compute_us();
    // What the kernels themselves took, without their fixed cost.
    const double busy = std::max(st.compute_us() - modeled.launch_us, 0.05 * st.compute_us());
    if (modeled.compute_us > modeled.memory_us) {
      sums[c].ideal_compute += modeled.compute_us * base.op(kinds[i].op_class).compute_efficiency;
      sums[c].actual_compute += busy;
      ++sums[c].compute_steps;
    } else {
      sums[c].ideal_memory += modeled.memory_us * base.op(kinds[i].op_class).memory_efficiency;
      sums[c].actual_memory += busy;
      ++sums[c].memory_steps;
    }
  }
  for (std::size_t c = 0; c < kOpClasses; ++c) {
    auto clamp = [](double v) { return std::min(1.0, std::max(0.01, v)); };
    auto& o = fit.profile.ops[c];
    if (sums[c].compute_steps >= kMinFitSteps && sums[c].actual_compute > 0 &&
        sums[c].ideal_compute > 0) {
      o.compute_efficiency = clamp(sums[c].ideal_compute / sums[c].actual_compute);
    }
    if (sums[c].memory_steps >= kMinFitSteps && sums[c].actual_memory > 0 &&
        sums[c].ideal_memory > 0) {
      o.memory_efficiency = clamp(sums[c].ideal_memory / sums[c].actual_memory);
    }
  }
  // The calibrated profile's estimate of the same steps, to show how close the fit comes.
  for (int i = 0; i < s.steps_size(); ++i) {
    const auto& st = s.steps(i);
    if (!st.measured() || !HasCostInputs(st)) continue;
    fit.by_class[static_cast<std::size_t>(kinds[i].op_class)].calibrated_us +=
        EstimateStep(fit.profile, kinds[i], st.flops(), st.bytes_touched()).total_us;
  }
  return fit;
}

}  // namespace tierpool::prefetch
