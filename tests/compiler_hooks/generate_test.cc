// Generation schedules (prefill and decodes with a KV cache) from PyTorch and from ONNX decoder
// exports: the cache grows by exactly the bytes of each token, carries from one call to the
// next, means the same bytes on both paths, and plans replay without a breach.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <map>

#include "compiler_hooks/onnx_generate.h"
#include "prefetch/cost_model.h"
#include "prefetch/planner.h"
#include "prefetch/simulator.h"

namespace tierpool::hooks {
namespace {

using prefetch::Schedule;

// tierpool_models.llama_decoder(): 2 layers, each caching a key and a value of
// kv_heads 2 x head_dim 32 float32 values per token.
constexpr std::uint64_t kTokenBytes = 2 * 32 * 4;
constexpr int kCachedPerCall = 2 * 2;

std::string Tmp(const std::string& name) {
  return ::testing::TempDir() + "/gen-" + std::to_string(::getpid()) + "-" + name;
}

bool HaveTorch() {
  return std::system("/usr/bin/python3 -c 'import torch, functorch' 2>/dev/null") == 0;
}

Result<Schedule> FromTorch(const std::string& flags) {
  std::string out = Tmp("torch.pb");
  std::string cmd = std::string(TIERPOOL_CLI_PATH) +
                    " schedule from-torch --model tierpool_models:llama_decoder " + flags + " -o " +
                    out + " > /dev/null 2>&1";
  if (std::system(cmd.c_str()) != 0) return Status::Internal("failed: " + cmd);
  auto s = prefetch::LoadSchedule(out);
  ::unlink(out.c_str());
  return s;
}

std::string ExportDecoder() {
  std::string file = Tmp("decoder.onnx");
  std::string cmd = "/usr/bin/python3 " + std::string(TIERPOOL_SOURCE_DIR) +
                    "/tests/compiler_hooks/export_decoder.py " + file + " > /dev/null 2>&1";
  return std::system(cmd.c_str()) == 0 ? file : "";
}

// The cached tensors of each call ("prefill", "decode0", ...; "prompt" for the cache that
// arrives in the first step of a decode-only schedule). Every one is made by a step.
std::map<std::string, std::vector<const schedule::Tensor*>> CacheByCall(const Schedule& s) {
  std::map<std::string, std::vector<const schedule::Tensor*>> by;
  for (const auto& t : s.tensors()) {
    if (t.kind() != schedule::KV_CACHE) continue;
    EXPECT_GE(t.def_step(), 0) << t.name();
    by[t.name().substr(0, t.name().find('/'))].push_back(&t);
  }
  return by;
}

// Every call's cache holds its context's tokens, exactly; each decode's cache is read by the
// next call (and by nothing before it was made).
void ExpectGrowingCache(const Schedule& s, std::uint64_t prompt, int new_tokens, bool decode_only,
                        std::uint64_t batch = 1) {
  const std::uint64_t token_bytes = batch * kTokenBytes;
  auto by = CacheByCall(s);
  ASSERT_EQ(by.size(), static_cast<std::size_t>(new_tokens) + 1) << s.name();
  const auto& first = by[decode_only ? "prompt" : "prefill"];
  ASSERT_EQ(first.size(), static_cast<std::size_t>(kCachedPerCall));
  for (const auto* t : first) EXPECT_EQ(t->size_bytes(), prompt * token_bytes) << t->name();
  for (int d = 0; d < new_tokens; ++d) {
    const auto& cache = by["decode" + std::to_string(d)];
    ASSERT_EQ(cache.size(), static_cast<std::size_t>(kCachedPerCall)) << d;
    for (const auto* t : cache) {
      EXPECT_EQ(t->size_bytes(), (prompt + static_cast<std::uint64_t>(d) + 1) * token_bytes)
          << t->name();
      ASSERT_GE(t->def_step(), 0);
      // Grown by an append of one token (read and written), not a copy of the whole cache.
      EXPECT_EQ(s.steps(t->def_step()).bytes_touched(), 2 * token_bytes) << t->name();
      for (auto u : t->use_steps()) {
        EXPECT_GT(u, static_cast<std::uint32_t>(t->def_step()));
      }
      if (d + 1 < new_tokens) {
        EXPECT_FALSE(t->use_steps().empty()) << t->name();
      }
    }
  }
}

std::uint64_t KvBytes(const Schedule& s) {
  std::uint64_t b = 0;
  for (const auto& t : s.tensors()) {
    if (t.kind() == schedule::KV_CACHE) b += t.size_bytes();
  }
  return b;
}

void ExpectPlansReplay(const Schedule& s) {
  auto d = prefetch::BuiltinProfile("gh200");
  Schedule timed = s;
  prefetch::ApplyCostModel(*d, &timed);
  prefetch::Lifetimes tl(timed);
  for (double f : {0.9, 0.6}) {
    auto budget = static_cast<std::uint64_t>(static_cast<double>(tl.peak_bytes()) * f);
    auto plan = prefetch::BuildPlan(timed, tl, *d, {.hbm_budget = budget});
    ASSERT_TRUE(plan.ok()) << plan.status().ToString();
    auto r = prefetch::Replay(
        timed, tl, *d,
        {.policy = prefetch::Policy::kPlanned, .hbm_budget = budget, .plan = &*plan});
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(r->missing_at_use + r->budget_violations + r->bad_actions, 0u) << f;
    EXPECT_LE(r->peak_hbm, budget);
  }
}

TEST(Generate, FromTorchPrefillThenDecodesGrowTheCacheByOneTokenEach) {
  if (!HaveTorch()) GTEST_SKIP() << "python3-torch is not installed";
  auto s = FromTorch("--generate 16:4");
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_TRUE(s->repeats());
  ExpectGrowingCache(*s, 16, 4, false);
  ExpectPlansReplay(*s);
  // Weights are one set shared by every call, not one per call.
  std::uint64_t weights = 0;
  for (const auto& t : s->tensors()) {
    if (t.kind() == schedule::WEIGHT) weights += t.size_bytes();
  }
  EXPECT_EQ(weights, 2032896u * 4);  // llama_decoder()'s parameters, float32
}

TEST(Generate, FromTorchDecodeOnlyStartsWithThePromptsCache) {
  if (!HaveTorch()) GTEST_SKIP() << "python3-torch is not installed";
  auto s = FromTorch("--generate 64:3 --decode-only --batch 2");
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  ExpectGrowingCache(*s, 64, 3, true, /*batch=*/2);  // two sequences: twice the bytes per token
  EXPECT_TRUE(s->repeats());  // request after request: weights stay, each cache arrives anew
  // The cache's arrival, then decodes only.
  ASSERT_GT(s->steps_size(), 1);
  EXPECT_EQ(s->steps(0).name(), "prompt/cache_arrives");
  for (int i = 1; i < s->steps_size(); ++i) {
    EXPECT_EQ(s->steps(i).name().rfind("decode", 0), 0u) << s->steps(i).name();
  }
}

TEST(Generate, FromTorchRefusesBadSpecs) {
  if (!HaveTorch()) GTEST_SKIP() << "python3-torch is not installed";
  EXPECT_FALSE(FromTorch("--generate 16").ok());
  EXPECT_FALSE(FromTorch("--generate 0:4").ok());
  EXPECT_FALSE(FromTorch("--generate 4:0 --decode-only").ok());
  // A model that is not a decoder of the documented form.
  std::string cmd = std::string(TIERPOOL_CLI_PATH) +
                    " schedule from-torch --model tierpool_models:mlp --generate 4:2 -o " +
                    Tmp("mlp.pb") + " > /dev/null 2>&1";
  EXPECT_NE(std::system(cmd.c_str()), 0);
}

TEST(Generate, FromOnnxDecoderExportMatchesTheTorchSchedule) {
  if (!HaveTorch()) GTEST_SKIP() << "python3-torch is not installed";
  std::string file = ExportDecoder();
  ASSERT_FALSE(file.empty());
  OnnxGenerateOptions o{.prompt = 8, .new_tokens = 3};
  auto s = GenerateFromOnnx(file, o);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  ExpectGrowingCache(*s, 8, 3, false);
  ExpectPlansReplay(*s);
  auto t = FromTorch("--generate 8:3");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(KvBytes(*s), KvBytes(*t));

  // In chunks, and decode-only: the same cache at the end.
  o.prefill_chunk = 3;
  auto chunked = GenerateFromOnnx(file, o);
  ASSERT_TRUE(chunked.ok()) << chunked.status().ToString();
  auto by = CacheByCall(*chunked);
  ASSERT_EQ(by["prefill2"].size(), static_cast<std::size_t>(kCachedPerCall));
  for (const auto* c : by["prefill2"]) EXPECT_EQ(c->size_bytes(), 8 * kTokenBytes);
  o = {.prompt = 8, .new_tokens = 3, .decode_only = true};
  auto decode = GenerateFromOnnx(file, o);
  ASSERT_TRUE(decode.ok()) << decode.status().ToString();
  ExpectGrowingCache(*decode, 8, 3, true);
  ::unlink(file.c_str());
}

TEST(Generate, FromOnnxRefusesGraphsWithoutACache) {
  if (!HaveTorch()) GTEST_SKIP() << "python3-torch is not installed";
  std::string file = Tmp("linear.onnx");
  std::string cmd =
      "/usr/bin/python3 -c \"import torch, sys; torch.onnx.export(torch.nn.Linear(4, 4), "
      "torch.randn(2, 4), sys.argv[1], input_names=['x'])\" " +
      file + " > /dev/null 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  auto s = GenerateFromOnnx(file, {.prompt = 4, .new_tokens = 2});
  EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.status().message().find("past"), std::string::npos) << s.status().ToString();
  EXPECT_EQ(GenerateFromOnnx(file, {.prompt = 0, .new_tokens = 2}).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(GenerateFromOnnx(Tmp("missing.onnx"), {.prompt = 4}).status().code(),
            StatusCode::kNotFound);
  ::unlink(file.c_str());
}

}  // namespace
}  // namespace tierpool::hooks
