// Three tierpoolds and a real etcd on one machine (every address on 127.0.0.1, the etcd's data
// in a throwaway directory): together they hold more retained tensors than any one has dram,
// one is killed with SIGKILL, and every tensor still comes back byte for byte. Skips when etcd
// is not installed.
#include <signal.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <thread>

#include "tests/e2e/cluster_fixture.h"
#include "tierpool/client.h"

namespace tierpool::testing {
namespace {

TEST(Cluster, ThreeNodesHoldMoreThanOneDramAndSurviveAKilledPeer) {
  ThreeNodes cluster("t1");
  if (!cluster.ready()) GTEST_SKIP() << "no etcd here (Debian's etcd-server)";
  ASSERT_TRUE(cluster.Joined()) << RemoteSummary(*cluster.a);  // a borrows from b and c
  ServerProcess &a = *cluster.a, &b = *cluster.b, &c = *cluster.c;
  // 96 MiB of retained tensors into a node with 32 MiB of dram: the remote tier (above nvme)
  // takes what dram cannot hold.
  constexpr int kObjects = 24;
  constexpr std::size_t kSize = 4u << 20;
  Fill(a, kObjects, kSize);
  auto client = a.Connect();
  ASSERT_TRUE(client.ok());
  EXPECT_GT(Counter(b, "lent_bytes"), 0u);
  EXPECT_GT(Counter(c, "lent_bytes"), 0u);
  EXPECT_EQ(Counter(c, "lent_borrowers"), 2u);  // a, and b (what c frees once b is gone)
  // c keeps a part of what it lends for each of them, none for itself.
  EXPECT_EQ(Counter(c, "lend_borrowing_members"), 2u);
  // The bytes went by the data path this run asked for (TIERPOOL_TEST_PEER_TRANSPORT), and
  // `tierpool peers` says which for each peer a borrows from.
  const bool ucx = TestsOverUcx();
  EXPECT_EQ(Counter(a, "remote_ucx_written_bytes") > 0, ucx);
  EXPECT_EQ(Counter(b, "peer_ucx_in_bytes") + Counter(c, "peer_ucx_in_bytes") > 0, ucx);
  EXPECT_EQ(Counter(a, "remote_peers_ucx"), ucx ? 2u : 0u);
  auto members = (*client)->ServerStat();
  ASSERT_TRUE(members.ok());
  for (const auto& m : members->members) {
    if (m.self) continue;
    EXPECT_EQ(m.transport, ucx ? "ucx" : "tcp") << m.node_id;
    EXPECT_GT(m.granted_to_us, 0u) << m.node_id;  // 0 before: Peers() named no member
  }

  // b dies without a word.
  ::kill(b.pid(), SIGKILL);
  ASSERT_TRUE(b.WaitGone());
  const auto killed = std::chrono::steady_clock::now();
  ASSERT_TRUE(
      a.WaitFor([](const ServerStats& s) { return s.counter("remote_peers_lost") >= 1; }, 10'000));
  std::printf("dead peer dropped %.1f s after SIGKILL (member TTL 2 s)\n",
              std::chrono::duration<double>(std::chrono::steady_clock::now() - killed).count());
  CheckAll(a, kObjects, kSize);
  auto stats = (*client)->ServerStat();
  ASSERT_TRUE(stats.ok());
  EXPECT_EQ(stats->counter("remote_extents_lost"), 0u);
  // c frees what the dead b had borrowed from it, once the grace period (2 s) has passed.
  EXPECT_TRUE(c.WaitFor(
      [](const ServerStats& s) { return s.counter("lend_regions_reclaimed") > 0; }, 10'000));
  EXPECT_EQ(RemoteState(*stats),
            "degraded");  // one replica short, and no third peer to repair onto

  // b comes back under the same name, as a new incarnation; c frees what the old b borrowed.
  auto b2 = cluster.Start("b");
  ASSERT_TRUE(b2->started());
  // Every replica set short of a copy is repaired onto it, and the tier is whole again.
  const auto rejoined = std::chrono::steady_clock::now();
  EXPECT_TRUE(a.WaitFor(
      [](const ServerStats& s) {
        return RemoteState(s) == "ok" && s.counter("remote_peers_responsive") == 2 &&
               s.counter("remote_replicas_repaired") > 0;
      },
      20'000));
  std::printf("replication restored %.1f s after the node rejoined\n",
              std::chrono::duration<double>(std::chrono::steady_clock::now() - rejoined).count());
  CheckAll(a, kObjects, kSize);
}

TEST(Cluster, ANodeWithoutTheSecretGetsNothing) {
  EtcdProcess etcd;
  if (!etcd.ready()) GTEST_SKIP() << "no etcd here (Debian's etcd-server)";
  const std::string good =
      WriteSecret(etcd.dir(), "good", "the cluster's real secret, 40 bytes long");
  const std::string bad =
      WriteSecret(etcd.dir(), "bad", "a guessed secret that is not the real one");
  ServerProcess a(NodeFlags(etcd, good, "a", "t2"));
  ServerProcess b(NodeFlags(etcd, good, "b", "t2"));
  ServerProcess m(NodeFlags(etcd, bad, "mallory", "t2"));
  ASSERT_TRUE(a.started() && b.started() && m.started());
  ASSERT_TRUE(m.WaitFor([](const ServerStats& s) { return s.members.size() == 3; }));
  ASSERT_TRUE(a.WaitFor([](const ServerStats& s) { return s.counter("peer_auth_failures") > 0; }));
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  EXPECT_EQ(Counter(m, "remote_grants"), 0u);
  EXPECT_EQ(Counter(m, "remote_peers_responsive"), 0u);
  auto lent_to_others = Counter(a, "lent_borrowers");
  EXPECT_LE(lent_to_others, 1u);  // b only
}

// Whoever can write to etcd can write a record under any key. One under another node's key (or
// any key but its own) speaks for no one: the node's first read of the members took it (the
// watch already refused it), and the remote tier then tried to borrow from the address it named.
TEST(Cluster, AMemberRecordUnderAnotherNodesKeyIsIgnored) {
  EtcdProcess etcd;
  if (!etcd.ready()) GTEST_SKIP() << "no etcd here (Debian's etcd-server)";
  const std::string record =
      R"({"node_id":"b","incarnation":"5","peer_address":"127.0.0.1:1","lend_bytes":67108864})";
  int rc = -1;
  RunShell("curl -sf -m 5 -X POST " + etcd.url() + "/v3/kv/put -d \"{\\\"key\\\":\\\"$(printf " +
               "%s /tierpool/t7/members/impostor | base64 -w0)\\\",\\\"value\\\":\\\"$(printf " +
               "%s '" + record + "' | base64 -w0)\\\"}\"",
           &rc);
  ASSERT_EQ(rc, 0);
  const std::string secret =
      WriteSecret(etcd.dir(), "secret", "the cluster's real secret, 40 bytes long");
  ServerProcess a(NodeFlags(etcd, secret, "a", "t7"));
  ASSERT_TRUE(a.started());
  ASSERT_TRUE(a.WaitFor([](const ServerStats& s) { return !s.members.empty(); }));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // a watch event or two
  auto client = a.Connect();
  ASSERT_TRUE(client.ok());
  auto stats = (*client)->ServerStat();
  ASSERT_TRUE(stats.ok());
  ASSERT_EQ(stats->members.size(), 1u) << RemoteSummary(a);
  EXPECT_EQ(stats->members[0].node_id, "a");
  EXPECT_EQ(stats->counter("remote_peers"), 0u);
}

// A cache object has one remote copy. When the peer that holds it dies, the object is a miss
// (NOT_FOUND, as if evicted): never DATA_LOSS, never wrong bytes; every other one comes back.
TEST(Cluster, CacheObjectsWhoseOnlyCopyDiedAreMisses) {
  ThreeNodes cluster("t3");
  if (!cluster.ready()) GTEST_SKIP() << "no etcd here (Debian's etcd-server)";
  ASSERT_TRUE(cluster.Joined()) << RemoteSummary(*cluster.a);  // a borrows from b and c
  ServerProcess &a = *cluster.a, &b = *cluster.b;
  auto client = a.Connect();
  ASSERT_TRUE(client.ok());
  constexpr int kObjects = 24;
  constexpr std::size_t kSize = 4u << 20;
  PutOptions cache;
  cache.durability = Durability::kCache;
  for (int i = 0; i < kObjects; ++i) {
    const std::string data = Pattern(i, kSize);
    ASSERT_TRUE((*client)->Put("t" + std::to_string(i), data.data(), data.size(), cache).ok()) << i;
  }
  ASSERT_GT(Counter(b, "lent_bytes"), 0u) << RemoteSummary(a);
  ::kill(b.pid(), SIGKILL);
  ASSERT_TRUE(b.WaitGone());
  ASSERT_TRUE(
      a.WaitFor([](const ServerStats& s) { return s.counter("remote_peers_lost") >= 1; }, 10'000));
  int hits = 0, misses = 0;
  for (int round = 0; round < 2; ++round) {  // a miss stays a miss
    hits = misses = 0;
    for (int i = 0; i < kObjects; ++i) {
      Status s = CheckObject(**client, "t" + std::to_string(i), i, kSize);
      if (s.ok()) {
        ++hits;
      } else {
        EXPECT_EQ(s.code(), StatusCode::kNotFound) << "t" << i << ": " << s.ToString();
        ++misses;
      }
    }
  }
  std::printf("after the lender died: %d hits, %d misses\n", hits, misses);
  EXPECT_GT(hits, 0);
  EXPECT_GT(Counter(a, "copies_lost_with_peers"), 0u) << RemoteSummary(a);
  EXPECT_GE(static_cast<std::uint64_t>(misses), Counter(a, "copies_lost_with_peers"));
}

// Both peers that held a retained object's two replicas die: the object is lost, and its gets say
// so (DATA_LOSS naming the cause), never wrong bytes; what dram held still comes back, and the
// node keeps serving.
TEST(Cluster, OneRemoteReplicaWithAnNvmeCopyLosesNothingWhenEveryLenderDies) {
  NodeOptions one_replica;
  one_replica.extra_flags = {"--remote-replicas", "1"};
  ThreeNodes cluster("t5", one_replica);
  if (!cluster.ready()) GTEST_SKIP() << "no etcd here (Debian's etcd-server)";
  ASSERT_TRUE(cluster.Joined()) << RemoteSummary(*cluster.a);  // a borrows from b and c
  ServerProcess &a = *cluster.a, &b = *cluster.b, &c = *cluster.c;
  constexpr int kObjects = 16;
  constexpr std::size_t kSize = 4u << 20;
  Fill(a, kObjects, kSize);  // some went remote, each with one copy there and one on nvme
  EXPECT_GT(Counter(a, "guard_copies"), 0u);
  ::kill(b.pid(), SIGKILL);
  ::kill(c.pid(), SIGKILL);
  ASSERT_TRUE(b.WaitGone() && c.WaitGone());
  ASSERT_TRUE(
      a.WaitFor([](const ServerStats& s) { return s.counter("remote_peers_lost") >= 2; }, 10'000));
  CheckAll(a, kObjects, kSize);
  EXPECT_EQ(Counter(a, "copies_lost_with_peers"), 0u);
  EXPECT_GT(Counter(a, "copies_lost_read_elsewhere"), 0u);
}

// Nodes that borrow nothing (--remote-replicas 0) say so in their member records, and their
// lenders keep no part of what they lend for them.
TEST(Cluster, NodesThatBorrowNothingAreKeptNoShare) {
  NodeOptions lend_only;
  lend_only.extra_flags = {"--remote-replicas", "0"};
  ThreeNodes cluster("t6", lend_only);
  if (!cluster.ready()) GTEST_SKIP() << "no etcd here (Debian's etcd-server)";
  for (ServerProcess* n : {cluster.a.get(), cluster.b.get(), cluster.c.get()}) {
    ASSERT_TRUE(n->started());
    ASSERT_TRUE(n->WaitFor([](const ServerStats& s) { return s.members.size() == 3; }, 10'000));
    EXPECT_EQ(Counter(*n, "lend_borrowing_members"), 0u);
    EXPECT_EQ(Counter(*n, "lend_capacity_bytes"), 96u << 20);
  }
}

TEST(Cluster, RetainedObjectsWhoseEveryReplicaDiedAreReportedLost) {
  ThreeNodes cluster("t4");
  if (!cluster.ready()) GTEST_SKIP() << "no etcd here (Debian's etcd-server)";
  ASSERT_TRUE(cluster.Joined()) << RemoteSummary(*cluster.a);  // a borrows from b and c
  ServerProcess &a = *cluster.a, &b = *cluster.b, &c = *cluster.c;
  constexpr int kObjects = 16;
  constexpr std::size_t kSize = 4u << 20;
  Fill(a, kObjects, kSize);
  auto client = a.Connect();
  ASSERT_TRUE(client.ok());
  ::kill(b.pid(), SIGKILL);
  ::kill(c.pid(), SIGKILL);
  ASSERT_TRUE(b.WaitGone() && c.WaitGone());
  ASSERT_TRUE(
      a.WaitFor([](const ServerStats& s) { return s.counter("remote_peers_lost") >= 2; }, 10'000));
  int lost = 0;
  std::vector<std::string> lost_keys;
  for (int i = 0; i < kObjects; ++i) {
    Status s = CheckObject(**client, "t" + std::to_string(i), i, kSize);
    if (s.ok()) continue;
    ++lost;
    lost_keys.push_back("t" + std::to_string(i));
    EXPECT_EQ(s.code(), StatusCode::kDataLoss) << "t" << i << ": " << s.ToString();
    EXPECT_NE(s.message().find("peers that left"), std::string::npos) << s.ToString();
  }
  EXPECT_GT(lost, 0);
  EXPECT_LT(lost, kObjects);  // dram's own still come back
  EXPECT_EQ(Counter(a, "copies_lost_with_peers"), static_cast<std::uint64_t>(lost));
  // The node serves on: a lost object can be deleted (then it is simply absent), new ones put.
  for (const auto& key : lost_keys) {
    EXPECT_TRUE((*client)->Delete(key).ok()) << key;
    EXPECT_EQ(CheckObject(**client, key, 0, kSize).code(), StatusCode::kNotFound) << key;
  }
  EXPECT_TRUE(PutRetained(**client, "fresh", 99, 1u << 20).ok());
  EXPECT_TRUE(CheckObject(**client, "fresh", 99, 1u << 20).ok());
}

}  // namespace
}  // namespace tierpool::testing
