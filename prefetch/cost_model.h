// The cost model: how long each step of a schedule takes on a device. A step's kernels take its
// FLOPs at the peak of its math mode (from its dtype and op) times its op class's efficiency, or
// its bytes at hbm_gbps times the class's memory efficiency (a roofline: the larger of the two),
// plus a fixed device cost per kernel. In eager mode the host issues the kernels one by one and
// the device runs them as they arrive: a step waits for the host only when the kernels before it
// were shorter than their dispatch (ComposeSteps). docs/cost-model.md explains each term and
// shows the model against published and measured throughput. Pure functions: no state, no
// locking.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "prefetch/device_profile.h"
#include "proto/schedule.pb.h"

namespace tierpool::prefetch {

// The class of an aten op (torch 1.13 make_fx names: "convolution", "native_layer_norm", ...)
// or an ONNX op type ("Conv", "LayerNormalization", ...); kElementwise for names it does not
// know (the long tail of ops is pointwise and memory-bound).
OpClass ClassifyOp(std::string_view op_type);

// Whether a step runs no kernel in any runtime: an ONNX alias of its input's memory (Reshape,
// Identity, Flatten, Squeeze, Unsqueeze), a Constant, or a shape query (Shape, Size) answered on
// the host. The PyTorch hook leaves views out of its schedules; an ONNX schedule keeps these
// steps, and they take no time and no dispatch. A measured step keeps its measured time.
bool RunsNoKernel(const schedule::Step& st);

// Whether a matrix multiply of these FLOPs and bytes (in elements of `element_bytes`), whose
// largest operand is `largest_operand` bytes, streams that operand past a side of at most 16
// rows (kGemv): at most 32 FLOPs per element moved (2 x rows when the other sides are large),
// and that operand 3/4 of the bytes or more. Small batched multiplies (Swin's 49 x 32 x 49
// windows: 28 FLOPs per element, no operand above a third) are not streams and stay kGemm.
bool IsMatrixVectorLike(double flops, std::uint64_t bytes, double element_bytes,
                        std::uint64_t largest_operand);

// What a step computes with: its op's class and the dtype its arithmetic reads, and the class
// whose host cost (`dispatches`) issuing it pays where that differs from its kernels' class.
struct StepKind {
  OpClass op_class = OpClass::kElementwise;
  MathMode math = MathMode::kFp32;
  std::optional<OpClass> host_class;
  OpClass host() const { return host_class.value_or(op_class); }
};

// The class whose host cost issuing an op pays, where it is not the class of its kernels: an
// eval-mode batch norm runs one elementwise pass on the device, but eager PyTorch issues it
// through cuDNN's batch norm call, which costs the host what a training batch norm does
// (docs/cost-model.md, "The host's time per op").
std::optional<OpClass> HostClassOf(std::string_view op_type);

// The math mode of a tensor dtype as the schedule names it (torch "bfloat16", ONNX "FLOAT16",
// ...), for an op of this class on this device (fp32 convolutions in TF32 where the profile
// says so). Integer and unknown dtypes count as fp32.
MathMode MathModeOf(std::string_view dtype, OpClass c, const DeviceProfile& d);

// Each step's kind: the class of its op (a matrix multiply kGemv where IsMatrixVectorLike), the
// math mode of the largest floating-point tensor it reads (or, if it reads none, the largest it
// defines), and its host class (HostClassOf).
std::vector<StepKind> StepKinds(const schedule::Schedule& s, const DeviceProfile& d);

// One step's kernels on the device, and the host's time to issue them, in microseconds.
struct StepTime {
  double compute_us = 0;   // FLOPs at the class's share of the peak
  double memory_us = 0;    // bytes at the class's share of hbm bandwidth
  double launch_us = 0;    // the kernels' fixed device cost
  double dispatch_us = 0;  // the host's time to issue them
  double device_us() const { return std::max(compute_us, memory_us) + launch_us; }
};
StepTime EstimateStep(const DeviceProfile& d, StepKind kind, double flops, std::uint64_t bytes);

// A step in eager execution: the host issues the steps' kernels in order, each taking its
// dispatch time, and the device runs each step when the one before it has ended and the host has
// issued it. CUDA's launch queue lets the host run ahead of long kernels, so their dispatch is
// hidden; a run of short kernels leaves the device waiting for the host. The iteration starts
// with both idle. wall_us is the time from the previous step's end to this one's.
struct StepSpan {
  double device_us = 0;  // the kernels' own time (measured, estimated, or as given)
  double wall_us = 0;    // device_us plus the device's wait for the host
  bool waited() const { return wall_us > device_us * (1 + 1e-9); }
};
// Steps carrying FLOPs or bytes are estimated, measured steps keep their kernels' time, and
// others (hand-given times) take their compute_us with no dispatch.
std::vector<StepSpan> ComposeSteps(const DeviceProfile& d, const schedule::Schedule& s);

// Sets compute_us of every step that carries FLOPs or bytes, or was measured, to its wall time
// under ComposeSteps (a measured step's kernel time moves to kernel_us on the first application,
// so applying a profile twice changes nothing), and records the profile's name in the schedule.
// Steps with neither keep the time they were given.
void ApplyCostModel(const DeviceProfile& d, schedule::Schedule* s);

// Where a schedule's estimated time goes on a device, by op class: for `schedule show` and the
// cost model's documentation. Sums over the steps that carry FLOPs or bytes.
struct ClassCost {
  std::uint32_t steps = 0;
  double flops = 0;
  std::uint64_t bytes = 0;
  double total_us = 0;               // wall time, as ComposeSteps gives it
  std::uint32_t compute_bound = 0;   // steps whose FLOPs take longer than their bytes
  std::uint32_t dispatch_bound = 0;  // steps that waited for the host to issue them
};
std::array<ClassCost, kOpClasses> CostByClass(const DeviceProfile& d, const schedule::Schedule& s);

// A profile calibrated from measured step times (`tierpool schedule calibrate`): starting from
// `base`, each op class's compute efficiency becomes what its measured compute-bound steps in
// one math mode reached (bf16 if it has enough of them, else fp32, fp8, fp64: the FLOPs they did
// at the peak over the time they took, less the fixed per-kernel cost), TF32 and FP8 steps of
// other classes then fit those modes' math_efficiency, and each class's memory efficiency comes
// from its memory-bound steps. Which side of the roofline a step is on depends on the fitted
// efficiencies, so the fit is repeated until no step changes side. A class with fewer than 8
// measured steps of a kind keeps the base's efficiency for it. dispatch_us > 0 replaces the
// host's dispatch time. The rows compare kernel times: modeled, measured, and under the
// calibrated profile.
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

// The host's time per kernel that makes the measured schedule's iteration, composed as
// ComposeSteps does, last `eager_us` (the whole step as the framework ran it). 0 when the
// kernels alone already take that long.
double FitDispatch(const DeviceProfile& d, const schedule::Schedule& measured, double eager_us);

}  // namespace tierpool::prefetch
