// Folding of shape arithmetic: each op's values and, as ONNX's shape inference checks them
// against the graph's own, its result's rank.
#include "compiler_hooks/onnx_fold.h"

#include <gtest/gtest.h>

#include <limits>

namespace tierpool::hooks {
namespace {

class Fold : public ::testing::Test {
 protected:
  void Const(const std::string& name, std::vector<std::int64_t> v, std::vector<std::int64_t> dims) {
    auto* t = g_.add_initializer();
    t->set_name(name);
    t->set_data_type(onnx::TensorProto::INT64);
    for (auto d : dims) t->add_dims(d);
    for (auto x : v) t->add_int64_data(x);
  }
  onnx::NodeProto* Node(const std::string& op, std::vector<std::string> in,
                        const std::string& out) {
    auto* n = g_.add_node();
    n->set_op_type(op);
    for (const auto& i : in) n->add_input(i);
    n->add_output(out);
    return n;
  }
  void Ints(onnx::NodeProto* n, const std::string& name, std::vector<std::int64_t> v) {
    auto* a = n->add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::INTS);
    for (auto x : v) a->add_ints(x);
  }
  void Int(onnx::NodeProto* n, const std::string& name, std::int64_t v) {
    auto* a = n->add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::INT);
    a->set_i(v);
  }
  // The folded value of `name`: its values and dims, from the initializer folding added.
  std::pair<std::vector<std::int64_t>, std::vector<std::int64_t>> Folded(const std::string& name) {
    for (const auto& t : g_.initializer()) {
      if (t.name() != name) continue;
      std::vector<std::int64_t> v(t.int64_data().begin(), t.int64_data().end());
      if (t.data_type() == onnx::TensorProto::BOOL)
        v.assign(t.int32_data().begin(), t.int32_data().end());
      return {v, {t.dims().begin(), t.dims().end()}};
    }
    ADD_FAILURE() << name << " was not folded";
    return {};
  }
  int Run(std::unordered_map<std::string, std::vector<std::int64_t>> shapes = {}) {
    return FoldShapeArithmetic(&g_, shapes);
  }
  onnx::GraphProto g_;
};

using V = std::vector<std::int64_t>;

TEST_F(Fold, ShapesGathersAndUnsqueezesKeepTheirRanks) {
  Node("Shape", {"x"}, "shape");
  Const("one", {1}, {});
  Node("Gather", {"shape", "one"}, "dim");  // a scalar
  Const("axes0", {0}, {1});
  Node("Unsqueeze", {"dim", "axes0"}, "dim1");         // [1]
  Node("Unsqueeze", {"shape", "axes0"}, "shape_row");  // [1, 3]
  Node("Add", {"dim", "dim1"}, "sum");                 // scalar + [1]: [1], not a scalar
  Node("Squeeze", {"dim1"}, "back");                   // scalar again
  EXPECT_EQ(Run({{"x", {2, 3, 4}}}), 6);
  EXPECT_EQ(Folded("shape"), std::make_pair(V{2, 3, 4}, V{3}));
  EXPECT_EQ(Folded("dim"), std::make_pair(V{3}, V{}));
  EXPECT_EQ(Folded("dim1"), std::make_pair(V{3}, V{1}));
  EXPECT_EQ(Folded("shape_row"), std::make_pair(V{2, 3, 4}, V{1, 3}));
  EXPECT_EQ(Folded("sum"), std::make_pair(V{6}, V{1}));
  EXPECT_EQ(Folded("back"), std::make_pair(V{3}, V{}));
}

TEST_F(Fold, ModTakesTheDivisorsSignAndDivisionByZeroStops) {
  Const("a", {-7, 7, 6}, {3});
  Const("b", {3, -3, 3}, {3});
  Node("Mod", {"a", "b"}, "m");
  Const("zero", {0}, {});
  Node("Div", {"a", "zero"}, "never");
  Run();
  EXPECT_EQ(Folded("m").first, (V{2, -2, 0}));
  for (const auto& t : g_.initializer()) EXPECT_NE(t.name(), "never");
}

TEST_F(Fold, SlicesAnyAxisWithNegativeSteps) {
  Const("x", {0, 1, 2, 3, 4, 5}, {3, 2});
  Const("start", {-1}, {1});
  Const("end", {std::numeric_limits<std::int64_t>::min()}, {1});
  Const("axis0", {0}, {1});
  Const("back", {-1}, {1});
  Node("Slice", {"x", "start", "end", "axis0", "back"}, "reversed");
  Const("s1", {1}, {1});
  Const("e1", {2}, {1});
  Const("axis1", {1}, {1});
  Node("Slice", {"x", "s1", "e1", "axis1"}, "column");
  Run();
  EXPECT_EQ(Folded("reversed"), std::make_pair(V{4, 5, 2, 3, 0, 1}, V{3, 2}));
  EXPECT_EQ(Folded("column"), std::make_pair(V{1, 3, 5}, V{3, 1}));
}

