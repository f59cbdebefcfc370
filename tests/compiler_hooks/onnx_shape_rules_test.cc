// Our own shape rules for what ONNX's inference leaves unsized: Einsum's output shape.
#include "compiler_hooks/onnx_shape_rules.h"

#include <gtest/gtest.h>

namespace tierpool::hooks {
namespace {

using Shape = std::vector<std::int64_t>;

TEST(EinsumShape, ExplicitOutputs) {
  EXPECT_EQ(EinsumShape("bhid,bhjd->bhij", {{2, 8, 16, 64}, {2, 8, 32, 64}}),
            (Shape{2, 8, 16, 32}));
  EXPECT_EQ(EinsumShape("i,j->ij", {{5}, {7}}), (Shape{5, 7}));  // torch.outer
  EXPECT_EQ(EinsumShape("ii->i", {{4, 4}}), (Shape{4}));
  EXPECT_EQ(EinsumShape("ij->", {{4, 3}}), (Shape{}));
  EXPECT_EQ(EinsumShape("b i d, b j d -> b i j", {{2, 3, 4}, {2, 5, 4}}), (Shape{2, 3, 5}));
}

TEST(EinsumShape, ImplicitOutputIsTheLettersSeenOnceInOrder) {
  EXPECT_EQ(EinsumShape("ij,jk", {{2, 3}, {3, 4}}), (Shape{2, 4}));
  EXPECT_EQ(EinsumShape("ba", {{2, 3}}), (Shape{3, 2}));  // alphabetical: a, b
}

TEST(EinsumShape, EllipsisAndSizeOneDimensionsBroadcast) {
  // MaxViT's relative attention: "...ij,...jk->...ik" over batch x heads x windows.
  EXPECT_EQ(EinsumShape("...ij,...jk->...ik", {{2, 8, 49, 32}, {8, 32, 49}}),
            (Shape{2, 8, 49, 49}));
  EXPECT_EQ(EinsumShape("bij,bjk->bik", {{1, 3, 4}, {6, 4, 5}}), (Shape{6, 3, 5}));
  EXPECT_EQ(EinsumShape("...i,...i", {{3, 4}, {4}}), (Shape{3}));
}

TEST(EinsumShape, DisagreementsAndBadEquationsAreRefused) {
  EXPECT_FALSE(EinsumShape("ij,jk->ik", {{2, 3}, {4, 5}}));  // j: 3 against 4
  EXPECT_FALSE(EinsumShape("ij->ik", {{2, 3}}));             // k from nowhere
  EXPECT_FALSE(EinsumShape("ij,jk->ik", {{2, 3}}));          // two terms, one input
  EXPECT_FALSE(EinsumShape("ijk->i", {{2, 3}}));             // rank 2 against 3 letters
  EXPECT_FALSE(EinsumShape("i$j->i", {{2, 3}}));
  EXPECT_FALSE(EinsumShape("......i->i", {{2, 3}}));
}

}  // namespace
}  // namespace tierpool::hooks
