// The ONNX importer on real graphs exported by python3-torch at test time.
#include "compiler_hooks/onnx_importer.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>

#include "prefetch/cost_model.h"
#include "tests/compiler_hooks/run_command.h"

namespace tierpool::hooks {
namespace {

std::string Dir() { return ::testing::TempDir() + "/onnx-" + std::to_string(::getpid()); }

// Exports a model with torch.onnx.export and prints its parameter count; empty if python3-torch
// is missing (the test is then skipped).
std::int64_t Export(const std::string& model_expr, const std::string& input_expr,
                    const std::string& file, const std::string& extra = "") {
  std::string script = Dir() + "/export.py";
  std::ofstream(script) << "import sys, torch\n"
                           "torch.manual_seed(0)\n"
                           "m = "
                        << model_expr << "\n"
                        << "m.eval()\n"
                           // Distinct values everywhere: the exporter shares equal initializers.
                           "for p in m.parameters(): p.data.normal_()\n"
                           "x = "
                        << input_expr << "\n"
                        << "torch.onnx.export(m, x, sys.argv[1], input_names=['x'], "
                           "opset_version=13"
                        << extra << ")\n"
                        << "print(sum(p.numel() for p in m.parameters()))\n";
  std::string cmd = "/usr/bin/python3 " + script + " " + file + " 2>/dev/null";
  FILE* p = ::popen(cmd.c_str(), "r");
  char buf[64] = {0};
  std::size_t n = p ? std::fread(buf, 1, sizeof(buf) - 1, p) : 0;
  int rc = p ? ::pclose(p) : -1;
  if (rc != 0 || n == 0) return -1;
  return std::atoll(buf);
}

class OnnxImporter : public ::testing::Test {
 protected:
  void SetUp() override {
    std::system(("mkdir -p " + Dir()).c_str());
    if (std::system("/usr/bin/python3 -c 'import torch' 2>/dev/null") != 0) {
      GTEST_SKIP() << "python3-torch is not installed";
    }
  }
};

std::uint64_t WeightBytes(const prefetch::Schedule& s) {
  std::uint64_t b = 0;
  for (const auto& t : s.tensors()) {
    if (t.kind() == schedule::WEIGHT) b += t.size_bytes();
  }
  return b;
}

TEST_F(OnnxImporter, SizesEveryWeightOfATransformer) {
  std::string file = Dir() + "/encoder.onnx";
  // Static shapes: the attention block's shape arithmetic is folded away at export.
  auto params = Export(
      // Independently initialised layers: the exporter shares identical initializers, which
      // nn.TransformerEncoder's deep-copied layers would be.
      "torch.nn.Sequential(*[torch.nn.TransformerEncoderLayer(64, 4, 128, batch_first=True) "
      "for _ in range(2)])",
      "torch.randn(8, 16, 64)", file);
  ASSERT_GT(params, 0) << "export failed";
  OnnxImportOptions o;
  auto s = ImportOnnx(file, o);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(WeightBytes(*s), static_cast<std::uint64_t>(params) * 4);
  EXPECT_TRUE(s->repeats());
  // The batch reached every activation: the input is 8 x 16 x 64 floats.
  bool saw_input = false;
  double flops = 0;
  for (const auto& t : s->tensors()) {
    if (t.kind() == schedule::INPUT) {
      saw_input = true;
      EXPECT_EQ(t.size_bytes(), 8u * 16 * 64 * 4);
    }
  }
  for (const auto& st : s->steps()) flops += st.flops();
  EXPECT_TRUE(saw_input);
  EXPECT_GT(flops, 0);  // MatMul / Gemm FLOPs were counted
  auto d = prefetch::BuiltinProfile("h100");
  prefetch::ApplyCostModel(*d, &*s);
  int aliases = 0;
  for (const auto& st : s->steps()) {
    if (prefetch::RunsNoKernel(st)) {
      ++aliases;
      EXPECT_EQ(st.compute_us(), 0) << st.op_type();  // Reshape, Identity, ...: no kernel
    } else {
      EXPECT_GT(st.compute_us(), 0) << st.op_type();
    }
  }
  EXPECT_GT(aliases, 0);
}

// nn.TransformerEncoder's attention exports Shape/Gather arithmetic that shape inference cannot
// follow; the importer folds it into constants. The nodes it folded used to stay as steps that
// defined their outputs a second time: two tensors of one name (now refused by Validate, since
// names are a live job's object keys).
TEST_F(OnnxImporter, FoldedShapeArithmeticIsNotDefinedTwice) {
  std::string file = Dir() + "/encoder_folded.onnx";
  auto params = Export(
      "torch.nn.TransformerEncoder(torch.nn.TransformerEncoderLayer(64, 4, 128, dropout=0.0, "
      "batch_first=True), 2)",
      "torch.randn(2, 16, 64)", file);
  ASSERT_GT(params, 0) << "export failed";
  auto s = ImportOnnx(file, {});
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  std::set<std::string> names;
  int folded = 0;
  for (const auto& t : s->tensors()) {
    EXPECT_TRUE(names.insert(t.name()).second) << t.name() << " is defined twice";
    if (t.kind() == schedule::OTHER) {
      ++folded;
      EXPECT_EQ(t.def_step(), -1) << t.name();
    }
  }
  EXPECT_GT(folded, 0) << "nothing was folded: the test no longer covers the case";
  EXPECT_EQ(WeightBytes(*s), static_cast<std::uint64_t>(params) * 4);
  for (const auto& st : s->steps()) EXPECT_NE(st.op_type(), "Shape") << st.name();
}

TEST_F(OnnxImporter, GraphExportedWithoutWeightsTakesThemAsInputs) {
  std::string file = Dir() + "/mlp_noweights.onnx";
  // Weights exported as graph inputs instead of initializers.
  auto params = Export(
      "torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))",
      "torch.randn(4, 32)", file, ", export_params=False");
  ASSERT_GT(params, 0);
  auto s = ImportOnnx(file, {});
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(WeightBytes(*s), static_cast<std::uint64_t>(params) * 4);
}

TEST_F(OnnxImporter, ConvolutionFlopsAreCounted) {
  std::string file = Dir() + "/conv.onnx";
  auto params = Export("torch.nn.Conv2d(3, 8, 3, padding=1)", "torch.randn(1, 3, 16, 16)", file);
  ASSERT_GT(params, 0);
  auto s = ImportOnnx(file, {});
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  ASSERT_EQ(s->steps_size(), 1);
  // 8 x 16 x 16 outputs, each 3 x 3 x 3 multiply-adds.
  EXPECT_DOUBLE_EQ(s->steps(0).flops(), 2.0 * 8 * 16 * 16 * 27);
}

TEST_F(OnnxImporter, BadInputsGetClearErrors) {
  EXPECT_EQ(ImportOnnx(Dir() + "/missing.onnx", {}).status().code(), StatusCode::kNotFound);
  std::string junk = Dir() + "/junk.onnx";
  std::ofstream(junk) << "this is not a protobuf \xff\xff\xff";
  auto r = ImportOnnx(junk, {});
  EXPECT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("ONNX"), std::string::npos) << r.status().ToString();
  // A second symbolic dimension nobody gave a value for.
  std::string file = Dir() + "/seq.onnx";
  auto params = Export("torch.nn.Linear(8, 8)", "torch.randn(2, 5, 8)", file,
                       ", dynamic_axes={'x': {0: 'batch', 1: 'seq'}}");
  ASSERT_GT(params, 0);
  auto s = ImportOnnx(file, {});
  EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.status().message().find("--dim seq=N"), std::string::npos) << s.status().ToString();
  OnnxImportOptions o;
  o.dims["seq"] = 5;
  EXPECT_TRUE(ImportOnnx(file, o).ok());
}

