// tierpool-live-replay: run as `tierpool replay SCHEDULE --live ...`. Plays a schedule as a job
// against tierpoold with real bytes and reports what the simulation promised beside what the
// server delivered (docs/schedules.md, "Live replay"); with --compare, none, reactive-lru and
// planned side by side.
//
// Because hbm and dram are both host memory here, the run is calibrated: the server's hbm<->dram
// copy bandwidth is measured in the same run, compute times are stretched by the device
// profile's link bandwidth / the measured one (so transfer : compute is the profile's), and the
// simulation is run on that calibrated profile for the prediction. A run whose server cannot
// make it mean anything (an hbm tier of the wrong size, links so fast that the host's byte work
// overruns the stretched compute) says so first, with what to change.
#include <unistd.h>

#include <boost/program_options.hpp>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>

#include "benchmarks/live_replay.h"
#include "benchmarks/private_server.h"
#include "common/units.h"
#include "prefetch/cost_model.h"
#include "prefetch/planner.h"
#include "prefetch/recompute.h"
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

// Host work past the steps' compute windows above this share of the iteration makes the live
// time mean little (it measures this host's memory copies, not the plan).
constexpr double kMaxOverrunShare = 0.25;

int Fail(const Status& s) {
  std::cerr << "tierpool replay --live: " << s.ToString() << "\n";
  return 1;
}

struct Flags {
  std::string schedule_path, device = "h100", hbm, policy = "planned", socket, json_path,
                             trace_path, link_rate = "auto", verify = "all", plan_file,
                             server_log_level = "warn";
  bool compare = false;
  int hbm_device = -1;
  int iterations = 2;
  double iteration_ms = 1500;
  double margin = PlannerConfig{}.prefetch_margin;
  bool no_early_loads = false;
  double recompute_share = 0;
  std::uint64_t calibrate_bytes = 8ull << 20;
};

// What one policy's run gave.
struct PolicyRun {
  Policy policy = Policy::kNone;
  std::uint64_t budget = 0;  // 0: none
  live::LinkCalibration cal;
  double stretch = 1;
  std::string link_rate;  // the private server's cap ("" with --socket)
  std::size_t plan_actions = 0;
  std::uint32_t recomputed = 0;  // activations the plan recomputes, and their compute
  double recompute_us = 0;
  ReplayReport predicted;
  live::LiveReport live;
  std::vector<std::string> failed;  // checks that failed, each saying what to change
  bool ran = false;                 // false: refused before running (the server's checks)
};

// The schedule as it is replayed: the profile's step times, 4 KiB extents (what the server
// accounts), and what follows from it.
struct Job {
  Schedule s;
  std::unique_ptr<Lifetimes> lt;
  std::uint64_t all_bytes = 0, largest = 0;
  double compute_us = 0;
};

json ReportFields(const ReplayReport& r) {
  return {{"policy", r.policy},       {"budget_bytes", r.budget},   {"peak_hbm_bytes", r.peak_hbm},
          {"time_us", r.time_us},     {"compute_us", r.compute_us}, {"stall_us", r.stall_us},
          {"h2d_bytes", r.h2d_bytes}, {"d2h_bytes", r.d2h_bytes},   {"actions", r.actions}};
}

double Error(double live, double predicted) {
  return predicted > 0 ? (live - predicted) / predicted : 0;
}

// A size as tierpoold's flags take it, rounded up to whole MiB ("293M").
std::string FlagSize(std::uint64_t bytes) {
  return std::to_string((bytes + (1ull << 20) - 1) >> 20) + "M";
}

// The link rate that makes the schedule's stretched iteration last about iteration_ms.
std::uint64_t AutoLinkRate(const Job& job, const DeviceProfile& profile, double iteration_ms) {
  const double stretch_wanted = iteration_ms * 1000 / std::max(1.0, job.compute_us);
  return static_cast<std::uint64_t>(std::clamp(profile.h2d_gbps * 1e9 / stretch_wanted, 10e6, 8e9));
}

