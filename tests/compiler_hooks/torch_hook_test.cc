// The PyTorch hook through `tierpool schedule from-torch`, then a planned replay of what it made.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>

#include <fstream>
#include <nlohmann/json.hpp>

#include "prefetch/cost_model.h"
#include "prefetch/planner.h"
#include "prefetch/simulator.h"

namespace tierpool::prefetch {
namespace {

TEST(TorchHook, TracesATrainingStepWithAdam) {
  if (std::system("/usr/bin/python3 -c 'import torch, functorch' 2>/dev/null") != 0) {
    GTEST_SKIP() << "python3-torch is not installed";
  }
  std::string out = ::testing::TempDir() + "/mlp-" + std::to_string(::getpid()) + ".pb";
  std::string cmd = std::string(TIERPOOL_CLI_PATH) +
                    " schedule from-torch --model tierpool_models:mlp --input 16x256"
                    " --optimizer adam --device gh200 -o " +
                    out + " > /dev/null 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  auto s = LoadSchedule(out);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_TRUE(s->repeats());
  // mlp(): 4 x Linear(256, 256): 4 x (65536 + 256) parameters.
  const std::uint64_t param_bytes = 4ull * (65536 + 256) * 4;
  std::uint64_t by_kind[16] = {};
  int updates = 0;
  for (const auto& t : s->tensors()) {
    by_kind[t.kind()] += t.size_bytes();
    updates += t.update_steps_size();
  }
  EXPECT_EQ(by_kind[schedule::WEIGHT], param_bytes);
  EXPECT_EQ(by_kind[schedule::GRADIENT], param_bytes);
  EXPECT_EQ(by_kind[schedule::OPTIMIZER_STATE], 2 * param_bytes);  // Adam: exp_avg, exp_avg_sq
  EXPECT_GT(by_kind[schedule::SAVED_ACTIVATION], 0u);
  EXPECT_EQ(updates, 3 * 8);  // each parameter and its two states, once per iteration
  Lifetimes lt(*s);
  auto d = BuiltinProfile("gh200");
  for (double f : {0.9, 0.7, 0.5}) {
    auto budget = static_cast<std::uint64_t>(static_cast<double>(lt.peak_bytes()) * f);
    auto plan = BuildPlan(*s, lt, *d, {.hbm_budget = budget});
    ASSERT_TRUE(plan.ok()) << plan.status().ToString();
    auto r = Replay(*s, lt, *d, {.policy = Policy::kPlanned, .hbm_budget = budget, .plan = &*plan});
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(r->missing_at_use + r->budget_violations + r->bad_actions, 0u) << f;
    EXPECT_LE(r->peak_hbm, budget);
  }
  ::unlink(out.c_str());
}

// `schedule reorder` moves each update to right after its gradient; the sweep of the result shows
// the LP bound at every budget, below every planned and reactive-lru stall.
TEST(TorchHook, ReorderedScheduleSweepsWithTheLpBound) {
  if (std::system("/usr/bin/python3 -c 'import torch, functorch' 2>/dev/null") != 0) {
    GTEST_SKIP() << "python3-torch is not installed";
  }
  const std::string base = ::testing::TempDir() + "/mlp-ro-" + std::to_string(::getpid());
  const std::string cli = TIERPOOL_CLI_PATH;
  std::string cmd = cli + " schedule from-torch --model tierpool_models:mlp --input 16x256 -o " +
                    base + ".pb > /dev/null 2>&1 && " + cli + " schedule reorder " + base +
                    ".pb -o " + base + "-ro.pb > /dev/null && " + cli + " replay " + base +
                    "-ro.pb --device h100 --sweep --sweep-step 0.2 --json " + base +
                    ".json > /dev/null";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  auto s = LoadSchedule(base + "-ro.pb");
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  int updates = 0;
  for (const auto& t : s->tensors()) {
    if (t.kind() != schedule::GRADIENT) continue;
    ASSERT_EQ(t.use_steps_size(), 1) << t.name();
    // Between the gradient's making and its update, only other updates.
    for (auto i = static_cast<std::uint32_t>(t.def_step()) + 1; i < t.use_steps(0); ++i) {
      EXPECT_EQ(ClassifyOp(s->steps(static_cast<int>(i)).op_type()), OpClass::kOptimizer)
          << s->steps(static_cast<int>(i)).name() << " between " << t.name() << " and its update";
    }
    ++updates;
  }
  EXPECT_EQ(updates, 8);
  std::ifstream in(base + ".json");
  auto sweep = nlohmann::json::parse(in);
  for (const auto& row : sweep["rows"]) {
    ASSERT_TRUE(row.contains("lp_bound")) << row.dump();
    double lp = row["lp_bound"]["stall_us"];
    EXPECT_GE(row["reactive"]["stall_us"].get<double>() + 1e-3, lp);
    if (row.contains("planned")) {
      EXPECT_GE(row["planned"]["stall_us"].get<double>() + 1e-3, lp);
    }
    if (row.contains("guided")) {  // the LP-guided plan, where the plain one stalls
      EXPECT_GE(row["guided"]["stall_us"].get<double>() + 1e-3, lp);
      EXPECT_EQ(row["guided"]["budget_violations"].get<int>() +
                    row["guided"]["missing_at_use"].get<int>() +
                    row["guided"]["bad_actions"].get<int>(),
                0);
      EXPECT_GT(row["planned"]["stall_us"].get<double>(), 0);
    }
  }
  EXPECT_GT(sweep["rows"].size(), 3u);
  for (const char* suffix : {".pb", "-ro.pb", ".json"}) ::unlink((base + suffix).c_str());
}

// `schedule split-updates` on a traced Adam step: each 256 KiB weight's update (65,536 elements,
// float32) becomes four slices of 64 KiB, the biases' stay whole, and the replay of the split
// schedule (`--split-updates`, the same split) keeps every invariant at every budget.
TEST(TorchHook, SplitUpdatesSlicesTheTracedAdamUpdates) {
  if (std::system("/usr/bin/python3 -c 'import torch, functorch' 2>/dev/null") != 0) GTEST_SKIP();
  const std::string base = ::testing::TempDir() + "/mlp-split-" + std::to_string(::getpid());
  const std::string cli = TIERPOOL_CLI_PATH;
  std::string cmd = cli + " schedule from-torch --model tierpool_models:mlp --input 16x256 -o " +
                    base + ".pb > /dev/null 2>&1 && " + cli + " schedule split-updates " + base +
                    ".pb --chunk 64K -o " + base + "-split.pb > " + base + ".txt && " + cli +
                    " replay " + base + ".pb --split-updates 64K --device h100 --sweep" +
                    " --sweep-step 0.2 --lp-windows 0 --json " + base + ".json > /dev/null";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  std::ifstream said(base + ".txt");
  std::string line;
  std::getline(said, line);
  EXPECT_NE(line.find("4 optimizer updates split into 16 slices"), std::string::npos) << line;
  auto whole = LoadSchedule(base + ".pb");
  auto split = LoadSchedule(base + "-split.pb");
  ASSERT_TRUE(whole.ok() && split.ok());
  EXPECT_EQ(split->steps_size(), whole->steps_size() + 12);
  int slices = 0;
  for (const auto& st : split->steps()) {
    if (ClassifyOp(st.op_type()) != OpClass::kOptimizer) continue;
    if (st.name().find('[') == std::string::npos) continue;
    ++slices;
  }
  EXPECT_EQ(slices, 16);
  for (const auto& t : split->tensors()) {
    if (t.name().find('[') == std::string::npos) continue;
    EXPECT_LE(t.size_bytes(), 64u << 10) << t.name();
  }
  std::ifstream in(base + ".json");
  auto sweep = nlohmann::json::parse(in);
  int planned = 0;
  for (const auto& row : sweep["rows"]) {
    if (!row.contains("planned")) continue;
    ++planned;
    EXPECT_EQ(row["planned"]["budget_violations"].get<int>() +
                  row["planned"]["missing_at_use"].get<int>() +
                  row["planned"]["bad_actions"].get<int>(),
              0)
        << row.dump();
  }
  EXPECT_GT(planned, 2);
  for (const char* suffix : {".pb", "-split.pb", ".txt", ".json"})
    ::unlink((base + suffix).c_str());
}

TEST(TorchHook, InferenceTracesTheForwardPassOnly) {
  if (std::system("/usr/bin/python3 -c 'import torch, functorch' 2>/dev/null") != 0) GTEST_SKIP();
  std::string out = ::testing::TempDir() + "/mlp-inf-" + std::to_string(::getpid()) + ".pb";
  std::string cmd = std::string(TIERPOOL_CLI_PATH) +
                    " schedule from-torch --model tierpool_models:mlp --input 16x256 --inference"
                    " --dtype bfloat16 -o " +
                    out + " > /dev/null 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  auto s = LoadSchedule(out);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  for (const auto& t : s->tensors()) {
    EXPECT_NE(t.kind(), schedule::GRADIENT) << t.name();
    EXPECT_NE(t.kind(), schedule::SAVED_ACTIVATION) << t.name();
    EXPECT_NE(t.kind(), schedule::OPTIMIZER_STATE) << t.name();
  }
  int gemms = 0;
  for (const auto& st : s->steps()) gemms += ClassifyOp(st.op_type()) == OpClass::kGemm;
  EXPECT_EQ(gemms, 4);  // four Linear layers forward, nothing backward
  ::unlink(out.c_str());
}

// `schedule calibrate` on the CPU (the GPU path is the same code with CUDA events): every step
// of the traced graph is measured, the measured schedule replays with those times, and the
// profile it writes loads and differs from its base where the steps were measured.
TEST(TorchHook, CalibratesOnTheCpu) {
  if (std::system("/usr/bin/python3 -c 'import torch, functorch' 2>/dev/null") != 0) GTEST_SKIP();
  const std::string dir = ::testing::TempDir() + "/calibrate-" + std::to_string(::getpid());
  ASSERT_EQ(std::system(("mkdir -p " + dir).c_str()), 0);
  std::string cmd = std::string(TIERPOOL_CLI_PATH) +
                    " schedule calibrate --model tierpool_models:mlp --input 32x256"
                    " --optimizer sgd --device a100 --device-kind cpu --warmup 1 --repeat 3"
                    " -o " +
                    dir + "/p.json --measured " + dir + "/m.json --json " + dir +
                    "/t.json > /dev/null 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;

  auto measured = LoadSchedule(dir + "/m.json");
  ASSERT_TRUE(measured.ok()) << measured.status().ToString();
  int timed = 0;
  double total = 0;
  for (const auto& st : measured->steps()) {
    if (!st.measured()) continue;
    ++timed;
    EXPECT_GT(st.compute_us(), 0) << st.name();
    total += st.compute_us();
  }
  // 4 Linear layers forward and backward, ReLUs, the loss, and one SGD update per parameter.
  EXPECT_GE(timed, 20);
  EXPECT_EQ(timed, measured->steps_size());

  auto base = BuiltinProfile("a100");
  auto p = LoadProfile(dir + "/p.json");
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(p->name, "a100-calibrated");
  EXPECT_NE(p->op(OpClass::kGemm).compute_efficiency, base->op(OpClass::kGemm).compute_efficiency);
  EXPECT_EQ(p->op(OpClass::kConv).compute_efficiency, base->op(OpClass::kConv).compute_efficiency);
  EXPECT_EQ(p->peak(MathMode::kBf16), base->peak(MathMode::kBf16));

  // The cost model keeps each measured step's kernel time and adds only its wait for the host;
  // with no host time (CUDA graphs) the iteration is the kernels' sum.
  auto again = *measured;
  ApplyCostModel(*base, &again);
  double kernels = 0, after = 0;
  for (const auto& st : again.steps()) {
    EXPECT_GE(st.compute_us(), st.kernel_us()) << st.name();
    kernels += st.kernel_us();
    after += st.compute_us();
  }
  EXPECT_NEAR(kernels, total, 1e-6 * total);
  EXPECT_GE(after, kernels);
  auto graphs = *measured;
  auto no_host = *base;
  no_host.dispatch_us = 0;
  ApplyCostModel(no_host, &graphs);
  double graphed = 0;
  for (const auto& st : graphs.steps()) graphed += st.compute_us();
  EXPECT_NEAR(graphed, total, 1e-6 * total);
  // The calibrated profile's host time per op is fitted to the eager step.
  EXPECT_GT(p->dispatch_us, 0);

  std::ifstream t(dir + "/t.json");
  auto table = nlohmann::json::parse(t);
  ASSERT_TRUE(table.at("by_class").is_array());
  double measured_ms = 0;
  for (const auto& row : table.at("by_class")) measured_ms += row.at("measured_ms").get<double>();
  EXPECT_NEAR(measured_ms, total / 1000, 1e-6 + total / 1e6);
  EXPECT_NEAR(table.at("total").at("measured_ms").get<double>(), measured_ms, 1e-6 + total / 1e6);
  EXPECT_EQ(table.at("device"), "cpu");
  // The whole step as PyTorch runs it, beside the node-by-node sum (no tuned run on the CPU).
  EXPECT_GT(table.at("eager_iteration_ms").get<double>(), 0);
  EXPECT_TRUE(table.at("tuned_iteration_ms").is_null());
  // Off by default on the CPU, where an op's host time is its computation.
  EXPECT_TRUE(table.at("host_dispatches").empty());
  EXPECT_EQ(p->op(OpClass::kGemm).dispatches, base->op(OpClass::kGemm).dispatches);

  // --host-costs on: the eager step's ops under the host profiler set each class it saw to its
  // host time per op over an elementwise op's. On the CPU a GEMM's host time is its
  // computation, many elementwise ops' worth.
  cmd = std::string(TIERPOOL_CLI_PATH) +
        " schedule calibrate --model tierpool_models:mlp --input 32x256"
        " --optimizer sgd --device a100 --device-kind cpu --warmup 1 --repeat 3 --host-costs on"
        " -o " +
        dir + "/h.json --json " + dir + "/ht.json > /dev/null 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  auto h = LoadProfile(dir + "/h.json");
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  EXPECT_EQ(h->op(OpClass::kElementwise).dispatches, 1);
  EXPECT_GT(h->op(OpClass::kGemm).dispatches, 2);
  EXPECT_EQ(h->op(OpClass::kGemv).dispatches, h->op(OpClass::kGemm).dispatches);
  EXPECT_EQ(h->op(OpClass::kConv).dispatches, base->op(OpClass::kConv).dispatches);  // none seen
  std::ifstream ht(dir + "/ht.json");
  auto host_table = nlohmann::json::parse(ht);
  EXPECT_NEAR(host_table.at("host_dispatches").at("gemm").get<double>(),
              h->op(OpClass::kGemm).dispatches, 1e-3);
  EXPECT_GT(host_table.at("host_us_per_op").at("elementwise").get<double>(), 0);
  std::system(("rm -rf " + dir).c_str());
}

TEST(TorchHook, CalibrateRefusesBadArguments) {
  if (std::system("/usr/bin/python3 -c 'import torch' 2>/dev/null") != 0) GTEST_SKIP();
  std::string base = std::string(TIERPOOL_CLI_PATH) +
                     " schedule calibrate --model tierpool_models:mlp --input 4x256"
                     " --device-kind cpu -o /tmp/tierpool-never.json";
  EXPECT_NE(std::system((base + " --repeat 0 > /dev/null 2>&1").c_str()), 0);
  EXPECT_NE(std::system((base + " --device nosuch > /dev/null 2>&1").c_str()), 0);
  EXPECT_NE(std::system((base + " --host-costs maybe > /dev/null 2>&1").c_str()), 0);
  if (std::system("/usr/bin/python3 -c 'import torch, sys; sys.exit(torch.cuda.is_available())'"
                  " 2>/dev/null") == 0) {
    // No GPU here: asking for one is a clear error, not a CPU run that claims to be a GPU's.
    std::string cuda = std::string(TIERPOOL_CLI_PATH) +
                       " schedule calibrate --model tierpool_models:mlp --input 4x256"
                       " --device-kind cuda -o /tmp/tierpool-never.json > /dev/null 2>&1";
    EXPECT_NE(std::system(cuda.c_str()), 0);
  }
}

TEST(TorchHook, BadModelNamesFailCleanly) {
  if (std::system("/usr/bin/python3 -c 'import torch' 2>/dev/null") != 0) GTEST_SKIP();
  std::string base =
      std::string(TIERPOOL_CLI_PATH) + " schedule from-torch --input 4x4 -o /tmp/x.pb";
  EXPECT_NE(std::system((base + " --model no_such_module:f > /dev/null 2>&1").c_str()), 0);
  EXPECT_NE(std::system((base + " --model tierpool_models > /dev/null 2>&1").c_str()), 0);
  EXPECT_NE(std::system((base + " --model tierpool_models:nothing > /dev/null 2>&1").c_str()), 0);
}

}  // namespace
}  // namespace tierpool::prefetch
