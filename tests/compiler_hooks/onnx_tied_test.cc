// Tied weights in ONNX exports: a copy that is another initializer's transpose (or the same
// bytes in the same shape) is found; tensors of one repeated value never are.
#include "compiler_hooks/onnx_tied.h"

#include <gtest/gtest.h>

#include <vector>

namespace tierpool::hooks {
namespace {

void Add(onnx::GraphProto* g, const std::string& name, std::vector<float> v, int rows, int cols) {
  auto* t = g->add_initializer();
  t->set_name(name);
  t->set_data_type(onnx::TensorProto::FLOAT);
  t->add_dims(rows);
  t->add_dims(cols);
  t->set_raw_data(std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float)));
}

TEST(TiedInitializers, FindsTransposedAndRepeatedCopiesButNotUniformTensors) {
  onnx::GraphProto g;
  Add(&g, "emb", {1, 2, 3, 4, 5, 6}, 3, 2);        // [[1 2] [3 4] [5 6]]
  Add(&g, "head_t", {1, 3, 5, 2, 4, 6}, 2, 3);     // its transpose
  Add(&g, "emb_again", {1, 2, 3, 4, 5, 6}, 3, 2);  // the same bytes
  Add(&g, "near", {1, 3, 5, 2, 4, 7}, 2, 3);       // one element off
  Add(&g, "zeros_a", {0, 0, 0, 0, 0, 0}, 2, 3);    // a zero-initialized matrix...
  Add(&g, "zeros_b", {0, 0, 0, 0, 0, 0}, 3, 2);    // ...is no copy of another
  const auto tied = TiedInitializers(g);
  EXPECT_EQ(tied.size(), 2u);
  EXPECT_EQ(tied.at("head_t"), "emb");
  EXPECT_EQ(tied.at("emb_again"), "emb");
  EXPECT_EQ(tied.count("near"), 0u);
  EXPECT_EQ(tied.count("zeros_b"), 0u);
}

}  // namespace
}  // namespace tierpool::hooks
