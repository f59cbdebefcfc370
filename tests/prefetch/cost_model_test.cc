#include "prefetch/cost_model.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>

namespace tierpool::prefetch {
namespace {

// One step reading a tensor of `dtype` and defining another.
schedule::Schedule OneStep(const std::string& op, const std::string& dtype, double flops,
                           std::uint64_t bytes) {
  schedule::Schedule s;
  s.set_format_version(1);
  auto* st = s.add_steps();
  st->set_name("s0");
  st->set_op_type(op);
  st->set_flops(flops);
  st->set_bytes_touched(bytes);
  for (int i = 0; i < 2; ++i) {
    auto* t = s.add_tensors();
    t->set_id(static_cast<std::uint32_t>(i));
    t->set_size_bytes(bytes / 2);
    t->set_dtype(i == 0 ? dtype : "int64");  // the output's dtype must not decide
    t->set_def_step(i == 0 ? -1 : 0);
    if (i == 0) t->add_use_steps(0);
  }
  return s;
}

TEST(CostModel, ClassifiesAtenAndOnnxNames) {
  EXPECT_EQ(ClassifyOp("convolution_backward"), OpClass::kConv);
  EXPECT_EQ(ClassifyOp("Conv"), OpClass::kConv);
  EXPECT_EQ(ClassifyOp("MatMul"), OpClass::kGemm);
  EXPECT_EQ(ClassifyOp("addmm"), OpClass::kGemm);
  EXPECT_EQ(ClassifyOp("native_layer_norm_backward"), OpClass::kNorm);
  EXPECT_EQ(ClassifyOp("_native_batch_norm_legit_no_training"), OpClass::kElementwise);
  EXPECT_EQ(ClassifyOp("_native_multi_head_attention"), OpClass::kAttention);
  EXPECT_EQ(ClassifyOp("adam"), OpClass::kOptimizer);
  EXPECT_EQ(ClassifyOp("sync"), OpClass::kSync);
  // One pass over the bytes (rows stay on chip): the H100's 2.5 TB/s, not a norm's share.
  EXPECT_EQ(ClassifyOp("Softmax"), OpClass::kElementwise);
  EXPECT_EQ(ClassifyOp("_softmax_backward_data"), OpClass::kElementwise);
  EXPECT_EQ(ClassifyOp("ReduceMean"), OpClass::kReduction);
  EXPECT_EQ(ClassifyOp("some_op_nobody_knows"), OpClass::kElementwise);
}

TEST(CostModel, MathModeFollowsDtypeOpAndProfile) {
  auto d = BuiltinProfile("a100");
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(MathModeOf("bfloat16", OpClass::kGemm, *d), MathMode::kBf16);
  EXPECT_EQ(MathModeOf("FLOAT16", OpClass::kConv, *d), MathMode::kBf16);
  EXPECT_EQ(MathModeOf("float8_e4m3fn", OpClass::kGemm, *d), MathMode::kFp8);
  // PyTorch's defaults: fp32 convolutions in TF32, fp32 matmuls in FP32.
  EXPECT_EQ(MathModeOf("float32", OpClass::kConv, *d), MathMode::kTf32);
  EXPECT_EQ(MathModeOf("FLOAT", OpClass::kGemm, *d), MathMode::kFp32);
  d->fp32_matmul_uses_tf32 = true;
  EXPECT_EQ(MathModeOf("float32", OpClass::kGemm, *d), MathMode::kTf32);
  // No FP8 units on an A100: FP8 runs at the 16-bit rate.
  EXPECT_DOUBLE_EQ(d->peak(MathMode::kFp8), d->peak(MathMode::kBf16));
}

TEST(CostModel, AnFp32GemmTakesItsFp32PeakNotTheTensorCorePeak) {
  auto d = BuiltinProfile("h100");
  ASSERT_TRUE(d.ok());
  const double flops = 1e12, bytes = 1e6;  // compute-bound
  auto bf16 = OneStep("mm", "bfloat16", flops, bytes);
  auto fp32 = OneStep("mm", "float32", flops, bytes);
  ApplyCostModel(*d, &bf16);
  ApplyCostModel(*d, &fp32);
  const auto& g = d->op(OpClass::kGemm);
  // The device starts once the host has issued the kernel.
  const double fixed = d->launch_us + g.dispatches * d->dispatch_us;
  EXPECT_NEAR(bf16.steps(0).compute_us(), 1e6 / (989.4 * g.compute_efficiency) + fixed, 1e-6);
  EXPECT_NEAR(fp32.steps(0).compute_us(), 1e6 / (67 * g.compute_efficiency) + fixed, 1e-6);
  EXPECT_GT(fp32.steps(0).compute_us() / bf16.steps(0).compute_us(), 14);
  EXPECT_EQ(bf16.device(), "h100");
}

// A decode step's multiplies have one row per token: they stream their weights (or a layer's
// KV cache) through the cores, measured on an H100 at twice the bandwidth share that large,
// memory-bound multiplies reach. Shapes by rows x inner x columns, the second operand the
// larger.
struct Multiply {
  double flops;
  std::uint64_t bytes, largest;
};
Multiply Mm(double m, double k, double n, double element, double batch = 1) {
  return {batch * 2 * m * k * n,
          static_cast<std::uint64_t>(batch * element * (m * k + k * n + m * n)),
          static_cast<std::uint64_t>(batch * element * k * n)};
}

// One multiply step reading an activation and its large operand.
schedule::Schedule MultiplyStep(const Multiply& mm, const std::string& dtype) {
  schedule::Schedule s;
  s.set_format_version(1);
  auto* st = s.add_steps();
  st->set_name("s0");
  st->set_op_type("mm");
  st->set_flops(mm.flops);
  st->set_bytes_touched(mm.bytes);
  const std::uint64_t sizes[] = {mm.bytes - mm.largest, mm.largest};
  for (int i = 0; i < 2; ++i) {
    auto* t = s.add_tensors();
    t->set_id(static_cast<std::uint32_t>(i));
    t->set_size_bytes(sizes[i]);
    t->set_dtype(dtype);
    t->set_def_step(-1);
    t->add_use_steps(0);
  }
  return s;
}

TEST(CostModel, AMultiplyOfAFewRowsIsAGemvAndStreamsAtItsOwnShare) {
  auto d = BuiltinProfile("h100");
  ASSERT_TRUE(d.ok());
  auto gemv = [](const Multiply& mm, double element) {
    return IsMatrixVectorLike(mm.flops, mm.bytes, element, mm.largest);
  };
  const Multiply decode = Mm(1, 4096, 14336, 2);  // one token through a SwiGLU weight
  const Multiply gqa = Mm(4, 128, 131072, 2);     // 4 query rows against a 128K cache
  EXPECT_TRUE(gemv(decode, 2));
  EXPECT_TRUE(gemv(gqa, 2));
  EXPECT_TRUE(gemv(Mm(16, 4096, 4096, 4), 4));  // fp32, 16 rows: the edge, still a stream
  EXPECT_FALSE(gemv(Mm(17, 4096, 4096, 4), 4));
  EXPECT_FALSE(gemv(Mm(32, 2048, 1000, 4), 4));    // ResNet's classifier at batch 32
  EXPECT_FALSE(gemv(Mm(4096, 4096, 4096, 2), 2));  // compute-bound
  // Swin's window attention: few FLOPs per byte, but small batched blocks, no stream.
  const Multiply window = Mm(49, 32, 49, 2, 4096);
  EXPECT_LT(window.flops * 2, 32.0 * static_cast<double>(window.bytes));
  EXPECT_FALSE(IsMatrixVectorLike(window.flops, window.bytes, 2, window.bytes / 3));

  auto step = MultiplyStep(decode, "bfloat16");
  EXPECT_EQ(StepKinds(step, *d)[0].op_class, OpClass::kGemv);
  EXPECT_EQ(StepKinds(MultiplyStep(Mm(512, 4096, 4096, 2), "bfloat16"), *d)[0].op_class,
            OpClass::kGemm);
  auto relu = MultiplyStep(decode, "bfloat16");
  relu.mutable_steps(0)->set_op_type("relu");
  EXPECT_EQ(StepKinds(relu, *d)[0].op_class, OpClass::kElementwise);  // multiplies only
  d->dispatch_us = 0;
  ApplyCostModel(*d, &step);
  const double streamed =
      static_cast<double>(decode.bytes) / (3350e9 * d->op(OpClass::kGemv).memory_efficiency) * 1e6;
  EXPECT_NEAR(step.steps(0).compute_us(), streamed + d->launch_us, 1e-6);
  EXPECT_GT(d->op(OpClass::kGemv).memory_efficiency, 1.9 * d->op(OpClass::kGemm).memory_efficiency);
}

TEST(CostModel, MemoryBoundStepsTakeTheirBytesAtTheClassesShareOfBandwidth) {
  auto d = BuiltinProfile("a100");
  ASSERT_TRUE(d.ok());
  const std::uint64_t bytes = 1ull << 30;
  StepKind norm{OpClass::kNorm, MathMode::kBf16}, ew{OpClass::kElementwise, MathMode::kBf16};
  auto tn = EstimateStep(*d, norm, 0, bytes);
  auto te = EstimateStep(*d, ew, 0, bytes);
  EXPECT_NEAR(tn.memory_us, bytes / (2039e9 * d->op(OpClass::kNorm).memory_efficiency) * 1e6, 1e-6);
  EXPECT_GT(tn.device_us(), te.device_us());  // two passes over the data reach less bandwidth
  EXPECT_DOUBLE_EQ(te.device_us(), te.memory_us + te.launch_us);
}

// Measured elementwise steps (one kernel each) with these kernel times.
schedule::Schedule MeasuredSteps(const std::vector<double>& kernel_us) {
  schedule::Schedule s;
  s.set_format_version(1);
  for (std::size_t i = 0; i < kernel_us.size(); ++i) {
    auto* st = s.add_steps();
    st->set_name("s" + std::to_string(i));
    st->set_op_type("relu");
    st->set_compute_us(kernel_us[i]);
    st->set_measured(true);
  }
  return s;
}

double Iteration(const schedule::Schedule& s) {
  double t = 0;
  for (const auto& st : s.steps()) t += st.compute_us();
  return t;
}

// An eval-mode batch norm is one elementwise pass on the device, but eager PyTorch issues it
// through cuDNN's batch norm, which costs the host a norm's call (ResNet-18's inference on an
// H200: 82 us under the profiler against 15-17 for its relus and adds).
TEST(CostModel, AnEvalBatchNormRunsAnElementwiseKernelAndPaysANormsDispatch) {
  auto d = BuiltinProfile("a100");
  ASSERT_TRUE(d.ok());
  d->dispatch_us = 10;
  d->op(OpClass::kNorm).dispatches = 3;
  d->op(OpClass::kElementwise).dispatches = 1;
  auto step = MeasuredSteps({1.0});
  step.mutable_steps(0)->set_op_type("_native_batch_norm_legit_no_training");
  step.mutable_steps(0)->set_flops(1e6);
  step.mutable_steps(0)->set_measured(false);
  const auto kinds = StepKinds(step, *d);
  EXPECT_EQ(kinds[0].op_class, OpClass::kElementwise);
  EXPECT_EQ(kinds[0].host(), OpClass::kNorm);
  EXPECT_DOUBLE_EQ(EstimateStep(*d, kinds[0], 1e6, 0).dispatch_us, 30);
  // The first step of an iteration waits for its own dispatch: 30 us, not an elementwise 10.
  const auto spans = ComposeSteps(*d, step);
  EXPECT_NEAR(spans[0].wall_us - spans[0].device_us, 30, 1e-9);
  EXPECT_EQ(HostClassOf("relu"), std::nullopt);
  EXPECT_EQ(HostClassOf("native_batch_norm"), std::nullopt);  // already a norm
  EXPECT_EQ(StepKind{OpClass::kConv}.host(), OpClass::kConv);
}

// The host issues kernels while the device runs earlier ones: short kernels after a long one
// cost their own time only, short kernels before it leave the device waiting for the host. A
// model that takes each step as the larger of its kernels and its dispatch says 1,360 us for
// both orders.
TEST(CostModel, TheHostRunsAheadOfLongKernelsAndShortOnesWaitForIt) {
  auto d = BuiltinProfile("a100");
  ASSERT_TRUE(d.ok());
  d->dispatch_us = 36;
  std::vector<double> long_first(11, 3.0), long_last(11, 3.0);
  long_first.front() = long_last.back() = 1000;
  auto a = MeasuredSteps(long_first), b = MeasuredSteps(long_last);
  ApplyCostModel(*d, &a);
  ApplyCostModel(*d, &b);
  // Long first: issued at 36, ends at 1,036; the ten short ones were issued meanwhile.
  EXPECT_NEAR(Iteration(a), 36 + 1000 + 10 * 3, 1e-6);
  // Long last: each short kernel waits for its dispatch; the long one starts at 11 x 36.
  EXPECT_NEAR(Iteration(b), 11 * 36 + 1000, 1e-6);
  const auto spans = ComposeSteps(*d, MeasuredSteps(long_last));
  EXPECT_TRUE(spans[1].waited());
  EXPECT_NEAR(spans[1].wall_us, 36, 1e-6);
  EXPECT_DOUBLE_EQ(spans[1].device_us, 3);
  d->dispatch_us = 0;  // CUDA graphs: the kernels alone
  auto c = MeasuredSteps(long_last);
  ApplyCostModel(*d, &c);
  EXPECT_NEAR(Iteration(c), 1000 + 10 * 3, 1e-6);
}

// A measured step's kernel time moves to kernel_us, so a second profile sees the kernels, not
// the first profile's waits.
TEST(CostModel, ApplyingAProfileTwiceToMeasuredStepsChangesNothing) {
  auto d = BuiltinProfile("a100");
  ASSERT_TRUE(d.ok());
  d->dispatch_us = 50;
  auto s = MeasuredSteps({2, 2, 2, 500});
  ApplyCostModel(*d, &s);
  const auto once = s;
  ApplyCostModel(*d, &s);
  for (int i = 0; i < s.steps_size(); ++i) {
    EXPECT_DOUBLE_EQ(s.steps(i).compute_us(), once.steps(i).compute_us()) << i;
  }
  EXPECT_DOUBLE_EQ(s.steps(0).kernel_us(), 2);
  EXPECT_NEAR(s.steps(0).compute_us(), 50 + 2, 1e-6);  // issued, then run
  EXPECT_NEAR(s.steps(1).compute_us(), 50, 1e-6);      // issued while the first ran
}

TEST(CostModel, FitsTheDispatchTimeThatGivesTheWholeStep) {
  auto d = BuiltinProfile("a100");
  ASSERT_TRUE(d.ok());
  std::vector<double> kernels;
  for (int i = 0; i < 200; ++i) kernels.push_back(i % 7 == 0 ? 300 : 4 + i % 5);
  auto s = MeasuredSteps(kernels);
  d->dispatch_us = 27.5;
  auto timed = s;
  ApplyCostModel(*d, &timed);
  EXPECT_NEAR(FitDispatch(*d, s, Iteration(timed)), 27.5, 0.01);
  // Kernels that take longer than the whole step: no dispatch time explains it.
  EXPECT_EQ(FitDispatch(*d, s, 10), 0);
}

TEST(CostModel, StepsWithoutCostInputsKeepTheirTime) {
  auto d = BuiltinProfile("h100");
  ASSERT_TRUE(d.ok());
  auto s = OneStep("mm", "bfloat16", 0, 0);
  s.mutable_steps(0)->set_compute_us(123.5);  // e.g. measured by `schedule calibrate`
  ApplyCostModel(*d, &s);
  EXPECT_DOUBLE_EQ(s.steps(0).compute_us(), 123.5);
}

// ONNX steps that run no kernel (aliases, constants, shape queries) take no time and hold no
// dispatch: a Relu after an Identity waits for the host as it would right after the Conv.
TEST(CostModel, OnnxAliasesTakeNoTimeAndNoDispatch) {
  auto d = BuiltinProfile("h100");
  ASSERT_TRUE(d.ok());
  schedule::Schedule with = OneStep("Relu", "float32", 0, 1 << 20);
  schedule::Schedule without = with;
  for (const char* op : {"Identity", "Reshape", "Constant", "Unsqueeze"}) {
    auto* st = with.mutable_steps()->Add();
    st->set_name(op);
    st->set_op_type(op);
    st->set_bytes_touched(1 << 20);
    with.mutable_steps()->SwapElements(0, with.steps_size() - 1);  // before the Relu
  }
  ApplyCostModel(*d, &with);
  ApplyCostModel(*d, &without);
  double total = 0;
  for (const auto& st : with.steps()) {
    if (st.op_type() != "Relu") {
      EXPECT_TRUE(RunsNoKernel(st));
      EXPECT_EQ(st.compute_us(), 0) << st.op_type();
    }
    total += st.compute_us();
  }
  EXPECT_DOUBLE_EQ(total, without.steps(0).compute_us());
  schedule::Schedule measured = OneStep("Identity", "float32", 0, 1 << 20);
  measured.mutable_steps(0)->set_measured(true);
  EXPECT_FALSE(RunsNoKernel(measured.steps(0)));  // what was measured stands
}

TEST(CostModel, CostByClassAddsUpToTheIteration) {
  auto d = BuiltinProfile("a100");
  ASSERT_TRUE(d.ok());
  auto s = OneStep("convolution", "bfloat16", 5e11, 1 << 20);
  ApplyCostModel(*d, &s);
  auto by = CostByClass(*d, s);
  const auto& conv = by[static_cast<std::size_t>(OpClass::kConv)];
  EXPECT_EQ(conv.steps, 1u);
  EXPECT_EQ(conv.compute_bound, 1u);
  EXPECT_DOUBLE_EQ(conv.total_us, s.steps(0).compute_us());
}

// A fit takes a class's efficiency only from enough steps of its kind: three slow GEMMs leave
// the GEMM efficiency as it was, twenty convolutions at half the modeled speed halve it.
TEST(CostModel, FitsAClassOnlyFromEnoughOfItsSteps) {
  const DeviceProfile base = *BuiltinProfile("h100");
  schedule::Schedule s;
  s.set_format_version(1);
  auto* in = s.add_tensors();
  in->set_id(0);
  in->set_size_bytes(1 << 20);
  in->set_dtype("bfloat16");
  in->set_def_step(-1);
  auto add = [&](const std::string& op, int n, double slowdown) {
    for (int i = 0; i < n; ++i) {
      const auto at = static_cast<std::uint32_t>(s.steps_size());
      auto* st = s.add_steps();
      st->set_name(op + std::to_string(i));
      st->set_op_type(op);
      st->set_flops(2e12);  // compute-bound: a 2 TFLOP step, a few ms at the bf16 peak
      st->set_bytes_touched(1 << 20);
      in->add_use_steps(at);
      schedule::Schedule one = s;
      one.mutable_steps()->DeleteSubrange(0, static_cast<int>(at));
      one.mutable_tensors(0)->clear_use_steps();
      one.mutable_tensors(0)->add_use_steps(0);
      ApplyCostModel(base, &one);
      st->set_compute_us(one.steps(0).compute_us() * slowdown);
      st->set_measured(true);
    }
  };
  add("mm", 3, 10.0);
  add("convolution", 20, 2.0);
  const ProfileFit fit = FitProfile(base, s, 0);
  EXPECT_EQ(fit.profile.op(OpClass::kGemm).compute_efficiency,
            base.op(OpClass::kGemm).compute_efficiency);
  EXPECT_NEAR(fit.profile.op(OpClass::kConv).compute_efficiency,
              base.op(OpClass::kConv).compute_efficiency / 2, 0.01);
  EXPECT_EQ(fit.by_class[static_cast<std::size_t>(OpClass::kGemm)].steps, 3u);
}

// A class's efficiency comes from its bf16 steps; its TF32 steps fit the TF32 factor. Pooled,
// bf16 convolutions at half the modeled speed and TF32 ones at the modeled speed would give one
// efficiency wrong for both.
TEST(CostModel, FitsTheTf32FactorApartFromTheClassesBf16Efficiency) {
  DeviceProfile base = *BuiltinProfile("a100");
  base.math_efficiency[static_cast<std::size_t>(MathMode::kTf32)] = 0.25;
  schedule::Schedule s;
  s.set_format_version(1);
  for (const char* dtype : {"bfloat16", "float32"}) {
    auto* t = s.add_tensors();
    t->set_id(static_cast<std::uint32_t>(s.tensors_size() - 1));
    t->set_size_bytes(1 << 20);
    t->set_dtype(dtype);
    t->set_def_step(-1);
  }
  auto add = [&](int tensor, int n, double slowdown) {
    for (int i = 0; i < n; ++i) {
      const auto at = static_cast<std::uint32_t>(s.steps_size());
      auto* st = s.add_steps();
      st->set_name("conv" + std::to_string(at));
      st->set_op_type("convolution");
      st->set_flops(2e12);
      st->set_bytes_touched(1 << 20);
      s.mutable_tensors(tensor)->add_use_steps(at);
      const auto kind = StepKinds(s, base)[at];
      st->set_compute_us(EstimateStep(base, kind, 2e12, 1 << 20).device_us() * slowdown);
      st->set_measured(true);
    }
  };
  add(0, 20, 2.0);  // bf16
  add(1, 20, 1.0);  // fp32 convolutions: TF32
  const ProfileFit fit = FitProfile(base, s, 0);
  EXPECT_NEAR(fit.profile.op(OpClass::kConv).compute_efficiency,
              base.op(OpClass::kConv).compute_efficiency / 2, 0.01);
  EXPECT_NEAR(fit.profile.math_efficiency[static_cast<std::size_t>(MathMode::kTf32)], 0.5, 0.01);
}

TEST(DeviceProfileJson, RoundTripsEveryField) {
  auto d = BuiltinProfile("rtx3090");
  ASSERT_TRUE(d.ok());
  d->op(OpClass::kConv).compute_efficiency = 0.42;
  d->math_efficiency[static_cast<std::size_t>(MathMode::kTf32)] = 0.3;
  d->dispatch_us = 0;
  auto back = ParseProfileJson(ProfileToJson(*d), "test");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(ProfileToJson(*back), ProfileToJson(*d));
}

TEST(DeviceProfileJson, StartsFromABuiltinAndOverrides) {
  auto d = ParseProfileJson(R"({"name": "my-h100", "base": "h100", "hbm_gbps": 3000,
                               "ops": {"gemm": {"compute_efficiency": 0.8}}})",
                            "test");
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d->name, "my-h100");
  EXPECT_DOUBLE_EQ(d->hbm_gbps, 3000);
  EXPECT_DOUBLE_EQ(d->peak(MathMode::kBf16), 989.4);
  EXPECT_DOUBLE_EQ(d->op(OpClass::kGemm).compute_efficiency, 0.8);
  EXPECT_DOUBLE_EQ(d->op(OpClass::kConv).compute_efficiency,
                   BuiltinProfile("h100")->op(OpClass::kConv).compute_efficiency);
}

