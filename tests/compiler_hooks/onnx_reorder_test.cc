// A reordered schedule written back into its ONNX model: the node list in the new order, every
// dimension as it was, and an order the model's own edges forbid refused.
#include "compiler_hooks/onnx_reorder.h"

#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "compiler_hooks/onnx_model.h"
#include "prefetch/reorder.h"
#include "tests/compiler_hooks/run_command.h"

namespace tierpool::hooks {
namespace {

class OnnxReorder : public ::testing::Test {
 protected:
  void SetUp() override {
    model_.set_ir_version(7);
    model_.add_opset_import()->set_version(13);
    g_ = model_.mutable_graph();
    g_->set_name("branch");
    Value(g_->add_input(), "x", {"batch", "1024"});
  }
  // A float tensor value with these dims (a name is a symbolic dimension).
  static void Value(onnx::ValueInfoProto* v, const std::string& name,
                    const std::vector<std::string>& dims) {
    v->set_name(name);
    auto* t = v->mutable_type()->mutable_tensor_type();
    t->set_elem_type(onnx::TensorProto::FLOAT);
    for (const auto& d : dims) {
      auto* dim = t->mutable_shape()->add_dim();
      if (std::isdigit(static_cast<unsigned char>(d[0]))) {
        dim->set_dim_value(std::stoll(d));
      } else {
        dim->set_dim_param(d);
      }
    }
  }
  onnx::NodeProto* Node(const std::string& name, const std::string& op, std::vector<std::string> in,
                        const std::string& out) {
    auto* n = g_->add_node();
    n->set_name(name);
    n->set_op_type(op);
    for (const auto& i : in) n->add_input(i);
    n->add_output(out);
    return n;
  }
  static void Axis(onnx::NodeProto* n, std::int64_t axis) {
    auto* a = n->add_attribute();
    a->set_name("axis");
    a->set_type(onnx::AttributeProto::INT);
    a->set_i(axis);
  }
  std::string Save(const std::string& file) {
    std::string path = ::testing::TempDir() + "/" + std::to_string(::getpid()) + "-" + file;
    std::ofstream out(path, std::ios::binary);
    model_.SerializeToOstream(&out);
    return path;
  }
  static std::vector<std::string> StepNames(const prefetch::Schedule& s) {
    std::vector<std::string> names;
    for (const auto& st : s.steps()) names.push_back(st.name());
    return names;
  }

  // x -> big (4x wider) -> sum_big, and x -> wide -> relu -> sum_wide; the sums added into
  // `sum`. In file order `big` is held across the whole other branch.
  void Branch(const std::string& sum) {
    Axis(Node("big", "Concat", {"x", "x", "x", "x"}, "b"), 1);
    Axis(Node("wide", "Concat", {"x", "x", "x", "x"}, "a1"), 1);
    Node("relu", "Relu", {"a1"}, "a2");
    Node("sum_wide", "ReduceSum", {"a2"}, "a3");
    Node("sum_big", "ReduceSum", {"b"}, "c");
    Node("add", "Add", {"a3", "c"}, sum);
  }