// hbm the policy's run needs: reactive-lru swaps when the tier is full, so its tier is the
// budget; under planned the executor holds the bytes in use to the budget, and under none
// nothing moves: those get one largest tensor more, for fragmentation (the simulation counts
// bytes, the arena needs contiguous extents).
std::uint64_t TierFor(Policy p, std::uint64_t budget, const Job& job) {
  if (p == Policy::kNone) return job.lt->peak_bytes() + job.largest;
  return budget + (p == Policy::kReactiveLru ? 0 : job.largest);
}

// The checks a server given by --socket must pass for the policy's run to mean anything;
// empty when it passes.
std::vector<std::string> CheckServer(Client& client, Policy p, std::uint64_t budget,
                                     const Job& job) {
  std::vector<std::string> failed;
  auto st = client.ServerStat();
  if (!st.ok()) return {"could not read the server's stat: " + st.status().ToString()};
  const TierInfo* hbm = nullptr;
  for (const auto& t : st->tiers) {
    if (t.tier == TierKind::kHbm) hbm = &t;
  }
  const std::string name = PolicyName(p);
  const std::string fix =
      "; or drop --socket: the replay then starts a tierpoold of the right size for each policy";
  if (hbm == nullptr || hbm->capacity == 0) {
    failed.push_back("the server has no hbm tier; start tierpoold with --hbm " +
                     FlagSize(TierFor(p, budget, job)) + fix);
    return failed;
  }
  const std::uint64_t need = TierFor(p, budget, job);
  if (p == Policy::kReactiveLru && hbm->capacity > budget + 4096) {
    failed.push_back("reactive-lru: the server's hbm tier is " + FormatBytes(hbm->capacity) +
                     " and the budget " + FormatBytes(budget) +
                     "; reactive-lru swaps only when the tier is full, so it would run as if the "
                     "budget were the tier. Start tierpoold with --hbm " +
                     std::to_string(budget) + " --hbm-high-watermark 1 --hbm-low-watermark 1" +
                     fix);
  } else if (hbm->capacity < need) {
    failed.push_back(name + ": the server's hbm tier is " + FormatBytes(hbm->capacity) +
                     ", less than the " + FormatBytes(need) + " this run holds (" +
                     (p == Policy::kNone ? "the schedule's peak" : "the budget") +
                     " and its largest tensor). Start tierpoold with --hbm " + FlagSize(need) +
                     fix);
  }
  if (p != Policy::kPlanned && hbm->high_watermark < 1) {
    failed.push_back(name + ": the server moves hbm copies down above " +
                     std::to_string(static_cast<int>(hbm->high_watermark * 100)) +
                     "% of the tier, which the policy does not; start tierpoold with "
                     "--hbm-high-watermark 1 --hbm-low-watermark 1" +
                     fix);
  }
  return failed;
}

