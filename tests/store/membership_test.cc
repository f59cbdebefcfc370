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

TEST(Membership, ARecordIsTakenOnlyUnderItsOwnNodesKey) {
  const std::string prefix = "/tierpool/c/members/";
  const std::string b = Membership::Encode({"b", 7, "127.0.0.1:7000", 1 << 20});
  auto ok = Membership::DecodeAt(prefix, prefix + "b", b);
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(ok->node_id, "b");
  // b's record under a's key, under another cluster, or under no prefix at all: not taken (the
  // first read of the members took the first, while the watch refused it).
  for (const std::string& key :
       {prefix + "a", prefix + "bb", prefix, std::string("/tierpool/d/members/b"), std::string("b"),
        std::string("/tierpool/c/member/b")}) {
    EXPECT_EQ(Membership::DecodeAt(prefix, key, b).status().code(), StatusCode::kInvalidArgument)
        << key;
  }
  // Node ids and addresses that --node-id and a host:port could not be.
  for (const auto& bad : {RemoteMember{"a/b", 7, "127.0.0.1:1", 0},
                          RemoteMember{std::string(256, 'n'), 7, "127.0.0.1:1", 0},
                          RemoteMember{"n", 7, std::string(301, 'h'), 0}}) {
    EXPECT_EQ(Membership::Decode(Membership::Encode(bad)).status().code(),
              StatusCode::kInvalidArgument)
        << bad.node_id.substr(0, 8);
  }
}

}  // namespace
}  // namespace tierpool
