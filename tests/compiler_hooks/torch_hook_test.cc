// The PyTorch hook through `tierpool schedule from-torch`, then a planned replay of what it made.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>

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
