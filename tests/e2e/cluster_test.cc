// Three tierpoolds and a real etcd on one machine (every address on 127.0.0.1, the etcd's data
// in a throwaway directory): together they hold more retained tensors than any one has dram,
// one is killed with SIGKILL, and every tensor still comes back byte for byte. Skips when etcd
// is not installed.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

#include "tests/e2e/server_process.h"
#include "tierpool/client.h"

namespace tierpool::testing {
namespace {

namespace fs = std::filesystem;

int FreePort() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  socklen_t len = sizeof addr;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  ::close(fd);
  return ntohs(addr.sin_port);
}

// A single-member etcd on free loopback ports, its data in a temporary directory.
class EtcdProcess {
 public:
  EtcdProcess() {
    if (::access("/usr/bin/etcd", X_OK) != 0) return;
    char tmpl[] = "/tmp/tierpool-etcd-XXXXXX";
    dir_ = ::mkdtemp(tmpl);
    const int client = FreePort(), peer = FreePort();
    url_ = "http://127.0.0.1:" + std::to_string(client);
    const std::string peer_url = "http://127.0.0.1:" + std::to_string(peer);
    pid_ = ::fork();
    if (pid_ == 0) {
      const std::string log = dir_ + "/etcd.log";
      freopen(log.c_str(), "w", stdout);
      freopen(log.c_str(), "a", stderr);
      ::execl("/usr/bin/etcd", "etcd", "--name", "t", "--data-dir", (dir_ + "/data").c_str(),
              "--listen-client-urls", url_.c_str(), "--advertise-client-urls", url_.c_str(),
              "--listen-peer-urls", peer_url.c_str(), "--initial-advertise-peer-urls",
              peer_url.c_str(), "--initial-cluster", ("t=" + peer_url).c_str(), nullptr);
      ::_exit(127);
    }
    for (int i = 0; i < 100 && !ready_; ++i) {
      int rc = 0;
      RunShell("curl -sf -m 1 -X POST " + url_ + "/v3/kv/range -d '{\"key\":\"AA==\"}'", &rc);
      ready_ = rc == 0;
      if (!ready_) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }
  ~EtcdProcess() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    if (!dir_.empty()) fs::remove_all(dir_);
  }
  bool ready() const { return ready_; }
  const std::string& url() const { return url_; }
  const std::string& dir() const { return dir_; }

