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
// Softmax is elementwise here, not a norm: a row of up to a few thousand values stays on chip,
// so its bytes pass once (an H100 ran fp32 softmax over 8x12x512x512 at 2.5 TB/s, three times
// the norm class's share of bandwidth, which batch and layer norm's extra passes set).
constexpr std::array<std::pair<std::string_view, OpClass>, 98> kOps = {{
    {"_adaptive_avg_pool2d", OpClass::kReduction},
    {"_adaptive_avg_pool2d_backward", OpClass::kReduction},
    {"_fused_adam", OpClass::kOptimizer},
    {"_fused_adamw", OpClass::kOptimizer},
    {"_log_softmax", OpClass::kElementwise},
    {"_log_softmax_backward_data", OpClass::kElementwise},
    {"_native_batch_norm_legit", OpClass::kNorm},
    {"_native_batch_norm_legit_functional", OpClass::kNorm},
    {"_native_batch_norm_legit_no_training", OpClass::kElementwise},
    {"_native_multi_head_attention", OpClass::kAttention},
    {"_scaled_dot_product_attention", OpClass::kAttention},
    {"_scaled_dot_product_cudnn_attention", OpClass::kAttention},
    {"_scaled_dot_product_cudnn_attention_backward", OpClass::kAttention},
    {"_scaled_dot_product_efficient_attention", OpClass::kAttention},
    {"_scaled_dot_product_efficient_attention_backward", OpClass::kAttention},
    {"_scaled_dot_product_flash_attention", OpClass::kAttention},
    {"_scaled_dot_product_flash_attention_backward", OpClass::kAttention},
    {"_scaled_dot_product_flash_attention_for_cpu", OpClass::kAttention},
    {"_scaled_dot_product_flash_attention_for_cpu_backward", OpClass::kAttention},
    {"_softmax", OpClass::kElementwise},
    {"_softmax_backward_data", OpClass::kElementwise},
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
    {"cudnn_batch_norm", OpClass::kNorm},
    {"cudnn_batch_norm_backward", OpClass::kNorm},
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
    {"logsoftmax", OpClass::kElementwise},
    {"matmul", OpClass::kGemm},
    {"matmulinteger", OpClass::kGemm},
    {"max", OpClass::kReduction},
    {"max_pool2d_with_indices", OpClass::kReduction},
    {"max_pool2d_with_indices_backward", OpClass::kReduction},
    {"maxpool", OpClass::kReduction},
    {"mean", OpClass::kReduction},
    {"miopen_batch_norm", OpClass::kNorm},
    {"miopen_batch_norm_backward", OpClass::kNorm},
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
    {"softmax", OpClass::kElementwise},
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

// Charged a kernel and an eager op's dispatch each, ResNet-18's 16 Identity nodes cost 0.6 of
// its 3.0 ms.
constexpr std::array<std::string_view, 8> kNoKernelOps = {
    "constant", "flatten", "identity", "reshape", "shape", "size", "squeeze", "unsqueeze"};

// Bytes of one element of a math mode's operands (TF32 reads fp32).
double ElementBytes(MathMode m) {
  switch (m) {
    case MathMode::kBf16:
      return 2;
    case MathMode::kFp8:
      return 1;
    case MathMode::kFp64:
      return 8;
    case MathMode::kFp32:
    case MathMode::kTf32:
      break;
  }
  return 4;
}

// What a measured step's kernels took: kernel_us once ApplyCostModel has split it off.
double KernelUs(const schedule::Step& st) {
  return st.kernel_us() > 0 ? st.kernel_us() : st.compute_us();
}

}  // namespace

std::optional<OpClass> HostClassOf(std::string_view op_type) {
  if (Lower(op_type) == "_native_batch_norm_legit_no_training") return OpClass::kNorm;
  return std::nullopt;
}

bool RunsNoKernel(const schedule::Step& st) {
  if (st.measured()) return false;
  const std::string key = Lower(st.op_type());
  return std::find(kNoKernelOps.begin(), kNoKernelOps.end(), key) != kNoKernelOps.end();
}

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
      ((c == OpClass::kGemm || c == OpClass::kGemv || c == OpClass::kAttention) &&
       d.fp32_matmul_uses_tf32)) {
    return MathMode::kTf32;
  }
  return MathMode::kFp32;
}

