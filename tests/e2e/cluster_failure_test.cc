// The remote tier's failures, each on a real etcd and three tierpoolds on 127.0.0.1: a frozen
// borrower resumed, a frozen lender resumed, etcd restarted under a running cluster, and a
// randomized put/get/delete run against a model while a peer is slow, then killed, then back.
// In every one: no wrong bytes, no acknowledged retained tensor lost. Skips without etcd.
#include <gtest/gtest.h>
#include <signal.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <map>
#include <random>
#include <thread>

#include "tests/e2e/cluster_fixture.h"
#include "tierpool/client.h"

namespace tierpool::testing {
namespace {

using Seconds = std::chrono::duration<double>;
using SteadyClock = std::chrono::steady_clock;

constexpr std::size_t kSize = 4u << 20;

std::map<std::string, std::uint64_t> Incarnations(const ServerProcess& node) {
  std::map<std::string, std::uint64_t> out;
  auto client = node.Connect();
  if (!client.ok()) return out;
  auto stats = (*client)->ServerStat();
  if (!stats.ok()) return out;
  for (const auto& m : stats->members) out[m.node_id] = m.incarnation;
  return out;
}

TEST(ClusterFailure, AFrozenBorrowerResumesWithEveryTensor) {
  NodeOptions options;
  options.lend_grace_ms = 30'000;  // the default: longer than this freeze
  ThreeNodes cluster("f1", options);
  if (!cluster.ready()) GTEST_SKIP() << "no etcd here (Debian's etcd-server)";
  ASSERT_TRUE(cluster.Joined()) << RemoteSummary(*cluster.a);
  Fill(*cluster.a);
  const std::uint64_t before = Incarnations(*cluster.b)["a"];
  {
    Frozen frozen(cluster.a->pid());
    // Past its lease: the others see it leave.
    ASSERT_TRUE(
        cluster.b->WaitFor([](const ServerStats& s) { return s.members.size() == 2; }, 10'000));
  }
  const auto resumed = SteadyClock::now();
  // It finds its lease gone and registers again as the same incarnation (the process lived on);
  // it checks that its lenders still hold its regions before using them, and they do: they free
  // a borrower's regions only once it is silent on the peer link for the grace period too.
  ASSERT_TRUE(cluster.a->WaitFor(
      [](const ServerStats& s) { return s.members.size() == 3 && RemoteState(s) == "ok"; }, 15'000))
      << RemoteSummary(*cluster.a);
  std::printf("frozen borrower whole again %.1f s after SIGCONT\n",
              Seconds(SteadyClock::now() - resumed).count());
  EXPECT_EQ(Incarnations(*cluster.b)["a"], before);
  EXPECT_EQ(Counter(*cluster.a, "remote_extents_lost"), 0u);
  EXPECT_EQ(Counter(*cluster.a, "remote_regions_lost"), 0u);
  EXPECT_EQ(
      Counter(*cluster.b, "lend_regions_reclaimed") + Counter(*cluster.c, "lend_regions_reclaimed"),
      0u);
  CheckAll(*cluster.a, 16, kSize);
}

TEST(ClusterFailure, AFrozenLenderCostsABoundedWaitAndIsRepairedOntoWhenItComesBack) {
  ThreeNodes cluster("f2");
  if (!cluster.ready()) GTEST_SKIP() << "no etcd here (Debian's etcd-server)";
  ASSERT_TRUE(cluster.Joined()) << RemoteSummary(*cluster.a);
  Fill(*cluster.a);
  {
    Frozen frozen(cluster.b->pid());
    // Reads while b is frozen and still a member: each fails over to c, the first after at
    // most one I/O timeout (2 s), the rest at once once b is marked unresponsive. Silent for
    // --remote-peer-lost-ms (3 s here), b counts as gone.
    const double slowest = CheckAll(*cluster.a, 16, kSize);
    std::printf("slowest get while a lender is frozen: %.2f s\n", slowest);
    EXPECT_LT(slowest, 5.0);
    ASSERT_TRUE(cluster.a->WaitFor(
        [](const ServerStats& s) { return s.counter("remote_peers_lost") >= 1; }, 10'000))
        << RemoteSummary(*cluster.a);
    EXPECT_EQ(RemoteState(*(*cluster.a->Connect())->ServerStat()), "degraded");
    // Three nodes: with b gone, a has no third peer to rebuild the lost copies on.
    EXPECT_GT(Counter(*cluster.a, "remote_objects_under_replicated"), 0u);
    CheckAll(*cluster.a, 16, kSize);
  }
  // b resumes and registers again; a, having counted it gone, meets it anew (b frees what it held
  // of a's before) and re-creates the missing replicas on it.
  const auto resumed = SteadyClock::now();
  ASSERT_TRUE(cluster.a->WaitFor(
      [](const ServerStats& s) {
        return RemoteState(s) == "ok" && s.counter("remote_peers_responsive") == 2 &&
               s.counter("remote_replicas_repaired") > 0 &&
               s.counter("remote_objects_under_replicated") == 0;
      },
      20'000))
      << RemoteSummary(*cluster.a);
  // b's room went to whoever asked first after it came back; c gives back what it took ahead of
  // need when a finds none there for its copies (docs/protocol.md, "Room wanted").
  std::printf(
      "replication restored %.1f s after the frozen lender resumed (regions given back: a %llu, "
      "c %llu)\n",
      Seconds(SteadyClock::now() - resumed).count(),
      static_cast<unsigned long long>(Counter(*cluster.a, "remote_regions_given_back")),
      static_cast<unsigned long long>(Counter(*cluster.c, "remote_regions_given_back")));
  EXPECT_EQ(Counter(*cluster.a, "remote_extents_lost"), 0u);
  CheckAll(*cluster.a, 16, kSize);
}

TEST(ClusterFailure, EtcdRestartedUnderARunningClusterLosesNothing) {
  ThreeNodes cluster("f3");
  if (!cluster.ready()) GTEST_SKIP() << "no etcd here (Debian's etcd-server)";
  ASSERT_TRUE(cluster.Joined()) << RemoteSummary(*cluster.a);
  Fill(*cluster.a);
  const auto before = Incarnations(*cluster.a);
  cluster.etcd().Kill();
  // Down for twice the member TTL: nobody can renew, and nobody may drop anything for it.
  std::this_thread::sleep_for(std::chrono::seconds(4));
  CheckAll(*cluster.a, 16, kSize);  // the data path does not need etcd
  ASSERT_TRUE(cluster.etcd().Start());
  // Long enough after the restart for every keep-alive to have been answered.
  std::this_thread::sleep_for(std::chrono::seconds(3));
  EXPECT_EQ(Incarnations(*cluster.a), before);
  EXPECT_EQ(Incarnations(*cluster.b), before);
  EXPECT_EQ(Counter(*cluster.a, "remote_peers_lost"), 0u);
  EXPECT_EQ(Counter(*cluster.a, "remote_extents_lost"), 0u);
  EXPECT_EQ(Counter(*cluster.b, "lend_regions_reclaimed"), 0u);
  CheckAll(*cluster.a, 16, kSize);
  // And the cluster still works: more tensors go remote.
  auto client = cluster.a->Connect();
  ASSERT_TRUE(client.ok());
  for (int i = 16; i < 20; ++i) {
    ASSERT_TRUE(PutRetained(**client, "t" + std::to_string(i), i, kSize).ok());
  }
  CheckAll(*cluster.a, 20, kSize);
}

// A slow peer: stopped 40 ms of every 100 ms, for as long as it lives.
class Stutter {
 public:
  explicit Stutter(pid_t pid)
      : thread_([this, pid] {
          while (!stop_) {
            ::kill(pid, SIGSTOP);
            std::this_thread::sleep_for(std::chrono::milliseconds(40));
            ::kill(pid, SIGCONT);
            std::this_thread::sleep_for(std::chrono::milliseconds(60));
          }
        }) {}
  ~Stutter() {
    stop_ = true;
    thread_.join();
  }

 private:
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

TEST(ClusterFailure, RandomizedPutsGetsAndDeletesMatchAModelWhileAPeerIsSlowKilledAndBack) {
  ThreeNodes cluster("f4");
  if (!cluster.ready()) GTEST_SKIP() << "no etcd here (Debian's etcd-server)";
  ASSERT_TRUE(cluster.Joined()) << RemoteSummary(*cluster.a);
  auto client = cluster.a->Connect();
  ASSERT_TRUE(client.ok());
  struct Object {
    std::uint64_t seed;
    std::size_t size;
  };
  std::map<std::string, Object> model;
  std::mt19937_64 rng(20261122);
  const std::size_t sizes[] = {64u << 10, 256u << 10, 1u << 20, 3u << 20};
  std::uint64_t next_seed = 1000, transient = 0, ops = 0;
  // Each phase: at least 150 operations and 3 s (a dead peer is noticed after about 2), at most
  // 5,000 operations.
  auto run = [&] {
    const auto until = SteadyClock::now() + std::chrono::seconds(3);
    for (int i = 0; i < 5000 && (i < 150 || SteadyClock::now() < until); ++i, ++ops) {
      const std::string key = "r" + std::to_string(rng() % 40);
      const auto found = model.find(key);
      const unsigned dice = rng() % 100;
      if (dice < 45) {
        const Object o{next_seed++, sizes[rng() % 4]};
        Status s = PutRetained(**client, key, o.seed, o.size);
        if (s.code() == StatusCode::kUnavailable) {
          ++transient;  // a put refused is not acknowledged: the model keeps the old object
          continue;
        }
        ASSERT_TRUE(s.ok()) << "put " << key << ": " << s.ToString();
        model[key] = o;
      } else if (dice < 85) {
        if (found == model.end()) {
          std::string out(64, '\0');
          EXPECT_EQ((*client)->Get(key, out.data(), out.size()).status().code(),
                    StatusCode::kNotFound);
          continue;
        }
        Status s = CheckObject(**client, key, found->second.seed, found->second.size);
        // A get may fail for a moment (both replicas unreachable) but never with wrong bytes,
        // and never says an acknowledged tensor is gone.
        if (s.code() == StatusCode::kUnavailable) {
          ++transient;
          continue;
        }
        ASSERT_TRUE(s.ok()) << "get " << key << ": " << s.ToString();
      } else {
        Status s = (*client)->Delete(key);
        if (found == model.end()) {
          EXPECT_EQ(s.code(), StatusCode::kNotFound);
        } else {
          ASSERT_TRUE(s.ok()) << "delete " << key << ": " << s.ToString();
          model.erase(found);
        }
      }
    }
  };
  run();
  {
    Stutter slow(cluster.b->pid());
    run();
  }
  if (::testing::Test::HasFatalFailure()) return;
  ::kill(cluster.b->pid(), SIGKILL);
  ASSERT_TRUE(cluster.b->WaitGone());
  run();
  if (::testing::Test::HasFatalFailure()) return;
  cluster.b = cluster.Start("b");
  ASSERT_TRUE(cluster.b->started());
  run();
  if (::testing::Test::HasFatalFailure()) return;
  ASSERT_TRUE(cluster.a->WaitFor(
      [](const ServerStats& s) {
        return RemoteState(s) == "ok" && s.counter("remote_peers_responsive") == 2;
      },
      20'000))
      << RemoteSummary(*cluster.a);
  for (const auto& [key, o] : model) {
    Status s = CheckObject(**client, key, o.seed, o.size);
    EXPECT_TRUE(s.ok()) << key << ": " << s.ToString();
  }
  EXPECT_EQ(Counter(*cluster.a, "remote_extents_lost"), 0u);
  std::printf("%llu operations, %zu tensors at the end, %llu refused for a moment\n",
              static_cast<unsigned long long>(ops), model.size(),
              static_cast<unsigned long long>(transient));
}

}  // namespace
}  // namespace tierpool::testing
