// The cluster across hosts under the faults of an operator's bad day (#71): nodes in network
// namespaces of their own (tests/e2e/netns_lab.h), etcd on a host of its own, and links cut,
// slowed, or etcd wiped between them. Each test names what failed before the fix it guards.
#include <gtest/gtest.h>

#include <signal.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <thread>

#include "tests/e2e/cluster_fixture.h"
#include "tests/e2e/netns_lab.h"
#include "tests/e2e/server_process.h"

namespace tierpool::testing {
namespace {

using SteadyClock = std::chrono::steady_clock;
constexpr std::size_t kSize = 4u << 20;
constexpr int kEtcdHost = 0;

// The hosts of `nodes` (node i is on host i + 1).
std::vector<int> HostsOf(const std::vector<int>& nodes) {
  std::vector<int> hosts;
  for (int n : nodes) hosts.push_back(n + 1);
  return hosts;
}

// etcd on host 0 and the nodes a, b, c (and more) on hosts 1 to n, each borrowing from the
// others; the links of `impairable` nodes may be made lossy and late (NetLab::Impair).
class NetCluster {
 public:
  NetCluster(const std::string& cluster, NodeOptions options = {}, int nodes = 3,
             const std::vector<int>& impairable = {})
      : lab_(nodes + 1, HostsOf(impairable)),
        cluster_(cluster),
        options_(std::move(options)),
        count_(nodes) {
    if (!lab_.ok()) return;
    etcd_ = std::make_unique<EtcdProcess>(lab_.ns(kEtcdHost), lab_.ip(kEtcdHost));
    if (!etcd_->ready()) return;
    secret_ = WriteSecret(etcd_->dir(), "secret", "a secret the nodes of the lab share");
    for (int i = 0; i < nodes; ++i) nodes_.push_back(Start(i));
  }
  // Why the test cannot run here ("" when it can).
  std::string skip_reason() const {
    if (!lab_.ok()) return "no network namespaces here: " + lab_.why();
    if (!etcd_ || !etcd_->ready()) return "no etcd here (Debian's etcd-server)";
    return "";
  }
  std::unique_ptr<ServerProcess> Start(int node) {
    NodeOptions o = options_;
    o.peer_host = lab_.ip(node + 1);
    return std::make_unique<ServerProcess>(
        NodeFlags(*etcd_, secret_, std::string(1, static_cast<char>('a' + node)), cluster_, o), "",
        lab_.ns(node + 1));
  }
  bool Joined() const {
    const std::size_t n = nodes_.size();
    auto meshed = [n](const ServerStats& s) {
      return s.members.size() == n && s.counter("remote_peers_responsive") == n - 1 &&
             s.counter("remote_grants") >= n - 1;
    };
    for (const auto& node : nodes_) {
      if (!node->started() || !node->WaitFor(meshed, 15'000)) return false;
    }
    return true;
  }
  NetLab& lab() { return lab_; }
  EtcdProcess& etcd() { return *etcd_; }
  ServerProcess& node(int i) { return *nodes_[i]; }
  std::unique_ptr<ServerProcess>& slot(int i) { return nodes_[i]; }
  int count() const { return count_; }
  int host(int node) const { return node + 1; }
  const std::string& cluster() const { return cluster_; }

 private:
  NetLab lab_;
  std::string cluster_;
  NodeOptions options_;
  std::unique_ptr<EtcdProcess> etcd_;
  std::string secret_;
  int count_;
  std::vector<std::unique_ptr<ServerProcess>> nodes_;
};

std::string Base64(const std::string& text) {
  int rc = 0;
  std::string out = RunShell("printf %s '" + text + "' | base64 -w0", &rc);
  return out;
}

ServerStats StatOf(const ServerProcess& node) {
  auto client = node.Connect();
  if (!client.ok()) return {};
  auto st = (*client)->ServerStat();
  return st.ok() ? *st : ServerStats{};
}

std::uint64_t Reclaimed(NetCluster& c) {
  return Counter(c.node(1), "lend_regions_reclaimed") +
         Counter(c.node(2), "lend_regions_reclaimed");
}

// a's objects "t0".."t<count-1>" byte for byte, no copy of them lost, and no lender freed what
// a borrowed.
void ExpectEveryObjectKept(NetCluster& c, int count) {
  CheckAll(c.node(0), count, kSize);
  EXPECT_EQ(Counter(c.node(0), "remote_extents_lost"), 0u);
  EXPECT_EQ(Counter(c.node(0), "remote_regions_lost"), 0u);
  EXPECT_EQ(Reclaimed(c), 0u);
}

#define NETCLUSTER_OR_SKIP(c) \
  if (const std::string why = (c).skip_reason(); !why.empty()) GTEST_SKIP() << why

// Before: with every lease gone, each lender dropped everything it lent and each borrower every
// peer: 22 of 32 acknowledged retained objects were DATA_LOSS with all daemons up.
TEST(ClusterAcrossHosts, EtcdRestartedEmptyLosesNothing) {
  NetCluster c("w1");
  NETCLUSTER_OR_SKIP(c);
  ASSERT_TRUE(c.Joined()) << RemoteSummary(c.node(0));
  Fill(c.node(0));
  ASSERT_TRUE(c.etcd().Wipe());
  // Every node finds its lease gone and registers again (same incarnation); a lender's grace
  // (2 s here) runs out meanwhile for anyone judged by etcd alone.
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(
        c.node(i).WaitFor([](const ServerStats& s) { return s.members.size() == 3; }, 20'000))
        << RemoteSummary(c.node(i));
  }
  std::this_thread::sleep_for(std::chrono::seconds(4));
  ASSERT_TRUE(
      c.node(0).WaitFor([](const ServerStats& s) { return RemoteState(s) == "ok"; }, 10'000))
      << RemoteSummary(c.node(0));
  ExpectEveryObjectKept(c, 16);
}

// Before: a borrower cut from etcd alone past its lease and the lenders' grace kept
// acknowledging puts and spilling them to lenders that had dropped it: every object was lost.
TEST(ClusterAcrossHosts, ABorrowerCutFromEtcdAloneLosesNothing) {
  NetCluster c("w2");
  NETCLUSTER_OR_SKIP(c);
  ASSERT_TRUE(c.Joined()) << RemoteSummary(c.node(0));
  Fill(c.node(0));
  ASSERT_TRUE(c.lab().Cut(c.host(0), kEtcdHost)) << c.lab().why();
  // The others see a leave; then its lenders' grace (2 s) runs out.
  ASSERT_TRUE(
      c.node(1).WaitFor([](const ServerStats& s) { return s.members.size() == 2; }, 15'000));
  std::this_thread::sleep_for(std::chrono::seconds(3));
  ASSERT_NO_FATAL_FAILURE(PutObjects(c.node(0), 16, 24, kSize));
  ASSERT_TRUE(c.lab().Heal(c.host(0), kEtcdHost));
  ASSERT_TRUE(
      c.node(1).WaitFor([](const ServerStats& s) { return s.members.size() == 3; }, 15'000));
  ExpectEveryObjectKept(c, 24);
}

// Before: a node whose member key was deleted (its lease alive) never registered again, its
// regions were freed 30 s later, and /health said "ok".
TEST(ClusterAcrossHosts, ANodeWhoseRecordIsDeletedWritesItAgain) {
  NetCluster c("w3");
  NETCLUSTER_OR_SKIP(c);
  ASSERT_TRUE(c.Joined()) << RemoteSummary(c.node(0));
  Fill(c.node(0));
  int rc = 0;
  c.etcd().Post("kv/deleterange",
                "{\"key\":\"" + Base64("/tierpool/" + c.cluster() + "/members/a") + "\"}", &rc);
  ASSERT_EQ(rc, 0);
  ASSERT_TRUE(c.node(1).WaitFor([](const ServerStats& s) { return s.members.size() == 2; }, 5000));
  const auto deleted = SteadyClock::now();
  ASSERT_TRUE(c.node(1).WaitFor([](const ServerStats& s) { return s.members.size() == 3; }, 10'000))
      << "a never wrote its record again";
  std::printf("record written again %.1f s after it was deleted\n",
              std::chrono::duration<double>(SteadyClock::now() - deleted).count());
  std::this_thread::sleep_for(std::chrono::seconds(3));  // past the lenders' grace
  CheckAll(c.node(0), 16, kSize);
  EXPECT_EQ(Counter(c.node(0), "remote_regions_lost"), 0u);
  EXPECT_EQ(Reclaimed(c), 0u);
}

// Before: with one remote replica, a lender cut off but still a member made every get of its
// objects fail UNAVAILABLE after 4 s while a good copy sat on local nvme.
TEST(ClusterAcrossHosts, AGuardCopyServesWhileTheOnlyReplicasLenderIsCutOff) {
  NodeOptions o;
  o.extra_flags = {"--remote-replicas", "1"};
  o.peer_lost_ms = 120'000;  // the lenders stay members, and are not judged gone, all along
  NetCluster c("w4", o);
  NETCLUSTER_OR_SKIP(c);
  ASSERT_TRUE(c.Joined()) << RemoteSummary(c.node(0));
  Fill(c.node(0));
  ASSERT_TRUE(c.lab().Cut(c.host(0), c.host(1)));
  ASSERT_TRUE(c.lab().Cut(c.host(0), c.host(2)));
  const double slowest = CheckAll(c.node(0), 16, kSize);
  std::printf("slowest get with every lender cut off: %.2f s\n", slowest);
  const double again = CheckAll(c.node(0), 16, kSize);
  std::printf("slowest get once the silence is known: %.2f s\n", again);
  EXPECT_LT(again, 1.0);
  EXPECT_EQ(Counter(c.node(0), "remote_peers_lost"), 0u);
  ASSERT_TRUE(c.lab().Heal(c.host(0), c.host(1)));
  ASSERT_TRUE(c.lab().Heal(c.host(0), c.host(2)));
}

// Before: a record written into etcd for a node that does not exist had a share of every lender
// kept for it, and the remote tier of every node reported "degraded".
TEST(ClusterAcrossHosts, AMemberNoNodeStandsBehindKeepsNothingAndDegradesNothing) {
  NodeOptions o;
  o.extra_flags = {"--lend-share-probation-ms", "1000"};
  NetCluster c("w5", o);
  NETCLUSTER_OR_SKIP(c);
  ASSERT_TRUE(c.Joined()) << RemoteSummary(c.node(0));
  const std::string record =
      R"({"node_id":"ghost","incarnation":"12345","peer_address":"10.231.0.99:7000",)"
      R"("lend_bytes":104857600,"borrows":true})";
  int rc = 0;
  c.etcd().Post("kv/put",
                "{\"key\":\"" + Base64("/tierpool/" + c.cluster() + "/members/ghost") +
                    "\",\"value\":\"" + Base64(record) + "\"}",
                &rc);
  ASSERT_EQ(rc, 0);
  ASSERT_TRUE(c.node(0).WaitFor([](const ServerStats& s) { return s.members.size() == 4; }, 5000));
  std::this_thread::sleep_for(std::chrono::seconds(4));  // past the probation, several probes
  for (int i = 0; i < 3; ++i) {
    auto client = c.node(i).Connect();
    ASSERT_TRUE(client.ok());
    auto st = (*client)->ServerStat();
    ASSERT_TRUE(st.ok());
    EXPECT_EQ(st->counter("lend_borrowing_members"), 2u) << "node " << i;
    EXPECT_EQ(RemoteState(*st), "ok") << RemoteSummary(c.node(i));
  }
  Fill(c.node(0));
  CheckAll(c.node(0), 16, kSize);
}

// Before: 16 MiB gets over a 5 MB/s link failed UNAVAILABLE after 8 s while the bytes flowed.
TEST(ClusterAcrossHosts, LargeGetsOverASlowLinkComplete) {
  NetCluster c("w6");
  NETCLUSTER_OR_SKIP(c);
  ASSERT_TRUE(c.Joined()) << RemoteSummary(c.node(0));
  constexpr std::size_t kLarge = 16u << 20;
  Fill(c.node(0), 4, kLarge);  // 64 MiB through 32 MiB of dram: some live only on peers
  ASSERT_TRUE(c.lab().Limit(c.host(0), "40mbit")) << c.lab().why();  // 5 MB/s into a
  const double slowest = CheckAll(c.node(0), 4, kLarge);
  std::printf("slowest 16 MiB get at 5 MB/s: %.2f s\n", slowest);
  EXPECT_EQ(Counter(c.node(0), "remote_peers_lost"), 0u);
  // Across hosts, by the data path the run asked for (UCX finds each host's own device).
  EXPECT_EQ(Counter(c.node(0), "remote_ucx_read_bytes") > 0, TestsOverUcx());
  ASSERT_TRUE(c.lab().Unlimit(c.host(0)));
}

// A lender's link losing a fifth of its frames and delaying the rest by 50 ms (the issue's
// lossy link; sch_netem is missing here, so the lab's own forwarder does it) under puts and
// gets: every object comes back byte for byte, from that lender or the other.
TEST(ClusterAcrossHosts, ALossyLateLinkToALenderLosesNothing) {
  // The lenders' grace as deployed (30 s), not the suite's 2 s: b's lease lapses on this link
  // and its requests can take seconds to arrive, and with 2 s a lender rightly freed what b held
  // (in a clean-clone CI run of 2026-12-07 b logged "c no longer holds 1 of our regions"). With
  // the deployed grace nobody loses a region here.
  NodeOptions o;
  o.lend_grace_ms = 30'000;
  NetCluster c("w7", o, 3, {1});
  NETCLUSTER_OR_SKIP(c);
  ASSERT_TRUE(c.Joined()) << RemoteSummary(c.node(0));
  Fill(c.node(0));
  ASSERT_TRUE(c.lab().Impair(c.host(1), 0.2, 50));
  const auto start = SteadyClock::now();
  ASSERT_NO_FATAL_FAILURE(PutObjects(c.node(0), 16, 24, kSize));
  const double slowest = CheckAll(c.node(0), 24, kSize);
  std::printf(
      "20%% loss and 50 ms on b's link: 8 puts and 24 gets in %.1f s, slowest get %.2f s, "
      "%llu frames dropped\n",
      std::chrono::duration<double>(SteadyClock::now() - start).count(), slowest,
      static_cast<unsigned long long>(c.lab().FramesDropped(c.host(1))));
  EXPECT_GT(c.lab().FramesDropped(c.host(1)), 0u);
  ASSERT_TRUE(c.lab().Impair(c.host(1), 0, 0));
  ExpectEveryObjectKept(c, 24);
}

// Before: with one remote replica, an object whose lender died kept only its guard copy on
// nvme for good (item 6). Now the store drops the lost copy as soon as the remote tier knows,
// and places the object on a live peer again from its guard copy.
TEST(ClusterAcrossHosts, AnObjectLeftWithOnlyItsGuardCopyGoesBackToAPeer) {
  NodeOptions o;
  o.extra_flags = {"--remote-replicas", "1"};
  o.lend = "256M";  // room on c alone for every object that was on a peer
  NetCluster c("w8", o);
  NETCLUSTER_OR_SKIP(c);
  ASSERT_TRUE(c.Joined()) << RemoteSummary(c.node(0));
  Fill(c.node(0));
  const std::uint64_t in_remote = RemoteObjects(StatOf(c.node(0)));
  ASSERT_GT(in_remote, 0u);
  ::kill(c.node(1).pid(), SIGKILL);
  c.node(1).WaitGone();
  const auto killed = SteadyClock::now();
  ASSERT_TRUE(c.node(0).WaitFor(
      [](const ServerStats& s) {
        return s.counter("copies_reported_lost") > 0 &&
               s.counter("copies_replaced") == s.counter("copies_reported_lost") &&
               s.counter("remote_objects_under_replicated") == 0;
      },
      30'000))
      << RemoteSummary(c.node(0));
  // Each of them copied from nvme to the remote tier again (nothing else moves that way).
  ASSERT_TRUE(c.node(0).WaitFor(
      [](const ServerStats& s) {
        return s.counter("link_nvme_remote_completed") == s.counter("copies_reported_lost");
      },
      30'000))
      << RemoteSummary(c.node(0)) << "; " << Counter(c.node(0), "copies_replaced") << " replaced, "
      << Counter(c.node(0), "link_nvme_remote_completed") << " landed, "
      << Counter(c.node(0), "link_nvme_remote_failed") << " failed";
  const ServerStats s = StatOf(c.node(0));
  std::printf(
      "b killed: %llu of %llu objects on peers lost their copy there; all placed on c "
      "again %.1f s after the kill\n",
      static_cast<unsigned long long>(s.counter("copies_reported_lost")),
      static_cast<unsigned long long>(in_remote),
      std::chrono::duration<double>(SteadyClock::now() - killed).count());
  CheckAll(c.node(0), 16, kSize);
  EXPECT_EQ(s.counter("copies_lost_with_peers"), 0u);  // none was its only copy
  EXPECT_EQ(s.counter("link_nvme_remote_failed"), 0u);
}

// The soak (#71), out of CI (ctest -L soak sets TIERPOOL_SOAK_SECONDS): a writer on node a puts,
// reads back and deletes retained objects while, every few seconds, one fault hits the cluster:
// a lender cut off from a, a node cut off from etcd, etcd wiped and restarted empty, a lender
// killed and restarted, a lender frozen, b's link losing 20% of its frames and delaying the rest
// by 50 ms, or a's link slowed to 5 MB/s. After each fault the soak waits for a's copies to be
// rebuilt before the next, timing how long a took to judge a killed or frozen lender gone and
// the rebuild after it. Every acknowledged object is checked at the end; figures go to
// docs/hardening.md.
TEST(ClusterAcrossHostsSoak, FaultsEveryFewSecondsLoseNothing) {
  const char* env = std::getenv("TIERPOOL_SOAK_SECONDS");
  if (env == nullptr) GTEST_SKIP() << "a soak: set TIERPOOL_SOAK_SECONDS (ctest -L soak does)";
  const int seconds = std::max(10, std::atoi(env));
  constexpr std::size_t kLive = 150;
  NodeOptions o;
  o.dram = "24M";
  NetCluster c("soak", o, 4, {1});
  NETCLUSTER_OR_SKIP(c);
  // a, the writer, borrowing from the three others (they may not all have room from each other).
  ASSERT_TRUE(c.node(0).WaitFor(
      [](const ServerStats& s) {
        return s.members.size() == 4 && s.counter("remote_peers_responsive") == 3 &&
               s.counter("remote_grants") >= 3;
      },
      20'000))
      << RemoteSummary(c.node(0));
  struct Version {
    std::uint64_t seed;
    std::size_t size;
  };
  std::mutex mu;
  std::map<std::string, Version> acked;  // guarded by mu
  std::deque<std::string> order;         // guarded by mu: oldest first
  std::atomic<bool> stop{false};
  std::atomic<std::uint64_t> ops{0}, wrong{0}, lost{0}, refused{0}, unavailable{0};
  std::atomic<std::uint64_t> longest_us{0};
  std::vector<std::string> lost_keys;  // guarded by mu
  std::thread writer([&] {
    std::mt19937_64 rng(71);
    auto client = c.node(0).Connect();
    if (!client.ok()) return;
    std::uint64_t next = 0;
    while (!stop) {
      const auto start = SteadyClock::now();
      int pick = static_cast<int>(rng() % 10);
      {
        // At most kLive objects (about 190 MiB, half of what a can hold in dram, on its peers
        // and on nvme): the oldest goes before more are put, so that gets find room to read
        // into; a full node refuses puts and such gets, which is no fault's doing.
        std::lock_guard lock(mu);
        if (pick < 5 && order.size() >= kLive) pick = 9;
      }
      if (pick < 5) {
        const std::string key = "s" + std::to_string(next);
        const Version v{next++, (256u << 10) + rng() % (2u << 20)};
        PutOptions po;
        po.durability = Durability::kRetained;
        const std::string data = Pattern(v.seed, v.size);
        if ((*client)->Put(key, data.data(), data.size(), po).ok()) {
          std::lock_guard lock(mu);
          acked[key] = v;
          order.push_back(key);
        } else {
          ++refused;
        }
      } else if (pick < 9) {
        std::string key;
        Version v{};
        {
          std::lock_guard lock(mu);
          if (order.empty()) continue;
          key = order[rng() % order.size()];
          v = acked.at(key);
        }
        Status s = CheckObject(**client, key, v.seed, v.size);
        if (s.code() == StatusCode::kDataLoss &&
            s.message().find("wrong bytes") != std::string::npos) {
          ++wrong;
        } else if (s.code() == StatusCode::kDataLoss || s.code() == StatusCode::kNotFound) {
          ++lost;
          std::lock_guard lock(mu);
          lost_keys.push_back(key + ": " + s.ToString());
        } else if (!s.ok()) {
          ++unavailable;  // checked again at the end
        }
      } else {
        std::string key;
        {
          std::lock_guard lock(mu);
          if (order.size() < kLive / 2) continue;
          key = order.front();
          order.pop_front();
          acked.erase(key);  // whatever the delete says, the key is not checked again
        }
        (void)(*client)->Delete(key);
      }
      ++ops;
      const auto us = static_cast<std::uint64_t>(
          std::chrono::duration_cast<std::chrono::microseconds>(SteadyClock::now() - start)
              .count());
      longest_us = std::max<std::uint64_t>(longest_us, us);
    }
  });
  std::mt19937 rng(7);
  std::map<std::string, int> faults;
  double longest_rebuild = 0;
  int rebuild_timeouts = 0;
  auto healthy = [](const ServerStats& s) {
    return RemoteState(s) == "ok" && s.counter("remote_objects_under_replicated") == 0;
  };
  // Time to detect a dead or frozen lender (a counts it gone), and how long the rebuild that
  // follows takes, in seconds: one entry per fault that a detected.
  std::vector<double> detect_s, rebuild_s;
  auto seconds_since = [](SteadyClock::time_point t) {
    return std::chrono::duration<double>(SteadyClock::now() - t).count();
  };
  // Waits up to `ms` for a to count one more peer gone than `before`; true (and the time from
  // `fault` recorded) if it did.
  auto detected = [&](SteadyClock::time_point fault, std::uint64_t before, int ms) {
    if (!c.node(0).WaitFor(
            [&](const ServerStats& s) { return s.counter("remote_peers_lost") > before; }, ms)) {
      return false;
    }
    detect_s.push_back(seconds_since(fault));
    return true;
  };
  // After a detection: how long until a's copies are whole again.
  auto time_rebuild = [&] {
    const auto from = SteadyClock::now();
    if (c.node(0).WaitFor(healthy, 30'000)) rebuild_s.push_back(seconds_since(from));
  };
  const auto end = SteadyClock::now() + std::chrono::seconds(seconds);
  while (SteadyClock::now() < end) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2000 + rng() % 3000));
    const int lender = 1 + static_cast<int>(rng() % 3);
    const auto fault_ms = std::chrono::milliseconds(2000 + rng() % 5000);
    const std::uint64_t lost_before = Counter(c.node(0), "remote_peers_lost");
    switch (rng() % 7) {
      case 0:
        ++faults["lender cut off from a"];
        c.lab().Cut(c.host(0), c.host(lender));
        std::this_thread::sleep_for(fault_ms);
        c.lab().Heal(c.host(0), c.host(lender));
        break;
      case 1: {
        const int node = static_cast<int>(rng() % 4);
        ++faults["node cut off from etcd"];
        c.lab().Cut(c.host(node), kEtcdHost);
        std::this_thread::sleep_for(fault_ms);
        c.lab().Heal(c.host(node), kEtcdHost);
        break;
      }
      case 2:
        ++faults["etcd wiped and restarted empty"];
        c.etcd().Wipe();
        break;
      case 3: {
        ++faults["lender killed and restarted"];
        ::kill(c.node(lender).pid(), SIGKILL);
        const auto killed = SteadyClock::now();
        c.node(lender).WaitGone();
        // Restarted at once (a new incarnation: known gone at its first record), or after 2 s.
        if (rng() % 2 == 0) std::this_thread::sleep_for(std::chrono::seconds(2));
        c.slot(lender) = c.Start(lender);
        if (detected(killed, lost_before, 15'000)) time_rebuild();
        break;
      }
      case 4: {
        ++faults["lender frozen"];
        const auto frozen_at = SteadyClock::now();
        bool gone = false;
        {
          Frozen frozen(c.node(lender).pid());
          gone = detected(frozen_at, lost_before, static_cast<int>(fault_ms.count()));
          std::this_thread::sleep_until(frozen_at + fault_ms);
        }
        if (gone) time_rebuild();
        break;
      }
      case 5:
        ++faults["b's link lossy and late (20% loss, 50 ms)"];
        c.lab().Impair(c.host(1), 0.2, 50);
        std::this_thread::sleep_for(fault_ms);
        c.lab().Impair(c.host(1), 0, 0);
        break;
      default:
        ++faults["a's link slowed to 5 MB/s"];
        c.lab().Limit(c.host(0), "40mbit");
        std::this_thread::sleep_for(fault_ms);
        c.lab().Unlimit(c.host(0));
        break;
    }
    const auto healed = SteadyClock::now();
    if (c.node(0).WaitFor(healthy, 30'000)) {
      longest_rebuild = std::max(
          longest_rebuild, std::chrono::duration<double>(SteadyClock::now() - healed).count());
    } else {
      ++rebuild_timeouts;
    }
  }
  stop = true;
  writer.join();
  EXPECT_TRUE(c.node(0).WaitFor(healthy, 60'000)) << RemoteSummary(c.node(0));
  // Every object acknowledged and not deleted, byte for byte.
  std::uint64_t final_lost = 0, final_wrong = 0, final_retried = 0;
  {
    auto client = c.node(0).Connect();
    ASSERT_TRUE(client.ok());
    std::lock_guard lock(mu);
    // A get refused for now (no room in dram yet, a peer not answering yet) is asked again for
    // up to a minute in all; only NOT_FOUND, DATA_LOSS or what is still refused then counts.
    const auto patience = SteadyClock::now() + std::chrono::seconds(60);
    for (const auto& [key, v] : acked) {
      Status s = CheckObject(**client, key, v.seed, v.size);
      for (bool first = true; !s.ok() && s.code() != StatusCode::kDataLoss &&
                              s.code() != StatusCode::kNotFound && SteadyClock::now() < patience;
           first = false) {
        if (first) ++final_retried;
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
        s = CheckObject(**client, key, v.seed, v.size);
      }
      if (s.ok()) continue;
      ++(s.message().find("wrong bytes") != std::string::npos ? final_wrong : final_lost);
      ADD_FAILURE() << key << ": " << s.ToString();
    }
  }
  std::printf(
      "soak %d s: %llu ops, %zu objects checked at the end; %llu puts refused, %llu gets "
      "unavailable for a while; lost %llu (at the end %llu), wrong %llu (at the end "
      "%llu); longest client wait %.2f s\n",
      seconds, static_cast<unsigned long long>(ops.load()), acked.size(),
      static_cast<unsigned long long>(refused.load()),
      static_cast<unsigned long long>(unavailable.load()),
      static_cast<unsigned long long>(lost.load()), static_cast<unsigned long long>(final_lost),
      static_cast<unsigned long long>(wrong.load()), static_cast<unsigned long long>(final_wrong),
      longest_us.load() / 1e6);
  std::printf("  at the end, %llu gets refused for a while and asked again\n",
              static_cast<unsigned long long>(final_retried));
  for (const auto& [what, n] : faults) std::printf("  fault: %s x%d\n", what.c_str(), n);
  std::printf(
      "  longest wait for a's copies to be whole again after a fault: %.1f s (%d over "
      "30 s); replicas rebuilt %llu, peers judged gone %llu (%llu by silence)\n",
      longest_rebuild, rebuild_timeouts,
      static_cast<unsigned long long>(Counter(c.node(0), "remote_replicas_repaired")),
      static_cast<unsigned long long>(Counter(c.node(0), "remote_peers_lost")),
      static_cast<unsigned long long>(Counter(c.node(0), "remote_peers_lost_silent")));
  auto spread = [](std::vector<double> v) {
    if (v.empty()) return std::string("none");
    std::sort(v.begin(), v.end());
    char line[96];
    std::snprintf(line, sizeof line, "%zu, median %.1f s, longest %.1f s", v.size(),
                  v[v.size() / 2], v.back());
    return std::string(line);
  };
  std::printf(
      "  lenders killed or frozen and judged gone: %s to detect; rebuilt in %s; %.1f MiB of "
      "replicas rebuilt, %llu copies placed on a peer again from nvme; %llu ranges of failed "
      "writes fenced before reuse\n",
      spread(detect_s).c_str(), spread(rebuild_s).c_str(),
      static_cast<double>(Counter(c.node(0), "remote_repair_bytes")) / (1 << 20),
      static_cast<unsigned long long>(Counter(c.node(0), "copies_replaced")),
      static_cast<unsigned long long>(Counter(c.node(0), "remote_ranges_fenced")));
  for (const auto& k : lost_keys) std::printf("  lost during the run: %s\n", k.c_str());
  EXPECT_EQ(lost.load(), 0u);
  EXPECT_EQ(wrong.load(), 0u);
}

}  // namespace
}  // namespace tierpool::testing