bool IsMatrixVectorLike(double flops, std::uint64_t bytes, double element_bytes,
                        std::uint64_t largest_operand) {
  const auto b = static_cast<double>(bytes);
  return flops > 0 && bytes > 0 && flops * element_bytes <= 32.0 * b &&
         static_cast<double>(largest_operand) >= 0.75 * b;
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
  t.dispatch_us = d.op(kind.host()).dispatches * d.dispatch_us;
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
    const auto& st = s.steps(static_cast<int>(i));
    kinds[i].op_class = ClassifyOp(st.op_type());
    kinds[i].host_class = HostClassOf(st.op_type());
    int t = read[i].second >= 0 ? read[i].second : made[i].second;
    if (t >= 0) kinds[i].math = MathModeOf(s.tensors(t).dtype(), kinds[i].op_class, d);
    if (kinds[i].op_class == OpClass::kGemm &&
        IsMatrixVectorLike(st.flops(), st.bytes_touched(), ElementBytes(kinds[i].math),
                           read[i].first)) {
      kinds[i].op_class = OpClass::kGemv;
    }
  }
  return kinds;
}

namespace {

// What composing needs of a step: its kernels' time and the host's time to issue them. Apart
// from the composition so that a search over dispatch times (FitDispatch) estimates each step once.
struct StepWork {
  double device_us = 0;
  double issues = 0;  // kernels the host issues for it (each dispatch_us)
};

std::vector<StepWork> WorkOf(const DeviceProfile& d, const schedule::Schedule& s,
                             const std::vector<StepKind>& kinds) {
  std::vector<StepWork> work(static_cast<std::size_t>(s.steps_size()));
  for (int i = 0; i < s.steps_size(); ++i) {
    const auto& st = s.steps(i);
    auto& w = work[static_cast<std::size_t>(i)];
    if (st.measured()) {
      w = {KernelUs(st), d.op(kinds[i].host()).dispatches};
    } else if (RunsNoKernel(st)) {
      w = {0, 0};
    } else if (HasCostInputs(st)) {
      w = {EstimateStep(d, kinds[i], st.flops(), st.bytes_touched()).device_us(),
           d.op(kinds[i].host()).dispatches};
    } else {
      w = {st.compute_us(), 0};  // a time given by hand
    }
  }
  return work;
}

std::vector<StepSpan> Compose(const std::vector<StepWork>& work, double dispatch_us) {
  std::vector<StepSpan> spans(work.size());
  double host = 0, device = 0;  // when each has issued / finished the steps so far
  for (std::size_t i = 0; i < work.size(); ++i) {
    host += work[i].issues * dispatch_us;
    const double wait = std::max(host - device, 0.0);  // for the host to issue it
    spans[i] = {work[i].device_us, wait + work[i].device_us};
    device += spans[i].wall_us;
  }
  return spans;
}

}  // namespace

std::vector<StepSpan> ComposeSteps(const DeviceProfile& d, const schedule::Schedule& s) {
  return Compose(WorkOf(d, s, StepKinds(s, d)), d.dispatch_us);
}

void ApplyCostModel(const DeviceProfile& d, schedule::Schedule* s) {
  const auto spans = ComposeSteps(d, *s);
  for (int i = 0; i < s->steps_size(); ++i) {
    auto* st = s->mutable_steps(i);
    if (st->measured()) {
      if (st->kernel_us() <= 0) st->set_kernel_us(st->compute_us());
    } else if (!HasCostInputs(*st)) {
      continue;  // a time given by hand
    }
    st->set_compute_us(spans[static_cast<std::size_t>(i)].wall_us);
  }
  s->set_device(d.name);
}

