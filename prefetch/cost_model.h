// The cost model: how long each step of a schedule takes on a device. A step's FLOPs run at the
// peak of its math mode (from its dtype and op) times its op class's efficiency, its bytes at
// hbm_gbps times the class's memory efficiency (a roofline: the larger of the two), plus a fixed
// device cost per kernel; in eager mode the host must also issue the kernels, so a step never
// takes less than its kernels' dispatch time. docs/cost-model.md explains each term and shows
// the model against published throughput. Pure functions: no state, no locking.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <string_view>
#include <vector>

#include "prefetch/device_profile.h"
#include "proto/schedule.pb.h"

namespace tierpool::prefetch {

// The class of an aten op (torch 1.13 make_fx names: "convolution", "native_layer_norm", ...)
// or an ONNX op type ("Conv", "LayerNormalization", ...); kElementwise for names it does not
// know (the long tail of ops is pointwise and memory-bound).
OpClass ClassifyOp(std::string_view op_type);

// What a step computes with: its op's class and the dtype its arithmetic reads.
struct StepKind {
  OpClass op_class = OpClass::kElementwise;
  MathMode math = MathMode::kFp32;
};

// The math mode of a tensor dtype as the schedule names it (torch "bfloat16", ONNX "FLOAT16",
// ...), for an op of this class on this device (fp32 convolutions in TF32 where the profile
// says so). Integer and unknown dtypes count as fp32.
MathMode MathModeOf(std::string_view dtype, OpClass c, const DeviceProfile& d);

// Each step's kind: the class of its op, the math mode of the largest floating-point tensor it
// reads (or, if it reads none, the largest it defines).
std::vector<StepKind> StepKinds(const schedule::Schedule& s, const DeviceProfile& d);

// Time of one step in microseconds, and the parts it is made of.
struct StepTime {
  double compute_us = 0;   // FLOPs at the class's share of the peak
  double memory_us = 0;    // bytes at the class's share of hbm bandwidth
  double launch_us = 0;    // the kernels' fixed device cost
  double dispatch_us = 0;  // the host's time to issue them
  double total_us = 0;     // device_us(), and at least dispatch
  double device_us() const { return std::max(compute_us, memory_us) + launch_us; }
  bool dispatch_bound() const { return dispatch_us > device_us(); }
};
StepTime EstimateStep(const DeviceProfile& d, StepKind kind, double flops, std::uint64_t bytes);

// Fills compute_us of every step that carries flops or bytes_touched (others keep the time they
// were given, such as measured times) and records the profile's name in the schedule.
void ApplyCostModel(const DeviceProfile& d, schedule::Schedule* s);

// Where a schedule's estimated time goes on a device, by op class: for `schedule show` and the
// cost model's documentation. Sums over the steps that carry FLOPs or bytes.
struct ClassCost {
  std::uint32_t steps = 0;
  double flops = 0;
  std::uint64_t bytes = 0;
  double total_us = 0;
  std::uint32_t compute_bound = 0;   // steps whose FLOPs take longer than their bytes
  std::uint32_t dispatch_bound = 0;  // steps the host's dispatch, not the device, limits
};
std::array<ClassCost, kOpClasses> CostByClass(const DeviceProfile& d, const schedule::Schedule& s);

// A profile calibrated from measured step times (`tierpool schedule calibrate`): starting from
// `base`, each op class's compute efficiency becomes what its measured compute-bound steps
// reached (the FLOPs they did at the base's peak over the time they took, less the fixed
// per-kernel cost), and its memory efficiency likewise from its memory-bound steps; a class
// with fewer than 8 measured steps of a kind keeps the base's efficiency for it. dispatch_us > 0
// replaces the host's dispatch time.
struct ClassFit {
  std::uint32_t steps = 0;
  double modeled_us = 0;  // under the base profile
  double measured_us = 0;
  double calibrated_us = 0;  // under the calibrated profile
};
struct ProfileFit {
  DeviceProfile profile;
  std::array<ClassFit, kOpClasses> by_class{};
};
ProfileFit FitProfile(const DeviceProfile& base, const schedule::Schedule& measured,
                      double dispatch_us);

}  // namespace tierpool::prefetch