Result<PolicyRun> RunPolicy(const Flags& f, const Job& job, const DeviceProfile& profile, Policy p,
                            std::uint64_t budget, const std::optional<schedule::Plan>& given_plan) {
  PolicyRun run;
  run.policy = p;
  run.budget = p == Policy::kNone ? 0 : budget;
  // Calibration objects fit in half the budget, so a tier of the budget's size can take them.
  const std::uint64_t calibrate_bytes = std::clamp<std::uint64_t>(
      (p == Policy::kNone ? job.lt->peak_bytes() : budget) / 2 / 4096 * 4096, 4096,
      f.calibrate_bytes);
  std::unique_ptr<live::PrivateServer> server;
  std::string socket = f.socket;
  if (socket.empty()) {
    server = std::make_unique<live::PrivateServer>();
    run.link_rate = f.link_rate == "auto"
                        ? std::to_string(AutoLinkRate(job, profile, f.iteration_ms))
                        : f.link_rate;
    const std::uint64_t dram_tier = job.all_bytes + 4 * calibrate_bytes + (64ull << 20);
    TIERPOOL_RETURN_IF_ERROR(server->Start(TierFor(p, budget, job), dram_tier, run.link_rate,
                                           f.server_log_level, f.hbm_device));
    socket = server->socket();
  }
  ClientOptions co;
  co.socket_path = socket;
  co.ns = "live-replay-" + std::to_string(::getpid());
  auto client = Client::Connect(co);
  if (!client.ok()) return client.status();
  if (server == nullptr) {
    run.failed = CheckServer(**client, p, budget, job);
    if (!run.failed.empty()) return run;  // refused: no run to report
  }

  auto cal = live::CalibrateLinks(**client, calibrate_bytes);
  if (!cal.ok()) return cal.status();
  run.cal = *cal;
  run.stretch = profile.h2d_gbps / cal->h2d_gbps;
  DeviceProfile calibrated = profile;
  calibrated.name = profile.name + "-calibrated";
  calibrated.h2d_gbps = cal->h2d_gbps;
  calibrated.d2h_gbps = cal->d2h_gbps;
  calibrated.link_latency_us = cal->latency_us;
  Schedule s = job.s;
  for (auto& st : *s.mutable_steps()) st.set_compute_us(st.compute_us() * run.stretch);
  std::fprintf(stderr,
               "%s: hbm<-dram %.2f GB/s, hbm->dram %.2f GB/s, %.0f us per move; compute "
               "stretched x%.2f (%s link %.0f GB/s)\n",
               PolicyName(p).c_str(), cal->h2d_gbps, cal->d2h_gbps, cal->latency_us, run.stretch,
               profile.name.c_str(), profile.h2d_gbps);

  std::optional<schedule::Plan> plan = given_plan;
  if (p == Policy::kPlanned && !plan) {
    auto built = BuildPlan(s, *job.lt, calibrated,
                           {.hbm_budget = budget,
                            .prefetch_margin = f.margin,
                            .early_loads = !f.no_early_loads,
                            .recompute_share = f.recompute_share});
    if (!built.ok()) return built.status();
    plan = std::move(built).value();
  }
  // A plan that recomputes runs on the schedule with its recomputes applied: each copy is a
  // tensor of its own, put when its step (which runs its defining step's compute too) ends.
  const Lifetimes* lt = job.lt.get();
  std::optional<Lifetimes> rewritten_lt;
  if (plan && !plan->recomputes().empty()) {
    run.recomputed = static_cast<std::uint32_t>(plan->recomputes_size());
    run.recompute_us = RecomputeUs(s, *plan);
    auto rewritten = ApplyRecomputes(s, plan->recomputes());
    if (!rewritten.ok()) return rewritten.status();
    s = std::move(rewritten).value();
    plan->clear_recomputes();
    lt = &rewritten_lt.emplace(s);
  }
  if (plan) run.plan_actions = static_cast<std::size_t>(plan->actions_size());
  auto predicted = Replay(s, *lt, calibrated,
                          {.policy = p,
                           .hbm_budget = run.budget,
                           .plan = plan ? &*plan : nullptr,
                           .lower_bound = false});
  if (!predicted.ok()) return predicted.status();
  run.predicted = std::move(predicted).value();
  auto live = live::RunLive(**client, s, *lt,
                            {.policy = p,
                             .budget = budget,
                             .plan = plan ? &*plan : nullptr,
                             .iterations = f.iterations,
                             .verify_all = f.verify == "all",
                             .record_timeline = !f.trace_path.empty(),
                             .device = f.hbm_device >= 0 && kDeviceViews});
  if (!live.ok()) return live.status();
  run.live = std::move(live).value();
  run.ran = true;

  // What makes the live figures mean less than they say.
  const ReplayReport& r = run.live.r;
  if (run.live.wrong_bytes > 0 || run.live.get_errors > 0) {
    run.failed.push_back(std::to_string(run.live.wrong_bytes) + " gets returned wrong bytes and " +
                         std::to_string(run.live.get_errors) + " failed");
  }
  if (p != Policy::kNone && r.peak_hbm > budget) {
    run.failed.push_back(
        "hbm peaked at " + FormatBytes(r.peak_hbm) + ", over the budget of " + FormatBytes(budget) +
        (server == nullptr ? " (other clients of this server count in its tier's peak)" : ""));
  }
  if (r.time_us > 0 && run.live.overrun_us > kMaxOverrunShare * r.time_us) {
    char share[32];
    std::snprintf(share, sizeof(share), "%.0f%%", 100 * run.live.overrun_us / r.time_us);
    run.failed.push_back(
        "the job's own byte work (writing and checking its tensors) overran the steps' compute "
        "windows by " +
        std::to_string(static_cast<long long>(run.live.overrun_us / 1000)) + " ms, " + share +
        " of the iteration: the live time measures this host's memory copies, not the plan. " +
        (server != nullptr
             ? "Cap the links lower (--link-rate " +
                   std::to_string(AutoLinkRate(job, profile, 3 * f.iteration_ms)) + ")"
             : "Start tierpoold with --link-rate " +
                   std::to_string(AutoLinkRate(job, profile, f.iteration_ms)) +
                   ", or drop --socket") +
        ", so that compute is stretched further");
  }
  return run;
}

