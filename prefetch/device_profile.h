// Device profiles: how fast a device computes and moves data, for the cost model
// (prefetch/cost_model.h), the planner and the replay simulator. Built-in profiles, or a JSON file
// (docs/schedules.md lists every field). A profile is plain data: no locking, copy freely.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace tierpool::prefetch {

// What kind of kernel a step runs; each class reaches its own share of the device's peaks.
enum class OpClass : std::uint8_t {
  kGemm,         // matrix multiplies (mm, addmm, bmm, MatMul, Gemm)
  kGemv,         // matrix multiplies with a side of a few rows (IsMatrixVectorLike): decode's
                 // reads of weights and KV cache, which stream at a share of the bandwidth
                 // that large multiplies do not reach
  kConv,         // convolutions and their backward
  kAttention,    // fused attention
  kNorm,         // batch/layer/group norm and softmax, forward and backward
  kElementwise,  // activations, arithmetic, their backward, and every op not recognised
  kReduction,    // sums, means, pooling, losses
  kOptimizer,    // an optimizer's update of one parameter
  kCopy,         // casts, clones, concatenation, gathers, padding
  kSync,         // a point in the step order that runs no kernel
};
inline constexpr std::size_t kOpClasses = 10;
std::string_view OpClassName(OpClass c);

// The arithmetic a step's FLOPs run in; each has its own peak.
enum class MathMode : std::uint8_t { kFp32, kTf32, kBf16, kFp8, kFp64 };
inline constexpr std::size_t kMathModes = 5;
std::string_view MathModeName(MathMode m);

struct OpClassCost {
  double compute_efficiency = 0.6;  // share of the math mode's peak its kernels reach
  double memory_efficiency = 0.8;   // share of hbm_gbps its kernels reach
  double launches = 1;              // kernels' fixed device costs (launch_us) one step pays
  // Kernels the host issues per step (dispatch_us each): fewer than `launches` where one call
  // serves many steps, as a multi-tensor optimizer update serves every parameter.
  double dispatches = 1;
};

struct DeviceProfile {
  std::string name;
  // Dense peaks in TFLOP/s by math mode, from the data sheet (0: the device has no such unit;
  // FP8 then runs at the 16-bit rate, FP64 at the FP32 rate).
  std::array<double, kMathModes> peak_tflops{};
  // A factor on every op class's compute efficiency in this math mode: TF32 kernels reach a
  // smaller share of their peak than 16-bit ones (docs/cost-model.md: fitted on the one
  // published TF32 figure; no other was at hand to check it).
  std::array<double, kMathModes> math_efficiency{1, 0.5, 1, 1, 1};
  // PyTorch's defaults on tensor-core GPUs: fp32 convolutions run in TF32 (cuDNN's
  // allow_tf32), fp32 matrix multiplies in full FP32 (matmul.allow_tf32 is off since 1.12).
  bool fp32_conv_uses_tf32 = true;
  bool fp32_matmul_uses_tf32 = false;
  double hbm_gbps = 0;         // device memory bandwidth
  double h2d_gbps = 0;         // host (pooled memory) -> hbm link, one direction
  double d2h_gbps = 0;         // hbm -> host
  double link_latency_us = 0;  // fixed cost of each transfer
  double launch_us = 2;        // device-side fixed cost of each kernel (ramp-up, tail)
  double dispatch_us = 5;      // host time to issue one kernel in eager mode; 0 under CUDA graphs
  std::array<OpClassCost, kOpClasses> ops = DefaultOpCosts();

  static std::array<OpClassCost, kOpClasses> DefaultOpCosts();
  double peak(MathMode m) const;
  OpClassCost& op(OpClass c) { return ops[static_cast<std::size_t>(c)]; }
  const OpClassCost& op(OpClass c) const { return ops[static_cast<std::size_t>(c)]; }
  Status validate() const;
  // Time of one transfer of `bytes` over the link into hbm, and out of it, latency included.
  double InUs(std::uint64_t bytes) const {
    return link_latency_us + static_cast<double>(bytes) / (h2d_gbps * 1e3);
  }
  double OutUs(std::uint64_t bytes) const {
    return link_latency_us + static_cast<double>(bytes) / (d2h_gbps * 1e3);
  }
};

// h100 (SXM, PCIe host link ~55 GB/s each way), gh200 (NVLink-C2C, ~450 GB/s each way), a100
// (SXM 80 GB), rtx3090 (the consumer card published benchmarks often use).
Result<DeviceProfile> BuiltinProfile(const std::string& name);
std::vector<std::string> BuiltinProfileNames();
// NAME of a built-in profile, or a path to a JSON file (fields as ProfileToJson writes them;
// "base": NAME starts from a built-in and overrides what the file gives).
Result<DeviceProfile> LoadProfile(const std::string& name_or_path);
Result<DeviceProfile> ParseProfileJson(const std::string& text, const std::string& origin);
std::string ProfileToJson(const DeviceProfile& d);

}  // namespace tierpool::prefetch
