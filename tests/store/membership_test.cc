#include "store/membership.h"

#include <gtest/gtest.h>

namespace tierpool {
namespace {

TEST(Membership, AMemberRecordSaysWhetherTheNodeBorrows) {
  for (bool borrows : {true, false}) {
    RemoteMember m{"node-a", 12345, "127.0.0.1:7000", 1 << 30, borrows};
    auto back = Membership::Decode(Membership::Encode(m));
    ASSERT_TRUE(back.ok()) << back.status().ToString();
    EXPECT_EQ(back->node_id, "node-a");
    EXPECT_EQ(back->incarnation, 12345u);
    EXPECT_EQ(back->lend_bytes, 1u << 30);
    EXPECT_EQ(back->borrows, borrows);
  }
  // A record written before the field existed: every node borrowed then.
  auto old = Membership::Decode(
      R"({"node_id":"n","incarnation":"7","peer_address":"127.0.0.1:1","lend_bytes":0})");
  ASSERT_TRUE(old.ok()) << old.status().ToString();
  EXPECT_TRUE(old->borrows);
  auto wrong = Membership::Decode(
      R"({"node_id":"n","incarnation":"7","peer_address":"127.0.0.1:1","lend_bytes":0,)"
      R"("borrows":"yes"})");
  EXPECT_EQ(wrong.status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace tierpool