std::array<ClassCost, kOpClasses> CostByClass(const DeviceProfile& d, const schedule::Schedule& s) {
  std::array<ClassCost, kOpClasses> r{};
  const auto kinds = StepKinds(s, d);
  const auto spans = Compose(WorkOf(d, s, kinds), d.dispatch_us);
  for (int i = 0; i < s.steps_size(); ++i) {
    const auto& st = s.steps(i);
    if (!HasCostInputs(st) || RunsNoKernel(st)) continue;
    const StepTime t = EstimateStep(d, kinds[i], st.flops(), st.bytes_touched());
    const StepSpan& span = spans[static_cast<std::size_t>(i)];
    auto& c = r[static_cast<std::size_t>(kinds[i].op_class)];
    c.steps++;
    c.flops += st.flops();
    c.bytes += st.bytes_touched();
    c.total_us += span.wall_us;
    if (t.compute_us > t.memory_us) c.compute_bound++;
    if (span.waited()) c.dispatch_bound++;
  }
  return r;
}

namespace {

// Fewer measured steps of a kind than this leave the base's efficiency for it: a handful of
// small kernels (ResNet-50's three GEMMs) says more about their fixed cost than about the class,
// and a profile fitted to them misjudges the large ones of another model (+226% on ViT-B/16).
constexpr std::uint32_t kMinFitSteps = 8;

// One round of a fit: what the measured steps would take at every efficiency 1 ("ideal"), and
// what their kernels took, by class and math mode for compute-bound steps, by class for
// memory-bound ones.
struct FitSums {
  struct Part {
    double ideal = 0, actual = 0;
    std::uint32_t steps = 0;
    void Add(double i, double a) {
      ideal += i;
      actual += a;
      ++steps;
    }
  };
  std::array<std::array<Part, kMathModes>, kOpClasses> compute{};
  std::array<Part, kOpClasses> memory{};
};

double ClampEfficiency(double v) { return std::min(1.0, std::max(0.01, v)); }

// A class's compute efficiency comes from its steps in one math mode, the first of these with
// enough of them; TF32 and FP8 steps then fit those modes' factors (math_efficiency), so that
// ResNet-50's TF32 convolutions do not drag its bf16 ones' efficiency with them.
constexpr std::array<MathMode, 4> kReferenceModes = {MathMode::kBf16, MathMode::kFp32,
                                                     MathMode::kFp8, MathMode::kFp64};

void ApplyFit(const FitSums& sums, DeviceProfile* p) {
  std::array<int, kOpClasses> reference{};
  for (std::size_t c = 0; c < kOpClasses; ++c) {
    reference[c] = -1;
    for (MathMode m : kReferenceModes) {
      const auto& part = sums.compute[c][static_cast<std::size_t>(m)];
      if (part.steps < kMinFitSteps || part.actual <= 0 || part.ideal <= 0) continue;
      reference[c] = static_cast<int>(m);
      p->ops[c].compute_efficiency = ClampEfficiency(
          part.ideal / (part.actual * p->math_efficiency[static_cast<std::size_t>(m)]));
      break;
    }
    const auto& mem = sums.memory[c];
    if (mem.steps >= kMinFitSteps && mem.actual > 0 && mem.ideal > 0) {
      p->ops[c].memory_efficiency = ClampEfficiency(mem.ideal / mem.actual);
    }
  }
  for (MathMode m : {MathMode::kTf32, MathMode::kFp8}) {
    const auto mi = static_cast<std::size_t>(m);
    FitSums::Part all;
    for (std::size_t c = 0; c < kOpClasses; ++c) {
      const auto& part = sums.compute[c][mi];
      if (part.steps == 0 || reference[c] == static_cast<int>(m)) continue;
      all.ideal += part.ideal / p->ops[c].compute_efficiency;
      all.actual += part.actual;
      all.steps += part.steps;
    }
    if (all.steps >= kMinFitSteps && all.actual > 0 && all.ideal > 0) {
      p->math_efficiency[mi] = ClampEfficiency(all.ideal / all.actual);
    }
  }
}

}  // namespace