 private:
  pid_t pid_ = -1;
  std::string dir_, url_;
  bool ready_ = false;
};

std::vector<std::string> NodeFlags(const EtcdProcess& etcd, const std::string& secret,
                                   const std::string& node, const std::string& cluster) {
  // Each node also has (memory-backed) nvme below: once a peer dies and the remote tier cannot
  // place two replicas, dram spills there instead, which makes room to read remote objects back.
  return {"--dram",           "32M",         "--hbm",        "0",
          "--nvme-backend",   "memory",      "--nvme-bytes", "256M",
          "--metrics-listen", "off",         "--etcd",       etcd.url(),
          "--cluster",        cluster,       "--node-id",    node,
          "--peer-listen",    "127.0.0.1:0", "--peer-auth",  secret,
          "--lend",           "96M",         "--member-ttl", "2",
          "--lend-grace-ms",  "2000"};
}

std::string WriteSecret(const std::string& dir, const std::string& name, const std::string& text) {
  const std::string path = dir + "/" + name;
  std::ofstream(path) << text;
  fs::permissions(path, fs::perms::owner_read | fs::perms::owner_write, fs::perm_options::replace);
  return path;
}

std::uint64_t Counter(const ServerProcess& s, const char* name) {
  auto c = s.Connect();
  if (!c.ok()) return 0;
  auto st = (*c)->ServerStat();
  return st.ok() ? st->counter(name) : 0;
}

TEST(Cluster, ThreeNodesHoldMoreThanOneDramAndSurviveAKilledPeer) {
  EtcdProcess etcd;
  if (!etcd.ready()) GTEST_SKIP() << "no etcd here (Debian's etcd-server)";
  const std::string secret =
      WriteSecret(etcd.dir(), "secret", "s3cret shared by the cluster, 44 bytes long");
  ServerProcess a(NodeFlags(etcd, secret, "a", "t1"));
  ServerProcess b(NodeFlags(etcd, secret, "b", "t1"));
  ServerProcess c(NodeFlags(etcd, secret, "c", "t1"));
  ASSERT_TRUE(a.started() && b.started() && c.started());
  // Everyone sees everyone, and a borrows from both others.
  ASSERT_TRUE(a.WaitFor([](const ServerStats& s) {
    return s.members.size() == 3 && s.counter("remote_peers_responsive") == 2 &&
           s.counter("remote_grants") >= 2;
  }));
  auto client = a.Connect();
  ASSERT_TRUE(client.ok());
  // 96 MiB of retained tensors into a node with 32 MiB of dram: the remote tier (above nvme)
  // takes what dram cannot hold.
  constexpr int kObjects = 24;
  constexpr std::size_t kSize = 4u << 20;
  for (int i = 0; i < kObjects; ++i) {
    const std::string data = Pattern(i, kSize);
    PutOptions o;
    o.durability = Durability::kRetained;
    Status s = (*client)->Put("t" + std::to_string(i), data.data(), data.size(), o);
    for (int tries = 0; !s.ok() && s.code() == StatusCode::kResourceExhausted && tries < 50;
         ++tries) {
      // Room below is being granted; a put may find dram full for a moment.
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      s = (*client)->Put("t" + std::to_string(i), data.data(), data.size(), o);
    }
    ASSERT_TRUE(s.ok()) << i << ": " << s.ToString();
  }
  auto stats = (*client)->ServerStat();
  ASSERT_TRUE(stats.ok());
  std::uint64_t remote_objects = 0;
  for (const auto& t : stats->tiers) {
    if (t.tier == TierKind::kRemote) remote_objects = t.object_count;
  }
  EXPECT_GT(remote_objects, 0u);
  EXPECT_GT(Counter(b, "lent_bytes"), 0u);
  EXPECT_GT(Counter(c, "lent_bytes"), 0u);

  // b dies without a word.
  ::kill(b.pid(), SIGKILL);
  ASSERT_TRUE(b.WaitGone());
  const auto killed = std::chrono::steady_clock::now();
  ASSERT_TRUE(
      a.WaitFor([](const ServerStats& s) { return s.counter("remote_peers_lost") >= 1; }, 10'000));
  std::printf("dead peer dropped %.1f s after SIGKILL (member TTL 2 s)\n",
              std::chrono::duration<double>(std::chrono::steady_clock::now() - killed).count());
  for (int i = 0; i < kObjects; ++i) {
    std::string out(kSize, '\0');
    auto got = (*client)->Get("t" + std::to_string(i), out.data(), out.size());
    ASSERT_TRUE(got.ok()) << i << ": " << got.status().ToString();
    EXPECT_TRUE(*got == kSize && out == Pattern(i, kSize)) << "object " << i << " came back wrong";
  }
  stats = (*client)->ServerStat();
  ASSERT_TRUE(stats.ok());
  EXPECT_EQ(stats->counter("remote_extents_lost"), 0u);
  // c frees what the dead b had borrowed from it, once the grace period (2 s) has passed.
  EXPECT_TRUE(c.WaitFor(
      [](const ServerStats& s) { return s.counter("lend_regions_reclaimed") > 0; }, 10'000));
  for (const auto& t : stats->tiers) {
    if (t.tier == TierKind::kRemote) {
      EXPECT_EQ(t.state, "degraded");  // one replica short, and no third peer to repair onto
    }
  }

  // b comes back under the same name, as a new incarnation; c frees what the old b borrowed.
  ServerProcess b2(NodeFlags(etcd, secret, "b", "t1"));
  ASSERT_TRUE(b2.started());
  // Every replica set short of a copy is repaired onto it, and the tier is whole again.
  const auto rejoined = std::chrono::steady_clock::now();
  EXPECT_TRUE(a.WaitFor(
      [](const ServerStats& s) {
        bool ok = false;
        for (const auto& t : s.tiers) ok |= t.tier == TierKind::kRemote && t.state == "ok";
        return ok && s.counter("remote_peers_responsive") == 2 &&
               s.counter("remote_replicas_repaired") > 0;
      },
      20'000));
  std::printf("replication restored %.1f s after the node rejoined\n",
              std::chrono::duration<double>(std::chrono::steady_clock::now() - rejoined).count());
  for (int i = 0; i < kObjects; ++i) {
    std::string out(kSize, '\0');
    ASSERT_TRUE((*client)->Get("t" + std::to_string(i), out.data(), out.size()).ok());
    EXPECT_TRUE(out == Pattern(i, kSize));
  }
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

}  // namespace
}  // namespace tierpool::testing