TEST_F(Fold, TransposesAndReshapes) {
  Const("x", {0, 1, 2, 3, 4, 5}, {3, 2});
  Node("Transpose", {"x"}, "t");
  Const("flat", {-1}, {1});
  Node("Reshape", {"t", "flat"}, "r");
  Run();
  EXPECT_EQ(Folded("t"), std::make_pair(V{0, 2, 4, 1, 3, 5}, V{2, 3}));
  EXPECT_EQ(Folded("r"), std::make_pair(V{0, 2, 4, 1, 3, 5}, V{6}));
}

// torch's export of expand(-1, 4, -1): Where(Equal(shape, -1s), 1s, shape).
TEST_F(Fold, ExpandTargetWithMinusOnes) {
  Const("target", {-1, 4, -1}, {3});
  Const("len", {3}, {1});
  auto* fill = Node("ConstantOfShape", {"len"}, "ones");
  auto* value = fill->add_attribute();
  value->set_name("value");
  value->set_type(onnx::AttributeProto::TENSOR);
  value->mutable_t()->set_data_type(onnx::TensorProto::INT64);
  value->mutable_t()->add_dims(1);
  value->mutable_t()->add_int64_data(1);
  Const("minus", {-1}, {});
  Node("Mul", {"ones", "minus"}, "minus_ones");
  Node("Equal", {"target", "minus_ones"}, "is_any");
  Node("Where", {"is_any", "ones", "target"}, "shape");
  Run();
  EXPECT_EQ(Folded("ones"), std::make_pair(V{1, 1, 1}, V{3}));
  EXPECT_EQ(Folded("is_any").first, (V{1, 0, 1}));
  EXPECT_EQ(Folded("shape"), std::make_pair(V{1, 4, 1}, V{3}));
}

// torch's export of repeat_interleave(2, dim=1) over two heads: the counts expanded to one per
// head, split, and each concatenated into a shape.
TEST_F(Fold, ExpandsAndSplitsRepeatCounts) {
  Const("count", {2}, {});
  Const("heads", {2}, {1});
  Node("Expand", {"count", "heads"}, "counts");  // [2, 2]
  Const("one_each", {1, 1}, {2});
  auto* split = Node("Split", {"counts", "one_each"}, "first");
  split->add_output("second");
  Const("m", {3, 4}, {2, 1});
  Const("row", {1, 3}, {2});
  Node("Expand", {"m", "row"}, "grid");  // a column broadcast across three
  Const("odd", {0, 1, 2, 3, 4}, {5});
  auto* uneven = Node("Split", {"odd"}, "a");
  uneven->add_output("b");  // no sizes: as even as two parts allow, the last shorter
  Const("bad", {3}, {1});
  Node("Expand", {"odd", "bad"}, "never");  // 5 does not broadcast to 3
  Run();
  EXPECT_EQ(Folded("counts"), std::make_pair(V{2, 2}, V{2}));
  EXPECT_EQ(Folded("first"), std::make_pair(V{2}, V{1}));
  EXPECT_EQ(Folded("second"), std::make_pair(V{2}, V{1}));
  EXPECT_EQ(Folded("grid"), std::make_pair(V{3, 3, 3, 4, 4, 4}, V{2, 3}));
  EXPECT_EQ(Folded("a"), std::make_pair(V{0, 1, 2}, V{3}));
  EXPECT_EQ(Folded("b"), std::make_pair(V{3, 4}, V{2}));
  for (const auto& t : g_.initializer()) EXPECT_NE(t.name(), "never");
}

TEST_F(Fold, CastsOnlyToInt64) {
  Const("x", {5}, {1});
  Int(Node("Cast", {"x"}, "as_float"), "to", onnx::TensorProto::FLOAT);
  Int(Node("Cast", {"x"}, "as_int64"), "to", onnx::TensorProto::INT64);
  Run();
  EXPECT_EQ(Folded("as_int64").first, (V{5}));
  for (const auto& t : g_.initializer()) EXPECT_NE(t.name(), "as_float");
}

}  // namespace
}  // namespace tierpool::hooks
