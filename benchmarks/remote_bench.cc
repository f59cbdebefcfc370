// tierpool-remote-bench (run as `tierpool bench remote`): the remote tier's put (a replicated
// write, its source checked against its checksum) and get (a read checked against it) to
// lenders on 127.0.0.1, beside iperf3 on the same loopback with as many streams, in one run.
//
// Lenders and borrower run in this process, each lender behind its own peer listener, so every
// byte crosses a loopback TCP connection as it would between two sidecars.
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

// iperf3 on 127.0.0.1 with `streams` parallel streams for `seconds`: bytes/s received, or
// nullopt (and *error) without iperf3.
std::optional<double> Iperf3(std::uint32_t streams, std::uint32_t seconds, std::string* error) {
  if (::access("/usr/bin/iperf3", X_OK) != 0) {
    *error = "iperf3 not installed (Debian's iperf3)";
    return std::nullopt;
  }
  for (int attempt = 0; attempt < 5; ++attempt) {
    const int port = 20000 + static_cast<int>(::getpid() % 20000) + attempt * 7;
    const pid_t server = ::fork();
    if (server == 0) {
      std::freopen("/dev/null", "w", stdout);
      std::freopen("/dev/null", "w", stderr);
      ::execl("/usr/bin/iperf3", "iperf3", "-s", "-1", "-B", "127.0.0.1", "-p",
              std::to_string(port).c_str(), nullptr);
      ::_exit(127);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    int rc = 0;
    const std::string out =
        Run("iperf3 -c 127.0.0.1 -p " + std::to_string(port) + " -t " + std::to_string(seconds) +
                " -P " + std::to_string(streams) + " -J",
            &rc);
    ::kill(server, SIGTERM);
    ::waitpid(server, nullptr, 0);
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

struct LendingNode {
  std::unique_ptr<Lender> lender;
  std::unique_ptr<transport::PeerServer> server;
  RemoteMember member;
};

Result<LendingNode> StartLender(const std::string& id, std::uint64_t bytes) {
  LendingNode n;
  LenderConfig lc;
  lc.lend_bytes = bytes;
  lc.max_grant_bytes = bytes;
  lc.populate = true;  // as tierpoold does without --no-populate
  auto lender = Lender::Create(lc);
  if (!lender.ok()) return lender.status();
  n.lender = std::move(lender).value();
  transport::PeerServerConfig sc;
  sc.listen = "127.0.0.1:0";
  const transport::PeerIdentity self{id, transport::RandomIncarnation()};
  n.server = std::make_unique<transport::PeerServer>(sc, *transport::PeerAuth::FromSecret(kSecret),
                                                     self, n.lender.get());
  TIERPOOL_RETURN_IF_ERROR(n.server->Start());
  n.member = {id, self.incarnation, "127.0.0.1:" + std::to_string(n.server->port()), bytes};
  return n;
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
  std::string sizes_s = "1M,4M,64M", volume_s = "1G";
  std::uint32_t replicas = 1, depth = 1, seconds = 3;
  bool as_json = false;
  po::options_description opts("tierpool bench remote");
  opts.add_options()("help,h", "help")("sizes", po::value(&sizes_s)->default_value("1M,4M,64M"),
                                       "object sizes, comma-separated")(
      "volume", po::value(&volume_s)->default_value("1G"), "bytes put then got at each size")(
      "replicas", po::value(&replicas)->default_value(1),
      "copies of each object, on as many lenders")("in-flight", po::value(&depth)->default_value(1),
                                                   "operations outstanding (and iperf3 streams)")(
      "iperf-seconds", po::value(&seconds)->default_value(2),
      "how long iperf3 runs, before and after each size")("json", po::bool_switch(&as_json),
                                                          "print JSON");
  po::variables_map vm;
  if (auto done = ParseToolOptions(argc, argv, opts, "tierpool bench remote", &vm)) return *done;
  const auto sizes = ParseSizes(sizes_s);
  const auto volume = ParseByteSize(volume_s);
  if (sizes.empty() || !volume.ok() || replicas == 0 || replicas > 8 || depth == 0 || depth > 64 ||
      seconds == 0) {
    std::cerr << "tierpool bench remote: bad --sizes, --volume, --replicas (1-8), --in-flight "
                 "(1-64) or --iperf-seconds\n";
    return 2;
  }

  // iperf3 runs before and after each size's puts and gets, and that size's ratios use the mean
  // of the two: on a shared machine the reference must come from the same minute.
  std::string iperf_error;

  // Every lender holds one copy of the whole volume, plus a region's slack.
  const std::uint64_t largest = *std::max_element(sizes.begin(), sizes.end());
  const std::uint64_t lend = *volume + largest + (128ull << 20);
  std::vector<LendingNode> lenders;
  std::vector<RemoteMember> members;
  for (std::uint32_t i = 0; i < replicas; ++i) {
    auto n = StartLender("lender" + std::to_string(i), lend);
    if (!n.ok()) {
      std::cerr << "tierpool bench remote: " << n.status().ToString() << "\n";
      return 1;
    }
    members.push_back(n->member);
    lenders.push_back(std::move(n).value());
  }
  RemoteTierConfig rc;
  rc.replicas = replicas;
  rc.io_threads = std::max<std::uint32_t>(4, depth * replicas);
  rc.connections_per_peer = std::max<std::uint32_t>(4, depth);
  rc.maintenance_interval_ms = 60'000;  // grants are made below, before the clock starts
  rc.probe_interval_ms = 60'000;
  RemoteTier tier(rc, *transport::PeerAuth::FromSecret(kSecret), {"borrower", 1});
  tier.SetMembers(members);
  tier.RunMaintenance();

  json rows = json::array();
  bool have_iperf = true;
  for (const std::uint64_t size : sizes) {
    std::optional<double> before;
    if (have_iperf) before = Iperf3(depth, seconds, &iperf_error);
    have_iperf = before.has_value();
    const std::uint64_t count = std::max<std::uint64_t>(1, *volume / size);
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
      if (auto after = Iperf3(depth, seconds, &iperf_error)) iperf = (*before + *after) / 2;
      have_iperf = iperf.has_value();
    }
    if (iperf) {
      rows.push_back({{"engine", "iperf3"}, {"op", "tcp"}, {"size", size}, {"gbps", *iperf / 1e9}});
    }
    const double bytes = static_cast<double>(count * size);
    for (const auto& [op, secs] : {std::pair{"put", put_s}, std::pair{"get", get_s}}) {
      json row = {{"engine", "tierpool"}, {"op", op}, {"size", size}, {"gbps", bytes / secs / 1e9}};
      if (std::string(op) == "put") row["wire_gbps"] = bytes * replicas / secs / 1e9;
      if (iperf) row["ratio_to_iperf3"] = bytes / secs / *iperf;
      rows.push_back(row);
    }
  }
  json out = {
      {"volume_bytes", *volume}, {"replicas", replicas}, {"in_flight", depth}, {"rows", rows}};
  if (!have_iperf) out["iperf3"] = iperf_error;
  if (as_json) {
    std::cout << out.dump(2) << "\n";
    return 0;
  }
  std::printf("remote bench: %s per size, %u replica(s), %u in flight, loopback TCP\n",
              FormatBytes(*volume).c_str(), replicas, depth);
  for (const auto& r : rows) {
    const std::uint64_t size = r["size"].get<std::uint64_t>();
    std::printf(
        "  %-8s %-4s %8s %7.2f GB/s %s\n", r["engine"].get<std::string>().c_str(),
        r["op"].get<std::string>().c_str(), FormatBytes(size).c_str(), r["gbps"].get<double>(),
        r.contains("ratio_to_iperf3")
            ? ("(" + std::to_string(r["ratio_to_iperf3"].get<double>()).substr(0, 4) + "x iperf3)")
                  .c_str()
            : "");
  }
  if (!have_iperf) std::printf("  iperf3: %s\n", iperf_error.c_str());
  return 0;
}