void PrintRun(const Job& job, const DeviceProfile& profile, const PolicyRun& run) {
  const ReplayReport& r = run.live.r;
  const ReplayReport& sim = run.predicted;
  std::printf(
      "%s, %s, budget %s, %s: live %.3f ms (stall %.3f ms), simulated %.3f ms (stall %.3f ms), "
      "error %+.1f%%; peak hbm %s (budget %s); h2d %s, d2h %s; wrong bytes %llu, failed gets "
      "%llu, uses outside hbm %llu, host work past compute %.1f ms, writes waiting for room %.1f "
      "ms\n",
      job.s.name().c_str(), r.policy.c_str(),
      run.budget == 0 ? "none" : FormatBytes(run.budget).c_str(), profile.name.c_str(),
      r.time_us / 1000, r.stall_us / 1000, sim.time_us / 1000, sim.stall_us / 1000,
      100 * Error(r.time_us, sim.time_us), FormatBytes(r.peak_hbm).c_str(),
      run.budget == 0 ? "none" : FormatBytes(run.budget).c_str(), FormatBytes(r.h2d_bytes).c_str(),
      FormatBytes(r.d2h_bytes).c_str(), static_cast<unsigned long long>(run.live.wrong_bytes),
      static_cast<unsigned long long>(run.live.get_errors),
      static_cast<unsigned long long>(run.live.not_in_hbm), run.live.overrun_us / 1000,
      run.live.room_wait_us / 1000);
  if (run.recomputed > 0) {
    std::printf(
        "recomputes: %u activations made again in backward instead of moved (%.3f ms of "
        "compute per iteration, in the step times above)\n",
        run.recomputed, run.recompute_us / 1000);
  }
  if (run.policy == Policy::kPlanned) {
    const live::LiveReport& l = run.live;
    std::printf(
        "actions: %zu in the plan for an iteration; %llu moved or freed a copy in the simulated "
        "iteration; %llu live (the executor skipped %llu: %llu already in place, %llu dead "
        "tensors' frees left to the job's delete, %llu absent; a plan's action that finds its "
        "work done is a no-op in both)\n",
        run.plan_actions, static_cast<unsigned long long>(sim.actions),
        static_cast<unsigned long long>(r.actions),
        static_cast<unsigned long long>(l.actions_skipped),
        static_cast<unsigned long long>(l.skipped_in_place),
        static_cast<unsigned long long>(l.skipped_dead),
        static_cast<unsigned long long>(l.skipped_absent));
    std::printf(
        "executor, in the measured iteration: hits %llu, late %llu, misses %llu, waited for "
        "room %llu\n",
        static_cast<unsigned long long>(l.hits), static_cast<unsigned long long>(l.late),
        static_cast<unsigned long long>(l.misses),
        static_cast<unsigned long long>(l.waited_for_room));
  }
  for (const auto& prob : r.problems) std::printf("  problem: %s\n", prob.c_str());
}

