// tierpool-remote-bench (run as `tierpool bench remote`): the remote tier's put (a replicated
// write, its source checked against its checksum) and get (a read checked against it) to
// lenders on 127.0.0.1, in one run beside its data path's own engine: iperf3 on the same
// loopback with as many streams (--transport tcp), or ucx_perftest's active-message bandwidth
// at the same message size (--transport ucx).
//
// Lenders and borrower run in this process, each lender behind its own peer listener, so every
// byte crosses a loopback connection as it would between two sidecars.
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <boost/program_options.hpp>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <thread>

#include "benchmarks/bench_netns.h"
#include "common/checksum.h"
#include "common/logging.h"
#include "common/option_errors.h"
#include "common/units.h"
#include "store/lender.h"
#include "tiers/remote_tier.h"
#include "transport/peer_server.h"

namespace po = boost::program_options;
using nlohmann::json;
using namespace tierpool;

namespace {

const char kSecret[] = "tierpool bench remote: a throwaway secret for loopback";

std::string Run(const std::string& cmd, int* rc) {
  std::string out;
  FILE* p = ::popen((cmd + " 2>&1").c_str(), "r");
  if (p == nullptr) {
    *rc = -1;
    return out;
  }
  char buf[4096];
  std::size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  *rc = WEXITSTATUS(::pclose(p));
  return out;
}

// iperf3 with `streams` parallel streams for `seconds`, its server at `host` (inside `netns`
// when given): bytes/s received, or nullopt (and *error) without iperf3.
std::optional<double> Iperf3(std::uint32_t streams, std::uint32_t seconds, const std::string& host,
                             const BenchNetns* netns, std::string* error) {
  if (::access("/usr/bin/iperf3", X_OK) != 0) {
    *error = "iperf3 not installed (Debian's iperf3)";
    return std::nullopt;
  }
  for (int attempt = 0; attempt < 5; ++attempt) {
    const std::string port = std::to_string(20000 + ::getpid() % 20000 + attempt * 7);
    const pid_t server = SpawnQuiet({"/usr/bin/iperf3", "-s", "-1", "-B", host, "-p", port}, netns);
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    int rc = 0;
    const std::string out =
        Run("iperf3 -c " + host + " -p " + port + " -t " + std::to_string(seconds) + " -P " +
                std::to_string(streams) + " -J",
            &rc);
    StopSpawned(server);
    if (rc != 0) {
      *error = "iperf3 failed: " + out.substr(0, 300);
      continue;  // the port may have been taken: another one
    }
    json j = json::parse(out, nullptr, /*allow_exceptions=*/false);
    if (j.is_object() && j.contains("end") && j["end"].contains("sum_received")) {
      return j["end"]["sum_received"]["bits_per_second"].get<double>() / 8;
    }
    // iperf3 reports some failures (a port taken, a server not up yet) in its JSON, exit 0.
    *error = "iperf3: " +
             (j.is_object() && j.contains("error") ? j["error"].dump() : out.substr(0, 300));
  }
  return std::nullopt;
}

// ucx_perftest's active-message bandwidth (ucp_am_bw, endpoints with error handling, as the
// remote tier's are), its server at `host` (inside `netns` when given), one message of `size`
// at a time: bytes/s, or nullopt (and *error) without it. UCX_TLS and the other UCX_* variables
// apply to both sides, as to the remote tier.
std::optional<double> UcxPerftest(std::uint64_t size, std::uint64_t iterations,
                                  const std::string& host, const BenchNetns* netns,
                                  std::string* error) {
  if (::access("/usr/bin/ucx_perftest", X_OK) != 0) {
    *error = "ucx_perftest not installed (Debian's ucx-utils)";
    return std::nullopt;
  }
  for (int attempt = 0; attempt < 5; ++attempt) {
    const std::string port = std::to_string(40000 + ::getpid() % 20000 + attempt * 7);
    const pid_t server = SpawnQuiet({"/usr/bin/ucx_perftest", "-p", port}, netns);
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    int rc = 0;
    const std::string out =
        Run("ucx_perftest " + host + " -p " + port + " -t ucp_am_bw -e -f -s " +
                std::to_string(size) + " -n " + std::to_string(iterations) + " -w " +
                std::to_string(std::max<std::uint64_t>(1, iterations / 10)),
            &rc);
    StopSpawned(server);
    if (rc != 0) {
      *error = "ucx_perftest failed: " + out.substr(0, 300);
      continue;
    }
    // The last line: iterations, latency (50%, average, overall; us), bandwidth (average,
    // overall; MB/s of 2^20 bytes), message rate.
    std::istringstream last(out.substr(out.find_last_of('\n', out.size() - 2) + 1));
    std::vector<double> fields;
    for (double v; last >> v;) fields.push_back(v);
    if (fields.size() >= 6) return fields[5] * (1 << 20);
    *error = "ucx_perftest: unexpected output: " + out.substr(0, 300);
  }
  return std::nullopt;
}

struct LendingNode {
  std::unique_ptr<Lender> lender;
  std::unique_ptr<transport::PeerServer> server;
  RemoteMember member;
};

Result<LendingNode> StartLender(const std::string& id, std::uint64_t bytes, bool ucx,
                                const std::string& host) {
  LendingNode n;
  LenderConfig lc;
  lc.lend_bytes = bytes;
  lc.max_grant_bytes = bytes;
  lc.populate = true;  // as tierpoold does without --no-populate
  auto lender = Lender::Create(lc);
  if (!lender.ok()) return lender.status();
  n.lender = std::move(lender).value();
  transport::PeerServerConfig sc;
  sc.listen = host + ":0";
  sc.ucx = ucx;
  const transport::PeerIdentity self{id, transport::RandomIncarnation()};
  n.server = std::make_unique<transport::PeerServer>(sc, *transport::PeerAuth::FromSecret(kSecret),
                                                     self, n.lender.get());
  TIERPOOL_RETURN_IF_ERROR(n.server->Start());
  n.member = {id, self.incarnation, host + ":" + std::to_string(n.server->port()), bytes};
  return n;
}

// `count` lenders in a child process inside `netns`, on its far address: their members, and a
// pipe whose closing ends that process (StopLendersIn).
struct LendersIn {
  pid_t pid = -1;
  int stop_fd = -1;
  std::vector<RemoteMember> members;
};

Result<LendersIn> StartLendersIn(const BenchNetns& netns, std::uint32_t count, std::uint64_t bytes,
                                 bool ucx) {
  int report[2], stop[2];
  if (::pipe2(report, O_CLOEXEC) != 0 || ::pipe2(stop, O_CLOEXEC) != 0) {
    return Status::Internal("pipe2 failed");
  }
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(report[0]);
    ::close(stop[1]);
    if (!netns.EnterInChild()) ::_exit(126);
    std::vector<LendingNode> nodes;
    std::string lines;
    for (std::uint32_t i = 0; i < count; ++i) {
      auto n = StartLender("lender" + std::to_string(i), bytes, ucx, netns.far_address());
      if (!n.ok()) ::_exit(1);
      lines += n->member.node_id + " " + std::to_string(n->member.incarnation) + " " +
               n->member.address + "\n";
      nodes.push_back(std::move(n).value());
    }
    if (::write(report[1], lines.data(), lines.size()) != static_cast<ssize_t>(lines.size())) {
      ::_exit(1);
    }
    ::close(report[1]);
    char c;
    while (::read(stop[0], &c, 1) > 0) {
    }
    ::_exit(0);  // the lenders' threads end with the process
  }
  ::close(report[1]);
  ::close(stop[0]);
  LendersIn in{pid, stop[1], {}};
  std::string text;
  char buf[4096];
  for (ssize_t r; (r = ::read(report[0], buf, sizeof buf)) > 0;) text.append(buf, r);
  ::close(report[0]);
  std::istringstream lines(text);
  for (RemoteMember m; lines >> m.node_id >> m.incarnation >> m.address;) {
    m.lend_bytes = bytes;
    in.members.push_back(m);
  }
  if (in.members.size() != count) {
    return Status::Internal("the lenders in " + netns.name() + " did not start");
  }
  return in;
}

