// tierpool-live-replay: run as `tierpool replay SCHEDULE --live ...`. Plays a schedule as a job
// against tierpoold with real bytes and reports what the simulation promised beside what the
// server delivered (docs/schedules.md, "Live replay").
//
// Because hbm and dram are both host memory here, the run is calibrated: the server's hbm<->dram
// copy bandwidth is measured in the same run, compute times are stretched by the device
// profile's link bandwidth / the measured one (so transfer : compute is the profile's), and the
// simulation is run on that calibrated profile for the prediction.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/program_options.hpp>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <thread>

#include "benchmarks/live_replay.h"
#include "common/units.h"
#include "prefetch/cost_model.h"
#include "prefetch/planner.h"
#include "prefetch/report.h"

namespace po = boost::program_options;
using json = nlohmann::json;
using namespace tierpool;
using namespace tierpool::prefetch;

namespace {

// Whether this build reads and writes a device hbm in place (device views and reservations).
#ifdef TIERPOOL_HAVE_CUDA
constexpr bool kDeviceViews = true;
#else
constexpr bool kDeviceViews = false;
#endif

int Fail(const Status& s) {
  std::cerr << "tierpool replay --live: " << s.ToString() << "\n";
  return 1;
}

// A private tierpoold sized for the run, on its own socket; stopped on destruction.
class PrivateServer {
 public:
  Status Start(std::uint64_t hbm, std::uint64_t dram, const std::string& link_rate,
               const std::string& log_level, int hbm_device) {
    namespace fs = std::filesystem;
    const fs::path self = fs::read_symlink("/proc/self/exe").parent_path();
    std::string path;
    for (const auto& c : {self / "tierpoold", self / ".." / "store" / "tierpoold"}) {
      if (fs::exists(c)) {
        path = c.string();
        break;
      }
    }
    if (path.empty()) return Status::NotFound("tierpoold not found beside " + self.string());
    socket_ = "/tmp/tierpool-live-" + std::to_string(::getpid()) + ".sock";
    std::vector<std::string> args = {path,
                                     "--socket",
                                     socket_,
                                     "--hbm",
                                     std::to_string(hbm),
                                     "--dram",
                                     std::to_string(dram),
                                     "--hbm-high-watermark",
                                     "1",
                                     "--hbm-low-watermark",
                                     "1",
                                     "--link-rate",
                                     link_rate,
                                     "--no-populate",  // the warm-up iteration touches it
                                     "--log-level",
                                     log_level,
                                     "--hbm-device",
                                     std::to_string(hbm_device)};
    pid_ = ::fork();
    if (pid_ < 0) return Status::IoError("fork failed");
    if (pid_ == 0) {
      std::vector<char*> argv;
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      ::execv(argv[0], argv.data());
      ::_exit(127);
    }
    for (int i = 0; i < 1500; ++i) {
      ClientOptions o;
      o.socket_path = socket_;
      if (Client::Connect(o).ok()) return Status::Ok();
      int st = 0;
      if (::waitpid(pid_, &st, WNOHANG) == pid_) {
        pid_ = -1;
        return Status::Unavailable("tierpoold exited at start");
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return Status::Unavailable("tierpoold did not start within 30 s");
  }
  ~PrivateServer() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGTERM);
    ::waitpid(pid_, nullptr, 0);
  }
  const std::string& socket() const { return socket_; }

