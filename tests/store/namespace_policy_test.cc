#include "store/namespace_policy.h"

#include <gtest/gtest.h>

namespace tierpool {
namespace {

transport::PeerCredentials Peer(uid_t uid, gid_t gid = 100) { return {1234, uid, gid}; }

TEST(NamespacePolicy, WithoutAFileOnlyTheServersUserAndRoot) {
  NamespacePolicy p(1000);
  EXPECT_TRUE(p.Allows(Peer(1000), "anything"));
  EXPECT_TRUE(p.Allows(Peer(0), "anything"));
  EXPECT_FALSE(p.Allows(Peer(1001), "anything"));
}

TEST(NamespacePolicy, GrantsByUserAndGroupWithPatterns) {
  auto p = NamespacePolicy::Parse(R"({"grants": [
      {"uid": 1001, "namespaces": ["bob", "bob-*"]},
      {"gid": 2000, "namespaces": ["*"]}],
    "quotas": {"bob": {"bytes": "8M", "objects": 10}, "x": {"bytes": 4096}}})",
                                  1000);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_TRUE(p->Allows(Peer(1001), "bob"));
  EXPECT_TRUE(p->Allows(Peer(1001), "bob-job7"));
  EXPECT_FALSE(p->Allows(Peer(1001), "bobby"));
  EXPECT_FALSE(p->Allows(Peer(1001), "alice"));
  EXPECT_FALSE(p->Allows(Peer(1001), "*")) << "listing every namespace needs a '*' grant";
  EXPECT_TRUE(p->Allows(Peer(1002, 2000), "alice"));
  EXPECT_TRUE(p->Allows(Peer(1002, 2000), "*"));
  EXPECT_FALSE(p->Allows(Peer(1002, 2001), "alice"));
  EXPECT_TRUE(p->Allows(Peer(1000), "alice"));  // the server's own user keeps everything
  EXPECT_EQ(p->quotas().at("bob").max_bytes, 8u << 20);
  EXPECT_EQ(p->quotas().at("bob").max_objects, 10u);
  EXPECT_EQ(p->quotas().at("x").max_bytes, 4096u);
}

TEST(NamespacePolicy, BadFilesAreClearErrors) {
  for (const char* bad :
       {"", "[]", "{\"grant\": []}", R"({"grants": [{"namespaces": ["a"]}]})",
        R"({"grants": [{"uid": 1, "gid": 2, "namespaces": ["a"]}]})",
        R"({"grants": [{"uid": -1, "namespaces": ["a"]}]})",
        R"({"grants": [{"uid": 1, "namespaces": ["a*b"]}]})",
        R"({"grants": [{"uid": 1, "namespaces": [""]}]})",
        R"({"quotas": {"a": {"bytes": "lots"}}})", R"({"quotas": {"a": {"size": 1}}})",
        R"({"quotas": {"a": {"objects": -3}}})"}) {
    auto p = NamespacePolicy::Parse(bad, 1000);
    EXPECT_EQ(p.status().code(), StatusCode::kInvalidArgument) << bad;
  }
  EXPECT_EQ(NamespacePolicy::Load("/nonexistent/policy.json", 1000).status().code(),
            StatusCode::kNotFound);
}

}  // namespace
}  // namespace tierpool