void StopLendersIn(LendersIn& in) {
  if (in.stop_fd >= 0) ::close(in.stop_fd);
  if (in.pid > 0) ::waitpid(in.pid, nullptr, 0);
  in = {};
}

// Up to `depth` operations in flight, each holding one of `depth` slots (a buffer); Wait
// returns the first error.
class Window {
 public:
  explicit Window(std::uint32_t depth) : busy_(depth, false) {}
  std::size_t Acquire() {
    std::unique_lock lock(mu_);
    std::size_t slot = 0;
    cv_.wait(lock, [&] {
      for (slot = 0; slot < busy_.size(); ++slot) {
        if (!busy_[slot]) return true;
      }
      return false;
    });
    busy_[slot] = true;
    return slot;
  }
  void Release(std::size_t slot, const Status& s) {
    {
      std::lock_guard lock(mu_);
      busy_[slot] = false;
      if (!s.ok() && error_.ok()) error_ = s;
    }
    cv_.notify_all();
  }
  Status Wait() {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [this] { return std::find(busy_.begin(), busy_.end(), true) == busy_.end(); });
    return error_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<bool> busy_;  // guarded by mu_
  Status error_;            // guarded by mu_
};

std::vector<std::uint64_t> ParseSizes(const std::string& list) {
  std::vector<std::uint64_t> out;
  std::stringstream in(list);
  for (std::string item; std::getline(in, item, ',');) {
    auto v = ParseByteSize(item);
    if (!v.ok() || *v == 0) return {};
    out.push_back(*v);
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  LogToStderr();
  spdlog::set_level(spdlog::level::warn);
  std::string sizes_s = "1M,4M,64M", volume_s = "1G", transport_s = "tcp";
  std::uint32_t replicas = 1, depth = 1, seconds = 3;
  bool as_json = false, veth = false;
  po::options_description opts("tierpool bench remote");
  opts.add_options()("help,h", "help")("sizes", po::value(&sizes_s)->default_value("1M,4M,64M"),
                                       "object sizes, comma-separated")(
      "volume", po::value(&volume_s)->default_value("1G"), "bytes put then got at each size")(
      "replicas", po::value(&replicas)->default_value(1),
      "copies of each object, on as many lenders")("in-flight", po::value(&depth)->default_value(1),
                                                   "operations outstanding (and iperf3 streams)")(
      "iperf-seconds", po::value(&seconds)->default_value(2),
      "how long iperf3 runs, before and after each size")(
      "transport", po::value(&transport_s)->default_value("tcp"),
      "the data path: tcp (tierpool's frames, against iperf3) or ucx (against ucx_perftest)")(
      "veth", po::bool_switch(&veth),
      "lenders (and the reference's server) in a network namespace of their own, across a veth "
      "pair (root)")("json", po::bool_switch(&as_json), "print JSON");
  po::variables_map vm;
  if (auto done = ParseToolOptions(argc, argv, opts, "tierpool bench remote", &vm)) return *done;
  const auto sizes = ParseSizes(sizes_s);
  const auto volume = ParseByteSize(volume_s);
  const bool ucx = transport_s == "ucx";
  if (sizes.empty() || !volume.ok() || replicas == 0 || replicas > 8 || depth == 0 || depth > 64 ||
      seconds == 0 || (transport_s != "tcp" && !ucx)) {
    std::cerr << "tierpool bench remote: bad --sizes, --volume, --replicas (1-8), --in-flight "
                 "(1-64), --iperf-seconds or --transport (tcp, ucx)\n";
    return 2;
  }
  const std::string engine = ucx ? "ucx_perftest" : "iperf3";

  // iperf3 runs before and after each size's puts and gets, and that size's ratios use the mean
  // of the two: on a shared machine the reference must come from the same minute.
  std::string iperf_error;

  // Every lender holds one copy of the whole volume, plus a region's slack.
  const std::uint64_t largest = *std::max_element(sizes.begin(), sizes.end());
  const std::uint64_t lend = *volume + largest + (128ull << 20);
  // With --veth, the lenders and the reference's server are in a namespace of their own, across
  // a veth pair; otherwise in this process (the lenders) and on 127.0.0.1.
  std::optional<BenchNetns> netns;
  LendersIn far_lenders;
  std::vector<LendingNode> lenders;
  std::vector<RemoteMember> members;
  if (veth) {
    auto made = BenchNetns::Create();
    if (!made.ok()) {
      std::cerr << "tierpool bench remote --veth: " << made.status().ToString() << "\n";
      return 1;
    }
    netns.emplace(std::move(made).value());
    // Before this process has any thread: the child forked here runs the lenders.
    auto in = StartLendersIn(*netns, replicas, lend, ucx);
    if (!in.ok()) {
      std::cerr << "tierpool bench remote --veth: " << in.status().ToString() << "\n";
      return 1;
    }
    far_lenders = std::move(in).value();
    members = far_lenders.members;
  }
  for (std::uint32_t i = 0; !veth && i < replicas; ++i) {
    auto n = StartLender("lender" + std::to_string(i), lend, ucx, "127.0.0.1");
    if (!n.ok()) {
      std::cerr << "tierpool bench remote: " << n.status().ToString() << "\n";
      return 1;
    }
    members.push_back(n->member);
    lenders.push_back(std::move(n).value());
  }
  const std::string far_host = veth ? netns->far_address() : "127.0.0.1";
  const BenchNetns* far_netns = veth ? &*netns : nullptr;
  RemoteTierConfig rc;
  rc.replicas = replicas;
  rc.io_threads = std::max<std::uint32_t>(4, depth * replicas);
  rc.connections_per_peer = std::max<std::uint32_t>(4, depth);
  rc.maintenance_interval_ms = 60'000;  // grants are made below, before the clock starts
  rc.probe_interval_ms = 60'000;
  rc.ucx = ucx;
  RemoteTier tier(rc, *transport::PeerAuth::FromSecret(kSecret), {"borrower", 1});
  tier.SetMembers(members);
  tier.RunMaintenance();
  if (ucx) {
    for (const RemotePeerInfo& p : tier.Peers()) {
      if (p.transport != "ucx") {
        std::cerr << "tierpool bench remote: " << p.member.node_id << " offered no UCX path\n";
        return 1;
      }
    }
  }

  json rows = json::array();
  bool have_iperf = true;
  for (const std::uint64_t size : sizes) {
    const std::uint64_t count = std::max<std::uint64_t>(1, *volume / size);
    // The reference, before and after: iperf3 for the TCP path; for UCX, ucx_perftest moving
    // the same bytes in messages of this size.
    auto reference = [&]() -> std::optional<double> {
      return ucx ? UcxPerftest(size, count, far_host, far_netns, &iperf_error)
                 : Iperf3(depth, seconds, far_host, far_netns, &iperf_error);
    };
    std::optional<double> before;
    if (have_iperf) before = reference();
    have_iperf = before.has_value();
    std::vector<std::byte> src(size);
    for (std::uint64_t i = 0; i < size; i += 8) {
      const std::uint64_t v = (i + size) * 0x9e3779b97f4a7c15ull;
      std::memcpy(src.data() + i, &v, std::min<std::uint64_t>(8, size - i));
    }
    const RecordInfo info{1, 1, size, Xxh3(src.data(), size)};
    // Room first (grants are made ahead of need in a running node): the clock times bytes only.
    std::vector<Extent> extents;
    for (std::uint64_t i = 0; i < count; ++i) {
      auto e = tier.Allocate(size, {});
      for (int tries = 0; !e.ok() && tries < 20; ++tries) {
        tier.RunMaintenance();
        e = tier.Allocate(size, {});
      }
      if (!e.ok()) {
        std::cerr << "tierpool bench remote: " << e.status().ToString() << "\n";
        return 1;
      }
      extents.push_back(*e);
    }
    Window put(depth);
    auto t0 = std::chrono::steady_clock::now();
    for (const Extent& e : extents) {
      const std::size_t slot = put.Acquire();
      tier.Write(e, info, src.data(), [&put, slot](Status st) { put.Release(slot, st); });
    }
    Status s = put.Wait();
    const double put_s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (!s.ok()) {
      std::cerr << "tierpool bench remote: put: " << s.ToString() << "\n";
      return 1;
    }
    // Gets into `depth` buffers (each reused once its read is done).
    std::vector<std::vector<std::byte>> dst(depth, std::vector<std::byte>(size));
    Window get(depth);
    t0 = std::chrono::steady_clock::now();
    for (const Extent& e : extents) {
      const std::size_t slot = get.Acquire();
      tier.Read(e, info, dst[slot].data(), [&get, slot](Status st) { get.Release(slot, st); });
    }
    s = get.Wait();
    const double get_s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (!s.ok()) {
      std::cerr << "tierpool bench remote: get: " << s.ToString() << "\n";
      return 1;
    }
    for (const Extent& e : extents) (void)tier.Free(e);
    std::optional<double> iperf;
    if (have_iperf) {
      if (auto after = reference()) iperf = (*before + *after) / 2;
      have_iperf = iperf.has_value();
    }
    if (iperf) {
      rows.push_back({{"engine", engine},
                      {"op", ucx ? "am_bw" : "tcp"},
                      {"size", size},
                      {"gbps", *iperf / 1e9}});
    }
    const double bytes = static_cast<double>(count * size);
    for (const auto& [op, secs] : {std::pair{"put", put_s}, std::pair{"get", get_s}}) {
      json row = {{"engine", "tierpool"}, {"op", op}, {"size", size}, {"gbps", bytes / secs / 1e9}};
      if (std::string(op) == "put") row["wire_gbps"] = bytes * replicas / secs / 1e9;
      if (iperf) row["ratio_to_reference"] = bytes / secs / *iperf;
      rows.push_back(row);
    }
  }
  if (veth) StopLendersIn(far_lenders);
  json out = {{"volume_bytes", *volume},
              {"replicas", replicas},
              {"in_flight", depth},
              {"transport", transport_s},
              {"reference", engine},
              {"path", veth ? "veth" : "loopback"},
              {"rows", rows}};
  if (!have_iperf) out[engine] = iperf_error;
  if (as_json) {
    std::cout << out.dump(2) << "\n";
    return 0;
  }
  std::printf("remote bench: %s per size, %u replica(s), %u in flight, %s, over %s\n",
              FormatBytes(*volume).c_str(), replicas, depth,
              veth ? "across a veth pair" : "loopback", ucx ? "UCX" : "TCP frames");
  for (const auto& r : rows) {
    const std::uint64_t size = r["size"].get<std::uint64_t>();
    std::printf("  %-12s %-5s %8s %7.2f GB/s %s\n", r["engine"].get<std::string>().c_str(),
                r["op"].get<std::string>().c_str(), FormatBytes(size).c_str(),
                r["gbps"].get<double>(),
                r.contains("ratio_to_reference")
                    ? ("(" + std::to_string(r["ratio_to_reference"].get<double>()).substr(0, 4) +
                       "x " + engine + ")")
                          .c_str()
                    : "");
  }
  if (!have_iperf) std::printf("  %s: %s\n", engine.c_str(), iperf_error.c_str());
  return 0;
}
