#include "prefetch/device_profile.h"

#include <cmath>
#include <nlohmann/json.hpp>

#include "common/posix.h"
namespace tierpool::prefetch {

namespace {

constexpr std::array<std::string_view, kOpClasses> kOpClassNames = {
    "gemm",        "gemv",      "conv",      "attention", "norm",
    "elementwise", "reduction", "optimizer", "copy",      "sync"};
constexpr std::array<std::string_view, kMathModes> kMathModeNames = {"fp32", "tf32", "bf16", "fp8",
                                                                     "fp64"};

// Each key of a JSON object `field` that names one of `names`, with its value; the first key that
// names none is an error naming the field.
template <std::size_t N, typename Fn>
Status ForEachNamed(const nlohmann::json& field, const std::array<std::string_view, N>& names,
                    const std::string& what, const std::string& origin, Fn&& fn) {
  for (const auto& [k, v] : field.items()) {
    std::size_t i = 0;
    while (i < N && names[i] != k) ++i;
    if (i == N) {
      return Status::InvalidArgument("device profile " + origin + ": unknown " + what + " '" + k +
                                     "'");
    }
    fn(i, v);
  }
  return Status::Ok();
}

// An H100 as eager PyTorch 2.11 drives it at batch 32 (bf16, NCHW, cuDNN heuristics, the
// multi-tensor Adam), fitted to the kernels and whole steps measured on one H100 SXM
// (docs/cost-model.md, "Measured on an H100"; docs/data/calibration-h100/, fitted with
// scripts/fit-profile-across.py). Where it differs from the shared defaults: bf16 convolutions
// in NCHW reach an eighth of the peak, norms a quarter of the bandwidth; TF32 convolutions lose
// nothing against bf16 ones; Adam's update of every parameter is a few multi-tensor kernels,
// not four per parameter. The host's time per op is the elementwise op's (dispatch_us) times
// its class's `dispatches`, the ratios eager PyTorch 2.11's ops took on an H200's host
// (scripts/host-costs-from-eager.py --own-time-only): a convolution or an attention call six to
// seven elementwise ops, a GEMM or a norm three to four. dispatch_us is then fitted to the five
// models' eager steps and Llama 3 8B's eager decode.
void SetHopperEager(DeviceProfile* d) {
  d->math_efficiency[static_cast<std::size_t>(MathMode::kTf32)] = 1.0;
  d->dispatch_us = 15.5;
  d->op(OpClass::kGemm) = {0.69, 0.39, 1, 3.0};
  // Llama 3 8B's decode at 4K on an H100: 15.0 GB of weights in 6.15 ms of GEMV kernels (225
  // of them, their fixed 2 us each taken off) (docs/cost-model.md).
  d->op(OpClass::kGemv) = {0.69, 0.79, 1, 2.9};
  d->op(OpClass::kConv) = {0.13, 0.44, 1, 6.1};
  d->op(OpClass::kAttention) = {0.25, 0.30, 1, 7.0};
  d->op(OpClass::kNorm) = {0.50, 0.24, 1, 3.8};
  d->op(OpClass::kElementwise) = {0.50, 0.86, 1, 1};
  d->op(OpClass::kReduction) = {0.50, 0.32, 1, 1.65};
  d->op(OpClass::kOptimizer) = {0.50, 0.21, 1, 0.84};
  d->op(OpClass::kCopy) = {0.50, 0.53, 1, 1.73};
}

}  // namespace

std::string_view OpClassName(OpClass c) { return kOpClassNames[static_cast<std::size_t>(c)]; }
std::string_view MathModeName(MathMode m) { return kMathModeNames[static_cast<std::size_t>(m)]; }

// Shares of the peaks that eager PyTorch's kernels (cuBLAS, cuDNN, ATen's elementwise and
// reduction kernels) reach on large shapes; docs/cost-model.md says where each comes from and
// how well the whole matches published throughput.
std::array<OpClassCost, kOpClasses> DeviceProfile::DefaultOpCosts() {
  std::array<OpClassCost, kOpClasses> c{};
  c[static_cast<std::size_t>(OpClass::kGemm)] = {0.70, 0.80, 1, 1};
  c[static_cast<std::size_t>(OpClass::kGemv)] = {0.70, 0.80, 1, 1};
  c[static_cast<std::size_t>(OpClass::kConv)] = {0.55, 0.70, 1, 1};
  c[static_cast<std::size_t>(OpClass::kAttention)] = {0.45, 0.70, 1, 1};
  c[static_cast<std::size_t>(OpClass::kNorm)] = {0.50, 0.55, 1, 1};
  c[static_cast<std::size_t>(OpClass::kElementwise)] = {0.50, 0.80, 1, 1};
  c[static_cast<std::size_t>(OpClass::kReduction)] = {0.50, 0.70, 1, 1};
  c[static_cast<std::size_t>(OpClass::kOptimizer)] = {0.50, 0.60, 4, 4};
  c[static_cast<std::size_t>(OpClass::kCopy)] = {0.50, 0.75, 1, 1};
  c[static_cast<std::size_t>(OpClass::kSync)] = {1.0, 1.0, 0, 0};
  return c;
}

double DeviceProfile::peak(MathMode m) const {
  double p = peak_tflops[static_cast<std::size_t>(m)];
  if (p > 0) return p;
  switch (m) {
    case MathMode::kFp8:
      return peak(MathMode::kBf16);
    case MathMode::kTf32:
    case MathMode::kFp64:
      return peak(MathMode::kFp32);
    case MathMode::kBf16:
      return peak(MathMode::kFp32);
    case MathMode::kFp32:
      return 0;
  }
  return 0;
}

Status DeviceProfile::validate() const {
  auto positive = [](double v) { return std::isfinite(v) && v > 0 && v < 1e9; };
  auto bad = [&](const std::string& what) {
    return Status::InvalidArgument("device profile '" + name + "': " + what);
  };
  if (!positive(peak_tflops[static_cast<std::size_t>(MathMode::kFp32)])) {
    return bad("fp32 peak (peak_tflops.fp32) must be > 0");
  }
  for (std::size_t m = 0; m < kMathModes; ++m) {
    if (!(peak_tflops[m] >= 0 && peak_tflops[m] < 1e9)) {
      return bad("peak_tflops." + std::string(kMathModeNames[m]) + " must be >= 0");
    }
    if (!(math_efficiency[m] > 0 && math_efficiency[m] <= 1)) {
      return bad("math_efficiency." + std::string(kMathModeNames[m]) + " must be in (0, 1]");
    }
  }
  if (!positive(hbm_gbps) || !positive(h2d_gbps) || !positive(d2h_gbps)) {
    return bad("hbm_gbps, h2d_gbps and d2h_gbps must be > 0");
  }
  for (double v : {link_latency_us, launch_us, dispatch_us}) {
    if (!(v >= 0 && v < 1e6)) return bad("latencies must be in [0, 1e6) us");
  }
  for (std::size_t c = 0; c < kOpClasses; ++c) {
    const auto& o = ops[c];
    const std::string cls(kOpClassNames[c]);
    if (!(o.compute_efficiency > 0 && o.compute_efficiency <= 1) ||
        !(o.memory_efficiency > 0 && o.memory_efficiency <= 1)) {
      return bad("ops." + cls + ": efficiencies must be in (0, 1]");
    }
    if (!(o.launches >= 0 && o.launches <= 1000) || !(o.dispatches >= 0 && o.dispatches <= 1000))
      return bad("ops." + cls + ": launches and dispatches in [0, 1000]");
  }
  return Status::Ok();
}

std::vector<std::string> BuiltinProfileNames() { return {"h100", "gh200", "a100", "rtx3090"}; }

Result<DeviceProfile> BuiltinProfile(const std::string& name) {
  // Dense (not sparse) peaks from the vendors' data sheets, in the order fp32, tf32, bf16/fp16,
  // fp8, fp64; host links as measured in practice.
  DeviceProfile d;
  d.name = name;
  if (name == "h100" || name == "gh200") {
    d.peak_tflops = {67, 494.7, 989.4, 1978.9, 67};  // H100 SXM5
    d.hbm_gbps = name == "h100" ? 3350 : 4000;
    d.h2d_gbps = d.d2h_gbps = name == "h100" ? 55 : 450;
    d.link_latency_us = name == "h100" ? 10 : 5;
    SetHopperEager(&d);  // GH200's GPU is an H100
  } else if (name == "a100") {
    d.peak_tflops = {19.5, 156, 312, 0, 19.5};  // A100 SXM4 80 GB
    d.hbm_gbps = 2039;
    d.h2d_gbps = d.d2h_gbps = 25;
    d.link_latency_us = 10;
  } else if (name == "rtx3090") {
    // GA102 whitepaper: FP16 tensor with FP32 accumulate (what PyTorch uses) is 71 dense;
    // GeForce TF32 tensor throughput equals its FP32 rate.
    d.peak_tflops = {35.6, 35.6, 71, 0, 0.56};
    d.hbm_gbps = 936;
    d.h2d_gbps = d.d2h_gbps = 25;
    d.link_latency_us = 10;
  } else {
    return Status::NotFound("no built-in device profile '" + name +
                            "' (h100, gh200, a100, rtx3090)");
  }
  return d;
}

std::string ProfileToJson(const DeviceProfile& d) {
  nlohmann::json peaks = nlohmann::json::object(), ops = nlohmann::json::object(),
                 math = nlohmann::json::object();
  for (std::size_t m = 0; m < kMathModes; ++m) {
    peaks[std::string(kMathModeNames[m])] = d.peak_tflops[m];
    math[std::string(kMathModeNames[m])] = d.math_efficiency[m];
  }
  for (std::size_t c = 0; c < kOpClasses; ++c) {
    ops[std::string(kOpClassNames[c])] = {{"compute_efficiency", d.ops[c].compute_efficiency},
                                          {"memory_efficiency", d.ops[c].memory_efficiency},
                                          {"launches", d.ops[c].launches},
                                          {"dispatches", d.ops[c].dispatches}};
  }
  return nlohmann::json{{"name", d.name},
                        {"peak_tflops", peaks},
                        {"math_efficiency", math},
                        {"fp32_conv_uses_tf32", d.fp32_conv_uses_tf32},
                        {"fp32_matmul_uses_tf32", d.fp32_matmul_uses_tf32},
                        {"hbm_gbps", d.hbm_gbps},
                        {"h2d_gbps", d.h2d_gbps},
                        {"d2h_gbps", d.d2h_gbps},
                        {"link_latency_us", d.link_latency_us},
                        {"launch_us", d.launch_us},
                        {"dispatch_us", d.dispatch_us},
                        {"ops", ops}}
             .dump(2) +
         "\n";
}

Result<DeviceProfile> ParseProfileJson(const std::string& text, const std::string& origin) {
  DeviceProfile d;
  try {
    auto j = nlohmann::json::parse(text);
    if (!j.is_object())
      return Status::InvalidArgument("device profile " + origin + ": not an object");
    if (j.contains("base")) {
      auto base = BuiltinProfile(j.at("base").get<std::string>());
      if (!base.ok()) return base.status();
      d = *base;
    }
    d.name = j.value("name", d.name.empty() ? origin : d.name);
    const auto& peaks = j.contains("peak_tflops") ? j.at("peak_tflops") : nlohmann::json();
    if (peaks.is_number()) {
      // Format 1: one 16-bit peak and one efficiency for everything.
      d.peak_tflops[static_cast<std::size_t>(MathMode::kBf16)] = peaks.get<double>();
      if (d.peak_tflops[0] == 0) d.peak_tflops[0] = peaks.get<double>() / 16;
      if (j.contains("efficiency")) {
        for (auto c : {OpClass::kGemm, OpClass::kConv, OpClass::kAttention}) {
          d.op(c).compute_efficiency = j.at("efficiency").get<double>();
        }
      }
    } else if (peaks.is_object()) {
      TIERPOOL_RETURN_IF_ERROR(ForEachNamed(
          peaks, kMathModeNames, "math mode in peak_tflops", origin,
          [&](std::size_t m, const nlohmann::json& v) { d.peak_tflops[m] = v.get<double>(); }));
    } else if (!peaks.is_null()) {
      return Status::InvalidArgument("device profile " + origin +
                                     ": peak_tflops is a number or an object");
    }
    if (j.contains("math_efficiency")) {
      TIERPOOL_RETURN_IF_ERROR(ForEachNamed(
          j.at("math_efficiency"), kMathModeNames, "math mode in math_efficiency", origin,
          [&](std::size_t m, const nlohmann::json& v) { d.math_efficiency[m] = v.get<double>(); }));
    }
    d.fp32_conv_uses_tf32 = j.value("fp32_conv_uses_tf32", d.fp32_conv_uses_tf32);
    d.fp32_matmul_uses_tf32 = j.value("fp32_matmul_uses_tf32", d.fp32_matmul_uses_tf32);
    d.hbm_gbps = j.value("hbm_gbps", d.hbm_gbps);
    d.h2d_gbps = j.value("h2d_gbps", d.h2d_gbps);
    d.d2h_gbps = j.value("d2h_gbps", d.d2h_gbps > 0 ? d.d2h_gbps : d.h2d_gbps);
    d.link_latency_us = j.value("link_latency_us", d.link_latency_us);
    d.launch_us = j.value("launch_us", j.value("min_op_us", d.launch_us));
    d.dispatch_us = j.value("dispatch_us", d.dispatch_us);
    if (j.contains("ops")) {
      TIERPOOL_RETURN_IF_ERROR(ForEachNamed(
          j.at("ops"), kOpClassNames, "op class in ops", origin,
          [&](std::size_t c, const nlohmann::json& v) {
            d.ops[c].compute_efficiency =
                v.value("compute_efficiency", d.ops[c].compute_efficiency);
            d.ops[c].memory_efficiency = v.value("memory_efficiency", d.ops[c].memory_efficiency);
            d.ops[c].launches = v.value("launches", d.ops[c].launches);
            // A file that says how many kernels a step runs means the host issues as many,
            // unless it says otherwise.
            d.ops[c].dispatches = v.value(
                "dispatches", v.contains("launches") ? d.ops[c].launches : d.ops[c].dispatches);
          }));
    }
  } catch (const std::exception& e) {
    return Status::InvalidArgument("device profile " + origin + ": " + e.what());
  }
  TIERPOOL_RETURN_IF_ERROR(d.validate());
  return d;
}

Result<DeviceProfile> LoadProfile(const std::string& name_or_path) {
  if (name_or_path.find('/') == std::string::npos &&
      name_or_path.find(".json") == std::string::npos) {
    return BuiltinProfile(name_or_path);
  }
  auto text = ReadFileUpTo(name_or_path, 1u << 20);
  if (!text.ok()) {
    return Status(text.status().code(), "device profile: " + text.status().message());
  }
  return ParseProfileJson(*text, name_or_path);
}

}  // namespace tierpool::prefetch