// none, reactive-lru and planned side by side, and what planning bought over reacting.
void PrintComparison(const Job& job, const DeviceProfile& profile,
                     const std::vector<PolicyRun>& runs) {
  std::printf("%s on %s, live against tierpoold (simulated in brackets):\n", job.s.name().c_str(),
              profile.name.c_str());
  std::printf("  %-13s %10s %20s %20s %10s %10s %10s\n", "policy", "budget", "time ms", "stall ms",
              "in", "out", "peak hbm");
  const PolicyRun* reactive = nullptr;
  const PolicyRun* planned = nullptr;
  for (const auto& run : runs) {
    const ReplayReport& r = run.live.r;
    char time[40], stall[40];
    std::snprintf(time, sizeof(time), "%.1f (%.1f)", r.time_us / 1000,
                  run.predicted.time_us / 1000);
    std::snprintf(stall, sizeof(stall), "%.1f (%.1f)", r.stall_us / 1000,
                  run.predicted.stall_us / 1000);
    std::printf("  %-13s %10s %20s %20s %10s %10s %10s\n", r.policy.c_str(),
                run.budget == 0 ? "-" : FormatBytes(run.budget).c_str(), time, stall,
                FormatBytes(r.h2d_bytes).c_str(), FormatBytes(r.d2h_bytes).c_str(),
                FormatBytes(r.peak_hbm).c_str());
    if (run.policy == Policy::kReactiveLru) reactive = &run;
    if (run.policy == Policy::kPlanned) planned = &run;
  }
  if (reactive != nullptr && planned != nullptr && runs.front().policy == Policy::kNone) {
    const double none_us = runs.front().live.r.time_us;
    std::printf(
        "  at %s, %.0f%% of the no-offload peak: planned took %+.1f%% over no offload, "
        "reactive-lru %+.1f%%; planned stalled %.1f ms where reactive-lru stalled %.1f ms\n",
        FormatBytes(planned->budget).c_str(),
        100.0 * static_cast<double>(planned->budget) / static_cast<double>(job.lt->peak_bytes()),
        100 * Error(planned->live.r.time_us, none_us),
        100 * Error(reactive->live.r.time_us, none_us), planned->live.r.stall_us / 1000,
        reactive->live.r.stall_us / 1000);
  }
}

json RunJson(const Job& job, const DeviceProfile& profile, const PolicyRun& run) {
  const ReplayReport& r = run.live.r;
  return {{"schedule", job.s.name()},
          {"device", profile.name},
          {"calibration",
           {{"h2d_gbps", run.cal.h2d_gbps},
            {"d2h_gbps", run.cal.d2h_gbps},
            {"move_latency_us", run.cal.latency_us},
            {"compute_stretch", run.stretch},
            {"link_rate", run.link_rate}}},
          {"live", ReportFields(r)},
          {"simulated", ReportFields(run.predicted)},
          {"error",
           {{"time", Error(r.time_us, run.predicted.time_us)},
            {"stall_us", r.stall_us - run.predicted.stall_us}}},
          {"checks",
           {{"wrong_bytes", run.live.wrong_bytes},
            {"failed_gets", run.live.get_errors},
            {"uses_outside_hbm", run.live.not_in_hbm},
            {"over_budget", run.policy != Policy::kNone && r.peak_hbm > run.budget},
            {"overrun_us", run.live.overrun_us},
            {"room_wait_us", run.live.room_wait_us},
            {"failed", run.failed}}},
          {"executor",
           {{"plan_actions", run.plan_actions},
            {"recomputed", run.recomputed},
            {"recompute_us", run.recompute_us},
            {"hits", run.live.hits},
            {"late", run.live.late},
            {"misses", run.live.misses},
            {"skipped", run.live.actions_skipped},
            {"skipped_in_place", run.live.skipped_in_place},
            {"skipped_dead", run.live.skipped_dead},
            {"skipped_absent", run.live.skipped_absent},
            {"waited_for_room", run.live.waited_for_room}}},
          {"problems", r.problems}};
}

}  // namespace