  onnx::ModelProto model_;
  onnx::GraphProto* g_ = nullptr;
};

// x -> big (4x wider) ... sum_big, and x -> wide -> relu -> sum_wide; the sums added, then
// broadcast back to x's shape by a Shape node that import folds (no step of its own).
TEST_F(OnnxReorder, TheModelRunsInTheNewOrderWithItsDimensionsKept) {
  Branch("y0");
  Node("shape", "Shape", {"x"}, "sh");
  Node("expand", "Expand", {"y0", "sh"}, "y");
  Value(g_->add_output(), "y", {"batch", "1024"});
  const std::string path = Save("branch.onnx");

  OnnxImportOptions options;
  options.batch = 8;
  auto s = ImportOnnx(path, options);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  ASSERT_EQ(StepNames(*s), (std::vector<std::string>{"big", "wide", "relu", "sum_wide", "sum_big",
                                                     "add", "expand"}));
  auto r = prefetch::LowerPeakOrder(*s);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_GT(r->moved, 0u);
  const std::string out = path + ".reordered.onnx";
  ASSERT_TRUE(WriteReorderedOnnx(path, options, *s, r->order, out).ok());

  // Imported again, the written model is the reordered schedule.
  auto again = ImportOnnx(out, options);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(StepNames(*again), StepNames(r->schedule));
  EXPECT_EQ(StepNames(*again), (std::vector<std::string>{"big", "sum_big", "wide", "relu",
                                                         "sum_wide", "add", "expand"}));
  EXPECT_EQ(prefetch::Lifetimes(*again).peak_bytes(),
            prefetch::Lifetimes(r->schedule).peak_bytes());
  EXPECT_LT(prefetch::Lifetimes(*again).peak_bytes(), prefetch::Lifetimes(*s).peak_bytes());
  // Every node is there, the folded Shape among them, and the batch is still symbolic.
  auto written = LoadOnnxModel(out, 1ull << 20);
  ASSERT_TRUE(written.ok());
  ASSERT_EQ(written->graph().node_size(), g_->node_size());
  EXPECT_EQ(written->graph().input(0).type().tensor_type().shape().dim(0).dim_param(), "batch");
  int shape_at = -1, expand_at = -1;
  for (int i = 0; i < written->graph().node_size(); ++i) {
    if (written->graph().node(i).name() == "shape") shape_at = i;
    if (written->graph().node(i).name() == "expand") expand_at = i;
  }
  EXPECT_GE(shape_at, 0);
  EXPECT_LT(shape_at, expand_at);
}

// The command: `tierpool schedule reorder MODEL.onnx --onnx-out` writes the model in the order
// of the schedule it writes, and refuses --onnx-out for a schedule file.
TEST_F(OnnxReorder, TheCommandWritesTheModelAndTheSchedule) {
  Branch("y");
  Value(g_->add_output(), "y", {"1", "1"});
  const std::string path = Save("cli.onnx"), onnx_out = path + ".out.onnx", pb = path + ".pb";
  const std::string cli = TIERPOOL_CLI_PATH;
  auto [out, rc] = RunCommand(cli + " schedule reorder " + path + " --batch 4 -o " + pb +
                              " --onnx-out " + onnx_out);
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("4 steps moved for a lower peak"), std::string::npos) << out;
  auto written = prefetch::LoadSchedule(pb);
  ASSERT_TRUE(written.ok()) << written.status().ToString();
  OnnxImportOptions options;
  options.batch = 4;
  auto again = ImportOnnx(onnx_out, options);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(StepNames(*again), StepNames(*written));
  EXPECT_EQ(StepNames(*again),
            (std::vector<std::string>{"big", "sum_big", "wide", "relu", "sum_wide", "add"}));
  // --updates-only moves nothing here (no optimizer), and --onnx-out needs a model.
  std::tie(out, rc) = RunCommand(cli + " schedule reorder " + path + " --updates-only -o " + pb +
                                 " --onnx-out " + onnx_out);
  ASSERT_EQ(rc, 0) << out;
  auto same = ImportOnnx(onnx_out, options);
  ASSERT_TRUE(same.ok());
  EXPECT_EQ(StepNames(*same).front(), "big");
  EXPECT_EQ(StepNames(*same)[1], "wide");
  std::tie(out, rc) =
      RunCommand(cli + " schedule reorder " + pb + " -o " + pb + ".2 --onnx-out " + onnx_out);
  EXPECT_NE(rc, 0);
  EXPECT_NE(out.find("--onnx-out needs a MODEL.onnx"), std::string::npos) << out;
}

// `expand` reads x's shape only through the folded Shape of relu's output, so the schedule
// lets it run first; the model does not.
TEST_F(OnnxReorder, AnOrderTheModelsEdgesForbidIsRefused) {
  Node("relu", "Relu", {"x"}, "a1");
  Node("shape", "Shape", {"a1"}, "sh");
  Node("expand", "Expand", {"x", "sh"}, "y");
  Value(g_->add_output(), "a1", {"batch", "1024"});
  Value(g_->add_output(), "y", {"batch", "1024"});
  const std::string path = Save("folded-edge.onnx");
  auto s = ImportOnnx(path, {});
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  ASSERT_EQ(StepNames(*s), (std::vector<std::string>{"relu", "expand"}));
  ASSERT_TRUE(prefetch::CheckOrder(*s, {1, 0}).ok());
  const std::string out = path + ".reordered.onnx";
  Status st = WriteReorderedOnnx(path, {}, *s, {1, 0}, out);
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition) << st.ToString();
  EXPECT_NE(st.message().find("expand"), std::string::npos) << st.ToString();
  // The order as it was is written as it was.
  EXPECT_TRUE(WriteReorderedOnnx(path, {}, *s, {0, 1}, out).ok());
  // A schedule from another model does not match this one's nodes.
  auto other = *s;
  other.mutable_tensors(static_cast<int>(other.tensors_size() - 1))->set_name("elsewhere");
  EXPECT_EQ(WriteReorderedOnnx(path, {}, other, {0, 1}, out).code(), StatusCode::kInvalidArgument);
}

// What ONNX's shape inference takes on trust is checked before it runs (the model builder of
// the reorder tests). Fuzzing found this model crashing libonnx's inference: a Shape of a value
// nothing defines, under an opset the library does not know.
class OnnxImportChecks : public OnnxReorder {};

TEST_F(OnnxImportChecks, AnUnknownOpsetOrAnUndefinedValueIsAnErrorNotACrash) {
  Node("shape", "Shape", {"u"}, "sh");
  Node("expand", "Expand", {"x", "sh"}, "y");
  Value(g_->add_output(), "y", {"batch", "1024"});
  model_.mutable_opset_import(0)->set_version(91);
  auto s = ImportOnnx(Save("opset91.onnx"), {});
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.status().message().find("opset 91"), std::string::npos) << s.status().ToString();

  model_.mutable_opset_import(0)->set_version(13);
  s = ImportOnnx(Save("undefined.onnx"), {});
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("reads 'u', which nothing before it defines"),
            std::string::npos)
      << s.status().ToString();

  // A value made twice, and no opset of the default domain at all.
  g_->mutable_node(0)->set_input(0, "x");
  Node("again", "Relu", {"x"}, "y");
  s = ImportOnnx(Save("twice.onnx"), {});
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("makes 'y', which is already defined"), std::string::npos)
      << s.status().ToString();
  g_->mutable_node()->RemoveLast();
  model_.mutable_opset_import(0)->set_domain("com.example");
  s = ImportOnnx(Save("no-default-opset.onnx"), {});
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("no opset of the default domain"), std::string::npos)
      << s.status().ToString();
  // Put right, it imports.
  model_.mutable_opset_import(0)->set_domain("");
  s = ImportOnnx(Save("fixed.onnx"), {});
  EXPECT_TRUE(s.ok()) << s.status().ToString();
}

}  // namespace
}  // namespace tierpool::hooks
