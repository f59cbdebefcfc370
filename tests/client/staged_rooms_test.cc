// The room a connection asks the server to stage for its next put (detail::StagedRooms::Ask):
// when it asks, and for how many bytes.
#include <gtest/gtest.h>

#include "client/client_core.h"

namespace tierpool::detail {
namespace {

class StagedRoomsTest : public ::testing::Test {
 protected:
  // The size of the room the commit of a put of `size` asks for (0: none).
  std::uint64_t AskAfter(std::uint64_t size, const PutOptions& options = {}) {
    wire::CommitRequest commit;
    auto asked = rooms_.Ask(&commit, "ns", PutShape(size, options));
    if (!asked) {
      EXPECT_EQ(commit.stage_size(), 0);
      return 0;
    }
    EXPECT_EQ(commit.stage_size(), 1);
    EXPECT_EQ(commit.stage(0).size(), asked->size);
    EXPECT_EQ(commit.stage(0).ns(), "ns");
    return asked->size;
  }
  StagedRooms rooms_;
};

TEST_F(StagedRoomsTest, TheLargestOfTheRunsLastFourPuts) {
  rooms_.set_fits_smaller(true);
  EXPECT_EQ(AskAfter(100 << 10), 0u);  // a lone put leaves no room behind
  EXPECT_EQ(AskAfter(300 << 10), 300u << 10);
  EXPECT_EQ(AskAfter(200 << 10), 300u << 10);
  EXPECT_EQ(AskAfter(50 << 10), 300u << 10);
  EXPECT_EQ(AskAfter(60 << 10), 300u << 10);
  EXPECT_EQ(AskAfter(70 << 10), 200u << 10);  // 300 KiB is five puts back
  // A put above 4 MiB ends the run; so does another placement.
  EXPECT_EQ(AskAfter((4 << 20) + 1), 0u);
  EXPECT_EQ(AskAfter(100 << 10), 0u);
  EXPECT_EQ(AskAfter(100 << 10), 100u << 10);
  EXPECT_EQ(AskAfter(100 << 10, {.tier = TierKind::kHbm}), 0u);
  EXPECT_EQ(AskAfter(90 << 10, {.tier = TierKind::kHbm}), 100u << 10);
  wire::CommitRequest commit;
  ASSERT_TRUE(rooms_.Ask(&commit, "ns", PutShape(80 << 10, {.tier = TierKind::kHbm})));
  EXPECT_EQ(commit.stage(0).tier_hint(), wire::HBM);
}

// A server that takes only a put of the staged size (an older one): only runs of one size
// stage, each for that size.
TEST_F(StagedRoomsTest, RunsOfOneSizeWhereTheServerTakesOnlyThat) {
  rooms_.set_fits_smaller(false);
  EXPECT_EQ(AskAfter(100 << 10), 0u);
  EXPECT_EQ(AskAfter(300 << 10), 0u);
  EXPECT_EQ(AskAfter(300 << 10), 300u << 10);
  EXPECT_EQ(AskAfter(300 << 10), 300u << 10);
  EXPECT_EQ(AskAfter(200 << 10), 0u);
  EXPECT_EQ(AskAfter(200 << 10), 200u << 10);
}

}  // namespace
}  // namespace tierpool::detail