int main(int argc, char** argv) {
  Flags f;
  po::options_description opts(
      "tierpool replay SCHEDULE --live --device NAME --hbm BUDGET --policy P [options]");
  // clang-format off
  opts.add_options()
    ("help,h", "print this help")
    ("live", "replay against tierpoold (this command)")
    ("schedule", po::value(&f.schedule_path), "the schedule (.pb or .json)")
    ("device", po::value(&f.device)->default_value("h100"), "device profile: a name or a JSON file")
    ("hbm", po::value(&f.hbm), "hbm budget: a size, or a % of the no-offload peak")
    ("policy", po::value(&f.policy)->default_value("planned"), "none, reactive-lru or planned")
    ("compare", po::bool_switch(&f.compare),
     "run none, reactive-lru and planned, one after the other, and show them side by side")
    ("plan", po::value(&f.plan_file),
     "planned: play this plan (.pb or .json: `tierpool plan`'s, or a tierpool.torch.offload "
     "job's) instead of planning on the calibrated profile; its budget unless --hbm gives one")
    ("iterations", po::value(&f.iterations)->default_value(2),
     "iterations of a repeating schedule (the last is measured)")
    ("socket", po::value(&f.socket),
     "use this running tierpoold (its hbm tier must fit the run: checked first); default: start "
     "a private one sized for each policy's run")
    ("link-rate", po::value(&f.link_rate)->default_value("auto"),
     "private server: cap each tier link at this many bytes/s (0: no cap), so that host-side "
     "byte work fits in the stretched compute windows; auto: the rate at which an iteration "
     "takes about --iteration-ms")
    ("iteration-ms", po::value(&f.iteration_ms)->default_value(1500),
     "with --link-rate auto: the stretched iteration's length to aim for")
    ("verify", po::value(&f.verify)->default_value("all"),
     "all: every byte read back is compared; stamp: 64 bytes at each end")
    ("margin", po::value(&f.margin)->default_value(f.margin), "planner prefetch margin")
    ("recompute", po::value(&f.recompute_share),
     "plan with recomputes adding at most this share of the compute (0.05), as `tierpool plan "
     "--recompute` does")
    ("no-early-loads", po::bool_switch(&f.no_early_loads),
     "plan without the rounds the planner adds where its plan stalls (early loads, reload-aware "
     "evictions), as `tierpool plan --no-early-loads` does")
    ("hbm-device", po::value(&f.hbm_device)->default_value(-1),
     "private server: the CUDA device whose memory is its hbm tier (-1: the host stand-in); a "
     "build with CUDA also writes and reads the job's hbm tensors there in place")
    ("server-log-level", po::value(&f.server_log_level)->default_value("warn"),
     "private server: its --log-level (debug shows each planned move and each miss)")
    ("json", po::value(&f.json_path), "write the report (live, simulated, error) here")
    ("trace", po::value(&f.trace_path), "write a Chrome trace of the measured iteration here");
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
  if (vm.count("help") || f.schedule_path.empty()) {
    std::cout << opts << "\n";
    return vm.count("help") ? 0 : 2;
  }
  if (f.verify != "all" && f.verify != "stamp") {
    return Fail(Status::InvalidArgument("--verify is all or stamp"));
  }
  auto p = ParsePolicy(f.policy);
  if (!p.ok()) return Fail(p.status());
  if (f.compare && (!f.plan_file.empty() || !f.trace_path.empty())) {
    return Fail(Status::InvalidArgument("--compare runs every policy: without --plan or --trace"));
  }
  auto profile = LoadProfile(f.device);
  if (!profile.ok()) return Fail(profile.status());
  auto loaded = LoadSchedule(f.schedule_path);
  if (!loaded.ok()) return Fail(loaded.status());
  Job job;
  job.s = std::move(loaded).value();
  ApplyCostModel(*profile, &job.s);
  // The server hands out 4 KiB extents: plan and simulate in the sizes it accounts.
  for (auto& t : *job.s.mutable_tensors()) {
    t.set_size_bytes(AlignUp(std::max<std::uint64_t>(t.size_bytes(), 1), 4096));
    job.all_bytes += t.size_bytes();
    job.largest = std::max<std::uint64_t>(job.largest, t.size_bytes());
  }
  for (const auto& st : job.s.steps()) job.compute_us += st.compute_us();
  job.lt = std::make_unique<Lifetimes>(job.s);
  std::optional<schedule::Plan> plan;
  if (!f.plan_file.empty()) {
    if (*p != Policy::kPlanned) {
      return Fail(Status::InvalidArgument("--plan goes with --policy planned"));
    }
    auto read = LoadPlan(f.plan_file, job.s);
    if (!read.ok()) return Fail(read.status());
    plan = std::move(read).value();
  }
  std::uint64_t budget = job.lt->peak_bytes();
  if (*p != Policy::kNone || f.compare) {
    if (f.hbm.empty() && !plan) return Fail(Status::InvalidArgument("give --hbm BUDGET"));
    auto b = f.hbm.empty() ? Result<std::uint64_t>(plan->hbm_budget_bytes())
                           : ParseHbmBudget(f.hbm, job.lt->peak_bytes());
    if (!b.ok()) return Fail(b.status());
    budget = AlignUp(*b, 4096);
  }
  if (budget < job.lt->step_floor_bytes() && (*p != Policy::kNone || f.compare)) {
    return Fail(BelowStepFloor(budget, job.s, *job.lt));
  }

  std::vector<Policy> policies = {*p};
  if (f.compare) policies = {Policy::kNone, Policy::kReactiveLru, Policy::kPlanned};
  std::vector<PolicyRun> runs;
  bool refused = false;
  for (Policy each : policies) {
    auto run = RunPolicy(f, job, *profile, each, budget, plan);
    if (!run.ok()) return Fail(run.status());
    // Checks that failed come first: the figures after them mean less than they say.
    for (const auto& why : run->failed) {
      std::printf("CHECK FAILED (%s): %s\n", PolicyName(each).c_str(), why.c_str());
    }
    refused = refused || !run->ran;
    runs.push_back(std::move(run).value());
  }
  if (refused) {
    std::printf("not run: the server given by --socket cannot hold this run as it is\n");
    return 2;
  }
  if (f.compare) {
    PrintComparison(job, *profile, runs);
  } else {
    PrintRun(job, *profile, runs.front());
  }
  if (!f.json_path.empty()) {
    json j = RunJson(job, *profile, runs.front());
    if (f.compare) {
      j = {{"schedule", job.s.name()}, {"device", profile->name}, {"policies", json::array()}};
      for (const auto& run : runs) j["policies"].push_back(RunJson(job, *profile, run));
    }
    std::ofstream out(f.json_path);
    out << j.dump(2) << "\n";
    if (!out) return Fail(Status::IoError("cannot write " + f.json_path));
  }
  if (!f.trace_path.empty()) {
    std::ofstream out(f.trace_path);
    out << ChromeTraceJson(runs.front().live.r);
    if (!out) return Fail(Status::IoError("cannot write " + f.trace_path));
  }
  for (const auto& run : runs) {
    if (!run.failed.empty()) return 3;
  }
  return 0;
}