ProfileFit FitProfile(const DeviceProfile& base, const schedule::Schedule& s, double dispatch_us) {
  ProfileFit fit;
  fit.profile = base;
  if (dispatch_us > 0) fit.profile.dispatch_us = dispatch_us;
  const auto kinds = StepKinds(s, base);
  std::vector<int> fitted;  // the measured steps with FLOPs or bytes
  for (int i = 0; i < s.steps_size(); ++i) {
    const auto& st = s.steps(i);
    if (!st.measured() || !HasCostInputs(st)) continue;
    fitted.push_back(i);
    auto& row = fit.by_class[static_cast<std::size_t>(kinds[i].op_class)];
    row.steps++;
    row.modeled_us += EstimateStep(base, kinds[i], st.flops(), st.bytes_touched()).device_us();
    row.measured_us += KernelUs(st);
  }
  // Whether a step counts as compute- or memory-bound depends on the efficiencies being fitted:
  // fit, classify again under the result, and stop when no step changes sides. A fit made under
  // the base's sides alone left GEMMs the fit had made memory-bound 40% slower than measured.
  std::vector<char> compute_side(fitted.size(), 2);
  for (int round = 0; round < 10; ++round) {
    FitSums sums;
    bool changed = false;
    for (std::size_t k = 0; k < fitted.size(); ++k) {
      const int i = fitted[k];
      const auto& st = s.steps(i);
      const auto c = static_cast<std::size_t>(kinds[i].op_class);
      const auto m = static_cast<std::size_t>(kinds[i].math);
      const StepTime t = EstimateStep(fit.profile, kinds[i], st.flops(), st.bytes_touched());
      // What the kernels themselves took, without their fixed cost.
      const double busy = std::max(KernelUs(st) - t.launch_us, 0.05 * KernelUs(st));
      const char side = t.compute_us > t.memory_us ? 1 : 0;
      changed |= side != compute_side[k];
      compute_side[k] = side;
      if (side) {
        sums.compute[c][m].Add(
            t.compute_us * fit.profile.ops[c].compute_efficiency * fit.profile.math_efficiency[m],
            busy);
      } else {
        sums.memory[c].Add(t.memory_us * fit.profile.ops[c].memory_efficiency, busy);
      }
    }
    if (!changed) break;
    ApplyFit(sums, &fit.profile);
  }
  // The calibrated profile's estimate of the same steps, to show how close the fit comes.
  for (const int i : fitted) {
    const auto& st = s.steps(i);
    fit.by_class[static_cast<std::size_t>(kinds[i].op_class)].calibrated_us +=
        EstimateStep(fit.profile, kinds[i], st.flops(), st.bytes_touched()).device_us();
  }
  return fit;
}

double FitDispatch(const DeviceProfile& d, const schedule::Schedule& measured, double eager_us) {
  const auto work = WorkOf(d, measured, StepKinds(measured, d));
  auto iteration = [&](double dispatch_us) {
    double total = 0;
    for (const auto& span : Compose(work, dispatch_us)) total += span.wall_us;
    return total;
  };
  // The iteration grows with the dispatch time, so bisect.
  if (iteration(0) >= eager_us) return 0;
  double lo = 0, hi = 1;
  while (iteration(hi) < eager_us && hi < 1e6) hi *= 2;
  for (int i = 0; i < 50; ++i) {
    const double mid = (lo + hi) / 2;
    (iteration(mid) < eager_us ? lo : hi) = mid;
  }
  return (lo + hi) / 2;
}

}  // namespace tierpool::prefetch
