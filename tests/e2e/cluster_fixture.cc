#include "tests/e2e/cluster_fixture.h"

#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <thread>

#include "common/posix.h"

namespace tierpool::testing {

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

EtcdProcess::EtcdProcess(std::string netns, std::string host) : netns_(std::move(netns)) {
  if (::access("/usr/bin/etcd", X_OK) != 0) return;
  char tmpl[] = "/tmp/tierpool-etcd-XXXXXX";
  dir_ = ::mkdtemp(tmpl);
  if (netns_.empty()) {
    url_ = "http://127.0.0.1:" + std::to_string(FreePort());
    peer_url_ = "http://127.0.0.1:" + std::to_string(FreePort());
  } else {  // a namespace of its own: its ports are free
    url_ = "http://" + host + ":2379";
    peer_url_ = "http://" + host + ":2380";
  }
  Start();
}

std::string EtcdProcess::Post(const std::string& path, const std::string& json, int* rc) const {
  const std::string prefix = netns_.empty() ? "" : "ip netns exec " + netns_ + " ";
  return RunShell(prefix + "curl -sf -m 2 -X POST " + url_ + "/v3/" + path + " -d '" + json + "'",
                  rc);
}

bool EtcdProcess::Wipe() {
  Kill();
  fs::remove_all(dir_ + "/data");
  return Start();
}

bool EtcdProcess::Start() {
  pid_ = ::fork();
  if (pid_ == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (!netns_.empty() && !EnterNetworkNamespace(netns_)) ::_exit(126);
    const std::string log = dir_ + "/etcd.log";
    std::freopen(log.c_str(), "a", stdout);
    std::freopen(log.c_str(), "a", stderr);
    ::execl("/usr/bin/etcd", "etcd", "--name", "t", "--data-dir", (dir_ + "/data").c_str(),
            "--listen-client-urls", url_.c_str(), "--advertise-client-urls", url_.c_str(),
            "--listen-peer-urls", peer_url_.c_str(), "--initial-advertise-peer-urls",
            peer_url_.c_str(), "--initial-cluster", ("t=" + peer_url_).c_str(), nullptr);
    ::_exit(127);
  }
  ready_ = false;
  for (int i = 0; i < 100 && !ready_; ++i) {
    int rc = 0;
    Post("kv/range", "{\"key\":\"AA==\"}", &rc);
    ready_ = rc == 0;
    if (!ready_) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return ready_;
}

void EtcdProcess::Kill() {
  if (pid_ <= 0) return;
  ::kill(pid_, SIGKILL);
  ::waitpid(pid_, nullptr, 0);
  pid_ = -1;
  ready_ = false;
}

EtcdProcess::~EtcdProcess() {
  Kill();
  if (!dir_.empty()) fs::remove_all(dir_);
}

std::vector<std::string> NodeFlags(const EtcdProcess& etcd, const std::string& secret,
                                   const std::string& node, const std::string& cluster,
                                   const NodeOptions& o) {
  std::vector<std::string> flags = {"--dram",
                                    o.dram,
                                    "--hbm",
                                    "0",
                                    "--nvme-backend",
                                    "memory",
                                    "--nvme-bytes",
                                    "256M",
                                    "--metrics-listen",
                                    "off",
                                    "--etcd",
                                    etcd.url(),
                                    "--cluster",
                                    cluster,
                                    "--node-id",
                                    node,
                                    "--peer-listen",
                                    o.peer_host + ":0",
                                    "--peer-auth",
                                    secret,
                                    "--lend",
                                    o.lend,
                                    "--member-ttl",
                                    "2",
                                    "--lend-grace-ms",
                                    std::to_string(o.lend_grace_ms),
                                    "--remote-peer-lost-ms",
                                    std::to_string(o.peer_lost_ms)};
  // TIERPOOL_TEST_PEER_TRANSPORT=ucx: the same tests with replicas' bytes over UCX (ctest runs
  // the cluster tests both ways); by default the data path is TCP frames, as auto picks here.
  flags.push_back("--peer-transport");
  flags.push_back(TestsOverUcx() ? "ucx" : "tcp");
  flags.insert(flags.end(), o.extra_flags.begin(), o.extra_flags.end());
  return flags;
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

std::string RemoteState(const ServerStats& s) {
  for (const auto& t : s.tiers) {
    if (t.tier == TierKind::kRemote) return t.state;
  }
  return "";
}

std::uint64_t RemoteObjects(const ServerStats& s) {
  for (const auto& t : s.tiers) {
    if (t.tier == TierKind::kRemote) return t.object_count;
  }
  return 0;
}

std::string RemoteSummary(const ServerProcess& node) {
  auto c = node.Connect();
  if (!c.ok()) return "(no connection: " + c.status().ToString() + ")";
  auto st = (*c)->ServerStat();
  if (!st.ok()) return "(no stats: " + st.status().ToString() + ")";
  std::string out = "remote " + RemoteState(*st) + ", members";
  for (const auto& m : st->members) {
    out += " " + m.node_id + (m.responsive ? "" : "(silent)");
  }
  for (const char* name :
       {"remote_peers", "remote_peers_responsive", "remote_peers_lost", "remote_replicas_lost",
        "remote_replicas_repaired", "remote_extents_lost", "remote_regions_lost",
        "remote_peers_lost_silent", "remote_grants", "remote_objects_under_replicated",
        "remote_regions_given_back"}) {
    out += std::string(", ") + name + " " + std::to_string(st->counter(name));
  }
  return out;
}

Status PutRetained(Client& client, const std::string& key, std::uint64_t seed, std::size_t size) {
  const std::string data = Pattern(seed, size);
  PutOptions o;
  o.durability = Durability::kRetained;
  Status s = client.Put(key, data.data(), data.size(), o);
  for (int tries = 0; !s.ok() && s.code() == StatusCode::kResourceExhausted && tries < 50;
       ++tries) {
    // Room below is being granted; a put may find dram full for a moment.
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    s = client.Put(key, data.data(), data.size(), o);
  }
  return s;
}

Status CheckObject(Client& client, const std::string& key, std::uint64_t seed, std::size_t size) {
  std::string out(size, '\0');
  auto got = client.Get(key, out.data(), out.size());
  if (!got.ok()) return got.status();
  if (*got != size || out != Pattern(seed, size)) {
    return Status::DataLoss(key + " came back with the wrong bytes");
  }
  return Status::Ok();
}

double CheckAll(const ServerProcess& node, int count, std::size_t size) {
  auto client = node.Connect();
  EXPECT_TRUE(client.ok());
  if (!client.ok()) return 0;
  double slowest = 0;
  for (int i = 0; i < count; ++i) {
    const auto start = std::chrono::steady_clock::now();
    Status s = CheckObject(**client, "t" + std::to_string(i), i, size);
    slowest = std::max(
        slowest, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    EXPECT_TRUE(s.ok()) << s.ToString();
  }
  return slowest;
}

ThreeNodes::ThreeNodes(const std::string& cluster, NodeOptions options)
    : cluster_(cluster), options_(options) {
  if (!etcd_.ready()) return;
  secret_ = WriteSecret(etcd_.dir(), "secret", "a secret the three nodes share, 45 bytes");
  a = Start("a");
  b = Start("b");
  c = Start("c");
}

std::unique_ptr<ServerProcess> ThreeNodes::Start(const std::string& node) {
  return std::make_unique<ServerProcess>(NodeFlags(etcd_, secret_, node, cluster_, options_));
}

bool ThreeNodes::Joined() const {
  // Every node, not only a: b and c take room from each other ahead of need, in their own time,
  // and once a has filled a lender nothing is left for them (a test that kills b and expects c to
  // free what b held would then race b's first grant).
  auto meshed = [](const ServerStats& s) {
    return s.members.size() == 3 && s.counter("remote_peers_responsive") == 2 &&
           s.counter("remote_grants") >= 2;
  };
  return a->started() && b->started() && c->started() && a->WaitFor(meshed) && b->WaitFor(meshed) &&
         c->WaitFor(meshed);
}

void PutObjects(ServerProcess& node, int from, int to, std::size_t size) {
  auto client = node.Connect();
  ASSERT_TRUE(client.ok());
  for (int i = from; i < to; ++i) {
    Status s = PutRetained(**client, "t" + std::to_string(i), i, size);
    ASSERT_TRUE(s.ok()) << i << ": " << s.ToString();
  }
}

void Fill(ServerProcess& node, int count, std::size_t size) {
  ASSERT_NO_FATAL_FAILURE(PutObjects(node, 0, count, size));
  // Moves to peers run on the mover, after the puts that made room for them returned: a copy
  // may still be on its way (a clean-clone CI run of 2026-12-08 over UCX found none there yet,
  // with nothing failed in any node's log).
  ASSERT_TRUE(node.WaitFor([](const ServerStats& s) { return RemoteObjects(s) > 0; }, 15'000))
      << "no object went to a peer; " << RemoteSummary(node);
}

Frozen::Frozen(pid_t pid) : pid_(pid) { ::kill(pid_, SIGSTOP); }

void Frozen::Resume() {
  if (pid_ > 0) ::kill(pid_, SIGCONT);
  pid_ = -1;
}

}  // namespace tierpool::testing