// `schedule show` answers --json as every inspecting command does ("-": standard output), and
// global flags may come first.
TEST_F(OnnxImporter, ScheduleShowSpeaksJson) {
  std::string file = Dir() + "/mlp_show.onnx", pb = Dir() + "/mlp_show.pb";
  auto params = Export(
      "torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))",
      "torch.randn(4, 32)", file, "");
  ASSERT_GT(params, 0);
  const std::string cli = TIERPOOL_CLI_PATH;
  ASSERT_EQ(
      std::system((cli + " schedule from-onnx " + file + " -o " + pb + " >/dev/null").c_str()), 0);
  FILE* p =
      ::popen((cli + " --socket /nonexistent schedule show " + pb + " --json -").c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string out;
  char buf[4096];
  for (std::size_t n; (n = std::fread(buf, 1, sizeof(buf), p)) > 0;) out.append(buf, n);
  ASSERT_EQ(::pclose(p), 0) << out;
  auto j = nlohmann::json::parse(out);
  EXPECT_GT(j["steps"].get<int>(), 0);
  EXPECT_EQ(j["by_kind"]["WEIGHT"]["bytes"].get<std::uint64_t>(),
            static_cast<std::uint64_t>(params) * 4);
  EXPECT_GT(j["peak_bytes_without_offload"].get<std::uint64_t>(), 0u);
}

// `tierpool plan` says what its plan does on the profile's clock (before, only its action
// count and peak), the same figures as `replay --policy planned` at that budget (one where
// the link shows: 30% stalls a little), and as `replay --plan` of the plan it wrote.
TEST_F(OnnxImporter, PlanSaysWhatItsReplayShows) {
  std::string file = Dir() + "/mlp_plan.onnx", pb = Dir() + "/mlp_plan.pb",
              plan = Dir() + "/mlp_plan-plan.pb";
  ASSERT_GT(Export("torch.nn.Sequential(*[m for _ in range(6) for m in "
                   "(torch.nn.Linear(512, 512), torch.nn.ReLU())])",
                   "torch.randn(256, 512)", file, ""),
            0);
  const std::string cli = TIERPOOL_CLI_PATH;
  ASSERT_EQ(RunCommand(cli + " schedule from-onnx " + file + " -o " + pb).second, 0);
  auto [planned, rc] = RunCommand(cli + " plan " + pb + " --device h100 --hbm 30% -o " + plan);
  ASSERT_EQ(rc, 0) << planned;
  auto [replayed, rc2] =
      RunCommand(cli + " replay " + pb + " --device h100 --hbm 30% --policy planned");
  ASSERT_EQ(rc2, 0) << replayed;
  const std::regex stall("stall ([0-9.]+) ms");
  std::smatch a, b;
  ASSERT_TRUE(std::regex_search(planned, a, std::regex("replayed: iteration [0-9.]+ ms")))
      << planned;
  ASSERT_TRUE(std::regex_search(planned, a, stall)) << planned;
  ASSERT_TRUE(std::regex_search(replayed, b, stall)) << replayed;
  EXPECT_EQ(a[1].str(), b[1].str()) << planned << replayed;
  EXPECT_EQ(::access(plan.c_str(), R_OK), 0);
  // The saved plan replayed from its file (`replay --plan`, at its own budget) stalls the same.
  auto [from_file, rc3] = RunCommand(cli + " replay " + pb + " --device h100 --plan " + plan);
  ASSERT_EQ(rc3, 0) << from_file;
  std::smatch c;
  ASSERT_TRUE(std::regex_search(from_file, c, stall)) << from_file;
  EXPECT_EQ(c[1].str(), a[1].str()) << from_file;
}

}  // namespace
}  // namespace tierpool::hooks