 private:
  pid_t pid_ = -1;
  std::string socket_;
};

json ReportFields(const ReplayReport& r) {
  return {{"policy", r.policy},       {"budget_bytes", r.budget},   {"peak_hbm_bytes", r.peak_hbm},
          {"time_us", r.time_us},     {"compute_us", r.compute_us}, {"stall_us", r.stall_us},
          {"h2d_bytes", r.h2d_bytes}, {"d2h_bytes", r.d2h_bytes},   {"actions", r.actions}};
}

double Error(double live, double predicted) {
  return predicted > 0 ? (live - predicted) / predicted : 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string schedule_path, device = "h100", hbm, policy = "planned", socket, json_path,
                             trace_path, link_rate = "auto", verify = "all", plan_file,
                             server_log_level = "warn";
  int hbm_device = -1;
  int iterations = 2;
  double iteration_ms = 1500;
  double margin = PlannerConfig{}.prefetch_margin;
  bool no_early_loads = false;
  std::uint64_t calibrate_bytes = 8ull << 20;
  po::options_description opts(
      "tierpool replay SCHEDULE --live --device NAME --hbm BUDGET --policy P [options]");
  // clang-format off
  opts.add_options()
    ("help,h", "print this help")
    ("live", "replay against tierpoold (this command)")
    ("schedule", po::value(&schedule_path), "the schedule (.pb or .json)")
    ("device", po::value(&device)->default_value("h100"), "device profile: a name or a JSON file")
    ("hbm", po::value(&hbm), "hbm budget: a size, or a % of the no-offload peak")
    ("policy", po::value(&policy)->default_value("planned"), "none, reactive-lru or planned")
    ("plan", po::value(&plan_file),
     "planned: play this plan (.pb or .json: `tierpool plan`'s, or a tierpool.torch.offload "
     "job's) instead of planning on the calibrated profile; its budget unless --hbm gives one")
    ("iterations", po::value(&iterations)->default_value(2),
     "iterations of a repeating schedule (the last is measured)")
    ("socket", po::value(&socket),
     "use this running tierpoold (its hbm tier should be the budget's size); default: start a "
     "private one sized for the run")
    ("link-rate", po::value(&link_rate)->default_value("auto"),
     "private server: cap each tier link at this many bytes/s (0: no cap), so that host-side "
     "byte work fits in the stretched compute windows; auto: the rate at which an iteration "
     "takes about --iteration-ms")
    ("iteration-ms", po::value(&iteration_ms)->default_value(1500),
     "with --link-rate auto: the stretched iteration's length to aim for")
    ("verify", po::value(&verify)->default_value("all"),
     "all: every byte read back is compared; stamp: 64 bytes at each end")
    ("margin", po::value(&margin)->default_value(margin), "planner prefetch margin")
    ("no-early-loads", po::bool_switch(&no_early_loads),
     "plan without the rounds the planner adds where its plan stalls (early loads, reload-aware "
     "evictions), as `tierpool plan --no-early-loads` does")
    ("hbm-device", po::value(&hbm_device)->default_value(-1),
     "private server: the CUDA device whose memory is its hbm tier (-1: the host stand-in); a "
     "build with CUDA also writes and reads the job's hbm tensors there in place")
    ("server-log-level", po::value(&server_log_level)->default_value("warn"),
     "private server: its --log-level (debug shows each planned move and each miss)")
    ("json", po::value(&json_path), "write the report (live, simulated, error) here")
    ("trace", po::value(&trace_path), "write a Chrome trace of the measured iteration here");
  // clang-format on
  po::positional_options_description pos;
  pos.add("schedule", 1);
  po::variables_map vm;
  try {
    po::store(po::command_line_parser(argc, argv).options(opts).positional(pos).run(), vm);
    po::notify(vm);
  } catch (const std::exception& e) {
    return Fail(Status::InvalidArgument(e.what()));
  }
  if (vm.count("help") || schedule_path.empty()) {
    std::cout << opts << "\n";
    return vm.count("help") ? 0 : 2;
  }
  if (verify != "all" && verify != "stamp") {
    return Fail(Status::InvalidArgument("--verify is all or stamp"));
  }
  auto p = ParsePolicy(policy);
  if (!p.ok()) return Fail(p.status());
  auto profile = LoadProfile(device);
  if (!profile.ok()) return Fail(profile.status());
  auto loaded = LoadSchedule(schedule_path);
  if (!loaded.ok()) return Fail(loaded.status());
  Schedule s = std::move(loaded).value();
  ApplyCostModel(*profile, &s);
  // The server hands out 4 KiB extents: plan and simulate in the sizes it accounts.
  for (auto& t : *s.mutable_tensors())
    t.set_size_bytes(AlignUp(std::max<std::uint64_t>(t.size_bytes(), 1), 4096));
  Lifetimes lt(s);
  std::optional<schedule::Plan> plan;
  if (!plan_file.empty()) {
    if (*p != Policy::kPlanned) {
      return Fail(Status::InvalidArgument("--plan goes with --policy planned"));
    }
    auto read = LoadPlan(plan_file, s);
    if (!read.ok()) return Fail(read.status());
    plan = std::move(read).value();
  }
  std::uint64_t budget = lt.peak_bytes();
  if (*p != Policy::kNone) {
    if (hbm.empty() && !plan) return Fail(Status::InvalidArgument("give --hbm BUDGET"));
    auto b = hbm.empty() ? Result<std::uint64_t>(plan->hbm_budget_bytes())
                         : ParseHbmBudget(hbm, lt.peak_bytes());
    if (!b.ok()) return Fail(b.status());
    budget = AlignUp(*b, 4096);
  }
  std::uint64_t all_bytes = 0;
  for (const auto& t : s.tensors()) all_bytes += t.size_bytes();

  // Calibration objects fit in half the budget, so a tier of the budget's size can take them.
  calibrate_bytes = std::clamp<std::uint64_t>(budget / 2 / 4096 * 4096, 4096, calibrate_bytes);
  std::unique_ptr<PrivateServer> server;
  if (socket.empty()) {
    server = std::make_unique<PrivateServer>();
    // reactive-lru swaps when the tier is full, so its tier is the budget. Under planned the
    // executor holds the bytes in use to the budget, and under none nothing moves; those tiers
    // get one largest tensor more, for fragmentation (the simulation counts bytes, the arena
    // needs contiguous extents).
    std::uint64_t largest = 0;
    for (const auto& t : s.tensors()) largest = std::max<std::uint64_t>(largest, t.size_bytes());
    const std::uint64_t hbm_tier = budget + (*p == Policy::kReactiveLru ? 0 : largest);
    if (link_rate == "auto") {
      double compute_us = 0;
      for (const auto& st : s.steps()) compute_us += st.compute_us();
      const double stretch_wanted = iteration_ms * 1000 / std::max(1.0, compute_us);
      const double rate = std::clamp(profile->h2d_gbps * 1e9 / stretch_wanted, 10e6, 8e9);
      link_rate = std::to_string(static_cast<std::uint64_t>(rate));
    }
    const std::uint64_t dram_tier = all_bytes + 4 * calibrate_bytes + (64ull << 20);
    if (Status st = server->Start(hbm_tier, dram_tier, link_rate, server_log_level, hbm_device);
        !st.ok())
      return Fail(st);
    socket = server->socket();
  }
  ClientOptions co;
  co.socket_path = socket;
  co.ns = "live-replay-" + std::to_string(::getpid());
  auto client = Client::Connect(co);
  if (!client.ok()) return Fail(client.status());

  auto cal = live::CalibrateLinks(**client, calibrate_bytes);
  if (!cal.ok()) return Fail(cal.status());
  const double stretch = profile->h2d_gbps / cal->h2d_gbps;
  DeviceProfile calibrated = *profile;
  calibrated.name = profile->name + "-calibrated";
  calibrated.h2d_gbps = cal->h2d_gbps;
  calibrated.d2h_gbps = cal->d2h_gbps;
  calibrated.link_latency_us = cal->latency_us;
  for (auto& st : *s.mutable_steps()) st.set_compute_us(st.compute_us() * stretch);
  std::fprintf(stderr,
               "calibration: hbm<-dram %.2f GB/s, hbm->dram %.2f GB/s, %.0f us per move; "
               "compute stretched x%.2f (%s link %.0f GB/s)\n",
               cal->h2d_gbps, cal->d2h_gbps, cal->latency_us, stretch, profile->name.c_str(),
               profile->h2d_gbps);
  if (server == nullptr && *p == Policy::kReactiveLru) {
    auto st = (*client)->ServerStat();
    for (const auto& t : st.ok() ? st->tiers : std::vector<TierInfo>{}) {
      if (t.tier == TierKind::kHbm && t.capacity != budget) {
        std::fprintf(stderr,
                     "note: the server's hbm tier is %s, the budget %s: reactive-lru swaps at "
                     "the tier's size\n",
                     FormatBytes(t.capacity).c_str(), FormatBytes(budget).c_str());
      }
    }
  }

  if (*p == Policy::kPlanned && !plan) {
    auto built = BuildPlan(
        s, lt, calibrated,
        {.hbm_budget = budget, .prefetch_margin = margin, .early_loads = !no_early_loads});
    if (!built.ok()) return Fail(built.status());
    plan = std::move(built).value();
  }
  auto predicted = Replay(s, lt, calibrated,
                          {.policy = *p,
                           .hbm_budget = *p == Policy::kNone ? 0 : budget,
                           .plan = plan ? &*plan : nullptr,
                           .lower_bound = false});
  if (!predicted.ok()) return Fail(predicted.status());
  auto live = live::RunLive(**client, s, lt,
                            {.policy = *p,
                             .budget = budget,
                             .plan = plan ? &*plan : nullptr,
                             .iterations = iterations,
                             .verify_all = verify == "all",
                             .record_timeline = !trace_path.empty(),
                             .device = hbm_device >= 0 && kDeviceViews});
  if (!live.ok()) return Fail(live.status());
  const ReplayReport& r = live->r;
  std::printf(
      "%s, %s, budget %s, %s: live %.3f ms (stall %.3f ms), simulated %.3f ms (stall %.3f ms), "
      "error %+.1f%%; peak hbm %s (budget %s); h2d %s, d2h %s; %llu actions; wrong bytes %llu, "
      "failed gets %llu, uses outside hbm %llu\n",
      s.name().c_str(), r.policy.c_str(),
      *p == Policy::kNone ? "none" : FormatBytes(budget).c_str(), profile->name.c_str(),
      r.time_us / 1000, r.stall_us / 1000, predicted->time_us / 1000, predicted->stall_us / 1000,
      100 * Error(r.time_us, predicted->time_us), FormatBytes(r.peak_hbm).c_str(),
      FormatBytes(budget).c_str(), FormatBytes(r.h2d_bytes).c_str(),
      FormatBytes(r.d2h_bytes).c_str(), static_cast<unsigned long long>(r.actions),
      static_cast<unsigned long long>(live->wrong_bytes),
      static_cast<unsigned long long>(live->get_errors),
      static_cast<unsigned long long>(live->not_in_hbm));
  if (*p == Policy::kPlanned) {
    std::printf("executor: hits %llu, late %llu, misses %llu, skipped %llu, waited for room %llu\n",
                static_cast<unsigned long long>(live->hits),
                static_cast<unsigned long long>(live->late),
                static_cast<unsigned long long>(live->misses),
                static_cast<unsigned long long>(live->actions_skipped),
                static_cast<unsigned long long>(live->waited_for_room));
  }
  for (const auto& prob : r.problems) std::printf("  problem: %s\n", prob.c_str());
  if (!json_path.empty()) {
    json j = {{"schedule", s.name()},
              {"device", profile->name},
              {"calibration",
               {{"h2d_gbps", cal->h2d_gbps},
                {"d2h_gbps", cal->d2h_gbps},
                {"move_latency_us", cal->latency_us},
                {"compute_stretch", stretch}}},
              {"live", ReportFields(r)},
              {"simulated", ReportFields(*predicted)},
              {"error",
               {{"time", Error(r.time_us, predicted->time_us)},
                {"stall_us", r.stall_us - predicted->stall_us}}},
              {"checks",
               {{"wrong_bytes", live->wrong_bytes},
                {"failed_gets", live->get_errors},
                {"uses_outside_hbm", live->not_in_hbm},
                {"over_budget", *p != Policy::kNone && r.peak_hbm > budget},
                {"overrun_us", live->overrun_us}}},
              {"executor",
               {{"hits", live->hits},
                {"late", live->late},
                {"misses", live->misses},
                {"skipped", live->actions_skipped},
                {"waited_for_room", live->waited_for_room}}},
              {"problems", r.problems}};
    std::ofstream f(json_path);
    f << j.dump(2) << "\n";
    if (!f) return Fail(Status::IoError("cannot write " + json_path));
  }
  if (!trace_path.empty()) {
    std::ofstream f(trace_path);
    f << ChromeTraceJson(r);
    if (!f) return Fail(Status::IoError("cannot write " + trace_path));
  }
  const bool clean = live->wrong_bytes == 0 && live->get_errors == 0 &&
                     (*p == Policy::kNone || r.peak_hbm <= budget);
  return clean ? 0 : 3;
}
