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

TEST(NamespacePolicy, PoolsAreMappedOnlyByPeersCoveringAllTheirNamespaces) {
  auto p = NamespacePolicy::Parse(R"({"grants": [
      {"uid": 1001, "namespaces": ["bob", "bob-*"]},
      {"uid": 1002, "namespaces": ["bob-7"]},
      {"uid": 1003, "namespaces": ["*"]},
      {"uid": 1004, "namespaces": ["carol"]}],
    "pools": {"bob": {"namespaces": ["bob", "bob-*"], "dram": "4M", "hbm": 65536},
              "dan": {"namespaces": ["dan"], "dram": 4096}},
    "quotas": {"bob": {"hbm": "1M", "dram": "2M", "nvme": 1000}}})",
                                  1000);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  ASSERT_EQ(p->pools().size(), 2u);
  EXPECT_EQ(p->pools()[0].name, "bob");
  EXPECT_EQ(p->pools()[0].dram_bytes, 4u << 20);
  EXPECT_EQ(p->pools()[0].hbm_bytes, 65536u);
  EXPECT_EQ(PoolOf(p->pools(), "bob"), 1u);
  EXPECT_EQ(PoolOf(p->pools(), "bob-x"), 1u);
  EXPECT_EQ(PoolOf(p->pools(), "dan"), 2u);
  EXPECT_EQ(PoolOf(p->pools(), "bobby"), kSharedPool);
  // bob's user covers the whole pool and nothing else.
  EXPECT_TRUE(p->MapsPool(Peer(1001), 1));
  EXPECT_FALSE(p->MapsPool(Peer(1001), 2));
  EXPECT_FALSE(p->MapsPool(Peer(1001), kSharedPool));
  // One namespace of a pool is not the pool: its bytes go through the server's copies.
  EXPECT_TRUE(p->Allows(Peer(1002), "bob-7"));
  EXPECT_FALSE(p->MapsNamespace(Peer(1002), "bob-7"));
  // '*' covers everything; a namespace in no pool is in the shared arenas, which only '*' maps.
  EXPECT_TRUE(p->MapsPool(Peer(1003), kSharedPool));
  EXPECT_TRUE(p->MapsPool(Peer(1003), 2));
  EXPECT_FALSE(p->MapsNamespace(Peer(1004), "carol"));
  EXPECT_TRUE(p->MapsPool(Peer(1000), kSharedPool));  // the server's own user
  EXPECT_FALSE(p->MapsPool(Peer(1003), 3)) << "no such pool";
  const auto& q = p->quotas().at("bob").max_tier_bytes;
  EXPECT_EQ(q[static_cast<int>(TierKind::kHbm)], 1u << 20);
  EXPECT_EQ(q[static_cast<int>(TierKind::kDram)], 2u << 20);
  EXPECT_EQ(q[static_cast<int>(TierKind::kNvme)], 1000u);
}

TEST(NamespacePolicy, BadPoolsAreClearErrors) {
  for (
      const char* bad : {
          R"({"pools": []})",
          R"({"pools": {"a": {"dram": "1M"}}})",                      // no namespaces
          R"({"pools": {"a": {"namespaces": ["a"]}}})",               // no dram
          R"({"pools": {"a": {"namespaces": ["a"], "dram": "x"}}})",  // bad size
          R"({"pools": {"a": {"namespaces": ["a"], "dram": 1, "numa": 0}}})",
          R"({"pools": {"a": {"namespaces": ["a*"], "dram": 1}, "b": {"namespaces": ["ab"], "dram": 1}}})",
          R"({"pools": {"a": {"namespaces": ["x", "a*"], "dram": 1}, "b": {"namespaces": ["*"], "dram": 1}}})",
          R"({"quotas": {"a": {"hbm": "lots"}}})",
      }) {
    EXPECT_EQ(NamespacePolicy::Parse(bad, 1000).status().code(), StatusCode::kInvalidArgument)
        << bad;
  }
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
