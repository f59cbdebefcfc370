// The lease table (store/lease_table.h): ids that say their shard, releases by the holder only,
// per-owner counts and lists, deadlines across shards; and owners pinning at once from threads.
#include "store/lease_table.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <thread>
#include <vector>

namespace tierpool {
namespace {

TEST(LeaseTable, OnlyTheHolderTakesALeaseAndOnlyOnce) {
  LeaseTable table;
  const std::uint64_t id = table.Add({.object_id = 7, .tier = TierKind::kHbm, .owner = 3});
  EXPECT_NE(id, 0u);
  EXPECT_EQ(table.Take(id, 4).status().code(), StatusCode::kPermissionDenied);
  auto taken = table.Take(id, 3);
  ASSERT_TRUE(taken.ok());
  EXPECT_EQ(taken->object_id, 7u);
  EXPECT_EQ(taken->tier, TierKind::kHbm);
  EXPECT_EQ(table.Take(id, 3).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(table.Take(12345, 3).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(table.size(), 0u);
}

TEST(LeaseTable, CountsAndListsPerOwnerAcrossShards) {
  LeaseTable table;
  std::set<std::uint64_t> ids;
  // Owners 1 and 17 share a shard; 2 has its own.
  for (int i = 0; i < 5; ++i) ids.insert(table.Add({.object_id = 1, .owner = 1}));
  for (int i = 0; i < 3; ++i) ids.insert(table.Add({.object_id = 2, .owner = 17}));
  for (int i = 0; i < 2; ++i) ids.insert(table.Add({.object_id = 3, .owner = 2}));
  EXPECT_EQ(ids.size(), 10u) << "lease ids repeat";
  EXPECT_EQ(table.CountOf(1), 5u);
  EXPECT_EQ(table.CountOf(17), 3u);
  EXPECT_EQ(table.CountOf(2), 2u);
  EXPECT_EQ(table.CountOf(99), 0u);
  EXPECT_EQ(table.Of(17).size(), 3u);
  for (std::uint64_t id : table.Of(1)) ASSERT_TRUE(table.Take(id, 1).ok());
  EXPECT_EQ(table.CountOf(1), 0u);
  EXPECT_EQ(table.CountOf(17), 3u);
  EXPECT_EQ(table.size(), 5u);
}

TEST(LeaseTable, TakeAllTakesTheOwnersAndRefusesTheRest) {
  LeaseTable table;
  // Owner 1's leases, owner 17's in the same shard, owner 2's in another.
  const std::uint64_t a = table.Add({.object_id = 10, .owner = 1});
  const std::uint64_t b = table.Add({.object_id = 11, .owner = 1});
  const std::uint64_t same_shard = table.Add({.object_id = 12, .owner = 17});
  const std::uint64_t other_shard = table.Add({.object_id = 13, .owner = 2});
  const std::uint64_t ids[] = {a, other_shard, same_shard, 12345, b, a};
  std::vector<Lease> taken;
  Status refusal;
  EXPECT_EQ(table.TakeAll(ids, 1, &taken, &refusal), 4u);  // 2's, 17's, none, a again
  // The first refusal in owner 1's shard: 17's lease.
  EXPECT_EQ(refusal.code(), StatusCode::kPermissionDenied) << refusal.ToString();
  ASSERT_EQ(taken.size(), 2u);
  EXPECT_EQ(taken[0].object_id, 10u);
  EXPECT_EQ(taken[1].object_id, 11u);
  EXPECT_EQ(table.CountOf(1), 0u);
  EXPECT_EQ(table.CountOf(17), 1u);
  EXPECT_EQ(table.CountOf(2), 1u);
  EXPECT_EQ(table.size(), 2u);
  // Refused in another shard only: that refusal is the one given.
  taken.clear();
  const std::uint64_t foreign[] = {other_shard};
  EXPECT_EQ(table.TakeAll(foreign, 1, &taken, &refusal), 1u);
  EXPECT_EQ(refusal.code(), StatusCode::kPermissionDenied);
  EXPECT_TRUE(taken.empty());
  EXPECT_EQ(table.size(), 2u);
}

TEST(LeaseTable, DeadlinesAreFoundInEveryShardAndCleared) {
  LeaseTable table;
  const std::uint64_t a = table.Add({.object_id = 1, .owner = 1, .expiry_us = 100});
  const std::uint64_t b = table.Add({.object_id = 2, .owner = 2, .expiry_us = 200});
  table.Add({.object_id = 3, .owner = 3});  // never due
  std::vector<std::uint64_t> due = table.Due(150);
  EXPECT_EQ(due, std::vector<std::uint64_t>{a});
  due = table.Due(1000);
  std::sort(due.begin(), due.end());
  std::vector<std::uint64_t> want{a, b};
  std::sort(want.begin(), want.end());
  EXPECT_EQ(due, want);
  table.ClearDeadline(a);
  EXPECT_EQ(table.Due(1000), std::vector<std::uint64_t>{b});
  ASSERT_TRUE(table.Find(a).has_value());
  EXPECT_EQ(table.Find(a)->expiry_us, 0u);
  ASSERT_TRUE(table.Take(b, 2).ok());
  EXPECT_TRUE(table.Due(1000).empty());
}

// Owners on threads of their own, each adding and taking its leases: every count ends at 0
// and no id is handed out twice.
TEST(LeaseTable, OwnersOnThreadsOfTheirOwn) {
  LeaseTable table;
  constexpr int kThreads = 4, kLeases = 2000;
  std::vector<std::vector<std::uint64_t>> got(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      const std::uint64_t owner = 10 + static_cast<std::uint64_t>(t);
      for (int i = 0; i < kLeases; ++i) {
        const std::uint64_t id = table.Add({.object_id = 1, .owner = owner});
        got[t].push_back(id);
        if (i % 2 == 1) {
          EXPECT_TRUE(table.Take(got[t][i - 1], owner).ok());
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  std::set<std::uint64_t> all;
  for (const auto& g : got) all.insert(g.begin(), g.end());
  EXPECT_EQ(all.size(), static_cast<std::size_t>(kThreads * kLeases));
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(table.CountOf(10 + t), kLeases / 2u);
  EXPECT_EQ(table.size(), kThreads * kLeases / 2u);
}

}  // namespace
}  // namespace tierpool