TEST(DeviceProfileJson, ReadsTheFirstFormat) {
  // Profiles written before the cost model knew dtypes: one 16-bit peak, one efficiency.
  auto d = ParseProfileJson(
      R"({"name": "old", "peak_tflops": 400, "efficiency": 0.5, "hbm_gbps": 1000,
          "h2d_gbps": 20, "min_op_us": 3})",
      "test");
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_DOUBLE_EQ(d->peak(MathMode::kBf16), 400);
  EXPECT_DOUBLE_EQ(d->op(OpClass::kGemm).compute_efficiency, 0.5);
  EXPECT_DOUBLE_EQ(d->d2h_gbps, 20);
  EXPECT_DOUBLE_EQ(d->launch_us, 3);
}

TEST(DeviceProfileJson, RefusesWhatIsNotAProfile) {
  for (const char* bad : {
           R"([1, 2])",
           R"({"base": "h100", "peak_tflops": {"fp7": 1}})",
           R"({"base": "h100", "ops": {"matmul": {"compute_efficiency": 0.5}}})",
           R"({"base": "h100", "ops": {"gemm": {"compute_efficiency": 1.5}}})",
           R"({"base": "h100", "hbm_gbps": -1})",
           R"({"base": "h100", "math_efficiency": {"tf32": 0}})",
           R"({"base": "nosuch"})",
           R"({"peak_tflops": "fast"})",
           R"({"hbm_gbps": 100)",
       }) {
    auto d = ParseProfileJson(bad, "test");
    EXPECT_FALSE(d.ok()) << bad;
  }
}

TEST(DeviceProfile, BuiltinsAreValid) {
  for (const auto& n : BuiltinProfileNames()) {
    auto d = BuiltinProfile(n);
    ASSERT_TRUE(d.ok()) << n;
    EXPECT_TRUE(d->validate().ok()) << n;
  }
  EXPECT_FALSE(BuiltinProfile("v100").ok());
}

}  // namespace
}  // namespace tierpool::prefetch
