// Plans against a real tierpoold: registration checks, the executor moving tensors as a job
// reports progress, a FREE that overtakes the release of the view it frees, a disconnect
// dropping the plan; and `tierpool replay --live` of a small
// training schedule under all three policies, every byte read back compared.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "prefetch/planner.h"
#include "tests/e2e/server_process.h"

namespace tierpool::testing {
namespace {

using prefetch::Schedule;

// A training-like schedule: `layers` forward steps saving activations, backward steps using
// them in reverse, an optimizer step updating weights and states.
Schedule SmallTraining(int layers, std::uint64_t act, std::uint64_t weight) {
  Schedule s;
  s.set_format_version(1);
  s.set_name("small-training");
  s.set_repeats(true);
  auto step = [&](const std::string& name, double us) {
    auto* st = s.add_steps();
    st->set_name(name);
    st->set_compute_us(us);
    return static_cast<std::uint32_t>(s.steps_size() - 1);
  };
  std::vector<std::uint32_t> fw, bw;
  for (int i = 0; i < layers; ++i) fw.push_back(step("fwd" + std::to_string(i), 40));
  for (int i = 0; i < layers; ++i) bw.push_back(step("bwd" + std::to_string(i), 80));
  const std::uint32_t opt = step("optim", 30);
  auto tensor = [&](const std::string& name, std::uint64_t size, tierpool::schedule::TensorKind k,
                    int def, std::vector<std::uint32_t> uses, bool updated) {
    auto* t = s.add_tensors();
    t->set_id(static_cast<std::uint32_t>(s.tensors_size() - 1));
    t->set_name(name);
    t->set_size_bytes(size);
    t->set_kind(k);
    t->set_def_step(def);
    std::sort(uses.begin(), uses.end());
    for (auto u : uses) t->add_use_steps(u);
    if (updated) t->add_update_steps(opt);
  };
  for (int i = 0; i < layers; ++i) {
    const std::uint32_t back = bw[static_cast<std::size_t>(layers - 1 - i)];
    tensor("w" + std::to_string(i), weight, tierpool::schedule::WEIGHT, -1,
           {fw[static_cast<std::size_t>(i)], back, opt}, true);
    tensor("m" + std::to_string(i), 2 * weight, tierpool::schedule::OPTIMIZER_STATE, -1, {opt},
           true);
    std::vector<std::uint32_t> act_uses = {back};
    if (i + 1 < layers) act_uses.push_back(fw[static_cast<std::size_t>(i + 1)]);
    tensor("act" + std::to_string(i), act, tierpool::schedule::SAVED_ACTIVATION,
           static_cast<int>(fw[static_cast<std::size_t>(i)]), act_uses, false);
    tensor("grad" + std::to_string(i), weight, tierpool::schedule::GRADIENT, static_cast<int>(back),
           {opt}, false);
  }
  return s;
}

TEST(Plans, RegistrationIsChecked) {
  ServerProcess server({"--dram", "64M", "--hbm", "16M"});
  ASSERT_TRUE(server.started());
  auto client = server.Connect();
  ASSERT_TRUE(client.ok());
  Schedule s = SmallTraining(2, 1 << 20, 256 << 10);
  PlanRegistration reg;
  reg.schedule = s.SerializeAsString();
  tierpool::schedule::Plan plan;
  auto* a = plan.add_actions();
  a->set_kind(tierpool::schedule::PREFETCH);
  a->set_tensor(99);  // no such tensor
  reg.plan = plan.SerializeAsString();
  reg.hbm_budget_bytes = 8 << 20;
  auto bad = (*client)->RegisterPlan(reg);
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("tensor 99"), std::string::npos) << bad.status().message();
  a->set_tensor(0);
  a->set_step(500);  // no such step
  reg.plan = plan.SerializeAsString();
  EXPECT_EQ((*client)->RegisterPlan(reg).status().code(), StatusCode::kInvalidArgument);
  a->set_step(0);
  reg.plan = plan.SerializeAsString();
  reg.hbm_budget_bytes = 1ull << 30;  // above the hbm tier
  EXPECT_EQ((*client)->RegisterPlan(reg).status().code(), StatusCode::kInvalidArgument);
  reg.hbm_budget_bytes = 8 << 20;
  reg.schedule = "not a schedule";
  EXPECT_EQ((*client)->RegisterPlan(reg).status().code(), StatusCode::kInvalidArgument);
  reg.schedule = s.SerializeAsString();
  auto good = (*client)->RegisterPlan(reg);
  ASSERT_TRUE(good.ok()) << good.status().ToString();
  // One plan per namespace.
  EXPECT_EQ((*client)->RegisterPlan(reg).status().code(), StatusCode::kAlreadyExists);
  EXPECT_TRUE(good->ReportProgress(0, 0).ok());
  auto st = (*client)->ServerStat();
  ASSERT_TRUE(st.ok());
  ASSERT_EQ(st->jobs.size(), 1u);
  EXPECT_EQ(st->jobs[0].name, "small-training");
  // A handle that goes away (as when the job dies) takes its plan with it.
  *good = PlanHandle();
  EXPECT_TRUE(server.WaitFor([](const ServerStats& now) { return now.jobs.empty(); }));
}

// #76 item 4: a plan of a million duplicate actions was accepted, and each 20-byte progress
// report then carried the whole plan out again on the I/O thread (70 ms): a second of reports
// kept other clients' gets at 62-109 ms p50 for minutes. Now a plan is bounded by its schedule,
// and reports are carried out on the executor's thread, the latest of a job's only.
TEST(Plans, AFloodOfProgressReportsStarvesNoOne) {
  ServerProcess server({"--dram", "64M", "--hbm", "16M"});
  ASSERT_TRUE(server.started());
  auto flooder = server.Connect();
  auto other = server.Connect();
  ASSERT_TRUE(flooder.ok() && other.ok());
  const Schedule small = SmallTraining(2, 1 << 20, 256 << 10);
  tierpool::schedule::Plan dupes;
  for (int i = 0; i < 200'000; ++i) {
    auto* a = dupes.add_actions();
    a->set_kind(tierpool::schedule::PREFETCH);
    a->set_tensor(0);
    a->set_step(0);
    a->set_needed_by(1);
  }
  PlanRegistration reg{"dupes", small.SerializeAsString(), dupes.SerializeAsString(), {}, 8 << 20};
  auto refused = (*flooder)->RegisterPlan(reg);
  EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("more than four per def, use and update"),
            std::string::npos)
      << refused.status().ToString();
  // A plan as large as its schedule allows: 2,000 layers, four actions per def, use and update,
  // every one of them carried out (on absent tensors) as each report starts a new iteration.
  const Schedule big = SmallTraining(2000, 4096, 512);
  tierpool::schedule::Plan full;
  for (const auto& t : big.tensors()) {
    for (int n = 0; n < 4 * (1 + t.use_steps_size() + t.update_steps_size()); ++n) {
      auto* a = full.add_actions();
      a->set_kind(tierpool::schedule::PREFETCH);
      a->set_tensor(t.id());
      a->set_step(t.use_steps(0) == 0 ? 0 : t.use_steps(0) - 1);
      a->set_needed_by(t.use_steps(0));
    }
  }
  reg = PlanRegistration{"full", big.SerializeAsString(), full.SerializeAsString(), {}, 8 << 20};
  ClientOptions elsewhere = server.options();
  elsewhere.ns = "flood";
  auto job_client = Client::Connect(elsewhere);
  ASSERT_TRUE(job_client.ok());
  auto job = (*job_client)->RegisterPlan(reg);
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  const std::string data = Pattern(4, 4096);
  ASSERT_TRUE((*other)->Put("k", data.data(), data.size()).ok());
  std::thread flood([&] {
    for (std::uint64_t i = 0; i < 3000; ++i) (void)job->ReportProgress(i, 0);
  });
  std::vector<double> waits_ms;
  std::string buf(4096, '\0');
  // Gets from the moment the flood starts, for as long as its reports may keep the server busy.
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (waits_ms.size() < 100 && std::chrono::steady_clock::now() < until) {
    const auto start = std::chrono::steady_clock::now();
    ASSERT_TRUE((*other)->Get("k", buf.data(), buf.size()).ok());
    waits_ms.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
            .count());
  }
  flood.join();
  ASSERT_FALSE(waits_ms.empty());
  std::sort(waits_ms.begin(), waits_ms.end());
  // Not a speed target but a starvation check: before, the median get waited 7 ms behind a
  // report (here; 62-109 ms in the larger plan), after it takes microseconds.
  EXPECT_LT(waits_ms[waits_ms.size() / 2], 2.0)
      << waits_ms.size() << " gets during the flood, the slowest " << waits_ms.back() << " ms";
  // Every report was taken (the last one carried out), most of them replaced unseen by a later
  // one: the work was that of the iterations carried out, not of the reports sent.
  EXPECT_TRUE(server.WaitFor(
      [](const ServerStats& now) {
        for (const auto& j : now.jobs) {
          if (j.name == "full") return j.iteration == 2999;
        }
        return false;
      },
      30000));
  auto st = (*other)->ServerStat();
  ASSERT_TRUE(st.ok());
  EXPECT_GT(st->counter("progress_reports_coalesced"), 1000u);
}

TEST(Plans, TheExecutorMovesTensorsAsTheJobProgresses) {
  ServerProcess server({"--dram", "64M", "--hbm", "16M"});
  ASSERT_TRUE(server.started());
  auto client = server.Connect();
  ASSERT_TRUE(client.ok());
  Schedule s = SmallTraining(2, 1 << 20, 256 << 10);
  // By hand: offload w0 after step 0, bring it back as step 2 starts for step 3.
  tierpool::schedule::Plan plan;
  auto* off = plan.add_actions();
  off->set_kind(tierpool::schedule::OFFLOAD);
  off->set_tensor(0);
  off->set_step(0);
  off->set_after(true);
  auto* pre = plan.add_actions();
  pre->set_kind(tierpool::schedule::PREFETCH);
  pre->set_tensor(0);
  pre->set_step(2);
  pre->set_needed_by(3);
  std::string w0 = Pattern(3, 256 << 10);
  PutOptions in_hbm;
  in_hbm.tier = TierKind::kHbm;
  ASSERT_TRUE((*client)->Put("w0", w0.data(), w0.size(), in_hbm).ok());
  PlanRegistration reg{"by-hand", s.SerializeAsString(), plan.SerializeAsString(), {}, 8 << 20};
  auto job = (*client)->RegisterPlan(reg);
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  ASSERT_TRUE(job->ReportProgress(0, 0).ok());
  ASSERT_TRUE(job->ReportProgress(0, 1).ok());  // w0 leaves hbm after step 0
  ASSERT_TRUE(server.WaitFor([&](const ServerStats&) {
    auto m = (*client)->Stat("w0");
    return m.ok() && m->tier == TierKind::kDram;
  }));
  ASSERT_TRUE(job->ReportProgress(0, 2).ok());  // and comes back for step 3
  // The executor acts on a report on its own thread: a read sent at once can overtake the
  // prefetch (a miss; 9 runs in 40 did here). A job reads a tensor a step's compute later.
  ASSERT_TRUE(server.WaitFor([](const ServerStats& now) {
    return now.jobs.size() == 1 && now.jobs[0].counter("actions_issued") >= 2;
  }));
  GetViewOptions want;
  want.tier = TierKind::kHbm;
  auto view = (*client)->GetView("w0", want);
  ASSERT_TRUE(view.ok()) << view.status().ToString();
  EXPECT_EQ(view->meta().tier, TierKind::kHbm);
  EXPECT_TRUE(view->Verify().ok());
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(view->data()), view->size()), w0);
  view->Release();
  auto st = (*client)->ServerStat();
  ASSERT_TRUE(st.ok());
  ASSERT_EQ(st->jobs.size(), 1u);
  const JobInfo& j = st->jobs[0];
  EXPECT_EQ(j.counter("actions_issued"), 2u);
  EXPECT_EQ(j.counter("bytes_out"), 256u << 10);
  EXPECT_EQ(j.counter("hits") + j.counter("late"), 1u);
  EXPECT_EQ(j.counter("misses"), 0u);
}

// A job's view of a tensor is released on one connection and its progress reported on another,
// so the FREE after the tensor's last use can reach the server before the release does. The
// copy goes when the release comes, and the job's next put gets its room within the budget.
// Before, the FREE was refused (the copy was pinned) and lost: the put went to dram, and a live
// ResNet-18 replay read it back at the link's speed, one run in four (+62% on 2026-11-23).
TEST(Plans, AFreeThatOvertakesTheReleaseOfItsViewStillFreesTheCopy) {
  ServerProcess server({"--dram", "64M", "--hbm", "16M"});
  ASSERT_TRUE(server.started());
  auto client = server.Connect();
  ASSERT_TRUE(client.ok());
  // Step 0 reads w0, step 1 makes act0: the budget holds either, not both (a schedule's floor
  // is what one step holds at once: 256 KiB).
  Schedule s;
  s.set_format_version(1);
  s.set_name("race");
  s.set_repeats(true);
  for (const char* name : {"read-w0", "make-act0"}) {
    auto* st = s.add_steps();
    st->set_name(name);
    st->set_compute_us(100);
  }
  for (int i = 0; i < 2; ++i) {
    auto* t = s.add_tensors();
    t->set_id(static_cast<std::uint32_t>(i));
    t->set_name(i == 0 ? "w0" : "act0");
    t->set_size_bytes(256 << 10);
    t->set_def_step(i == 0 ? -1 : 1);
    if (i == 0) t->add_use_steps(0);
  }
  tierpool::schedule::Plan plan;  // w0 goes after step 0, its last use as far as the plan says
  auto* free = plan.add_actions();
  free->set_kind(tierpool::schedule::FREE);
  free->set_tensor(0);
  free->set_step(0);
  free->set_after(true);
  std::string w0 = Pattern(5, 256 << 10);
  ASSERT_TRUE((*client)->Put("w0", w0.data(), w0.size()).ok());
  ASSERT_TRUE((*client)->Promote("w0", TierKind::kHbm).ok());  // a clean copy stays in dram
  // The budget holds w0 or the next activation, not both.
  PlanRegistration reg{"race", s.SerializeAsString(), plan.SerializeAsString(), {}, 384 << 10};
  auto job = (*client)->RegisterPlan(reg);
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  ASSERT_TRUE(job->ReportProgress(0, 0).ok());
  GetViewOptions want;
  want.tier = TierKind::kHbm;
  auto view = (*client)->GetView("w0", want);  // step 0 reads w0
  ASSERT_TRUE(view.ok()) << view.status().ToString();
  ASSERT_EQ(view->meta().tier, TierKind::kHbm);
  ASSERT_TRUE(job->ReportProgress(0, 1).ok());  // the FREE, ahead of the view's release
  ASSERT_TRUE(server.WaitFor(
      [](const ServerStats& now) { return now.jobs.size() == 1 && now.jobs[0].step == 1; }));
  view->Release();
  std::string act = Pattern(6, 256 << 10);
  PutOptions in_hbm;
  in_hbm.tier = TierKind::kHbm;
  ASSERT_TRUE((*client)->Put("act0", act.data(), act.size(), in_hbm).ok());
  EXPECT_EQ((*client)->Stat("act0")->tier, TierKind::kHbm);
  EXPECT_EQ((*client)->Stat("w0")->tier, TierKind::kDram);
  auto st = (*client)->ServerStat();
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(st->counter("drops_after_unpin"), 1u);
  ASSERT_EQ(st->jobs.size(), 1u);
  EXPECT_EQ(st->jobs[0].counter("failed"), 0u);
  EXPECT_EQ(st->jobs[0].counter("dropped_clean"), 1u);
}

// A parameter as a test or file name: every character but letters and digits as '_'.
std::string AsName(std::string s) {
  for (auto& c : s) {
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  }
  return s;
}

// SmallTraining(4, act, weight) in a file of the running test's own: ctest runs these tests as
// separate processes at once, and one that rewrote a file another read from failed that one
// ("schedule format version 0", in a clean clone's CI run).
std::string WriteSmallTraining(std::uint64_t act, std::uint64_t weight) {
  const auto* test = ::testing::UnitTest::GetInstance()->current_test_info();
  const std::string schedule = ::testing::TempDir() + "/small-training-" +
                               AsName(std::string(test->test_suite_name()) + "." + test->name()) +
                               "-" + std::to_string(act) + "-" + std::to_string(weight) + ".pb";
  std::ofstream f(schedule, std::ios::binary);
  EXPECT_TRUE(SmallTraining(4, act, weight).SerializeToOstream(&f));
  return schedule;
}

// A live replay's report says no get returned wrong bytes or failed and hbm kept the budget.
void ExpectLiveChecksClean(const nlohmann::json& j, const std::string& out) {
  EXPECT_EQ(j["checks"]["wrong_bytes"], 0) << out;
  EXPECT_EQ(j["checks"]["failed_gets"], 0) << out;
  EXPECT_EQ(j["checks"]["over_budget"], false) << out;
}

class LiveReplay : public ::testing::TestWithParam<const char*> {};

TEST_P(LiveReplay, SmallScheduleEveryByteChecked) {
  const std::string dir = ::testing::TempDir();
  const std::string schedule = WriteSmallTraining(2 << 20, 512 << 10);
  // A policy and the options after it ("planned --no-early-loads": the planner without its
  // added rounds, an option of the live replay's own).
  const std::string policy = GetParam();
  const std::string report = dir + "/live-" + AsName(policy) + ".json";
  int rc = 0;
  std::string out = RunShell(std::string(TIERPOOL_CLI_PATH) + " replay " + schedule +
                                 " --live --device h100 --hbm 60% --policy " + policy +
                                 " --verify all --iterations 2 --link-rate 100M --json " + report,
                             &rc);
  ASSERT_EQ(rc, 0) << out;
  std::ifstream f(report);
  auto j = nlohmann::json::parse(f);
  ExpectLiveChecksClean(j, out);
  EXPECT_GT(j["live"]["time_us"].get<double>(), 0);
  EXPECT_GT(j["simulated"]["time_us"].get<double>(), 0);
  EXPECT_GT(j["calibration"]["h2d_gbps"].get<double>(), 0);
  if (policy == "none") {
    EXPECT_EQ(j["live"]["h2d_bytes"], 0) << out;
  } else {
    EXPECT_GT(j["live"]["h2d_bytes"].get<std::uint64_t>(), 0u) << out;
    EXPECT_LE(j["live"]["peak_hbm_bytes"].get<std::uint64_t>(),
              j["live"]["budget_bytes"].get<std::uint64_t>())
        << out;
  }
  if (policy.starts_with("planned")) {
    EXPECT_GT(j["executor"]["hits"].get<std::uint64_t>(), 0u) << out;
  }
}

// A plan that recomputes an activation (made by `tierpool plan --recompute` on the profile's
// clock) runs live: the copy is put when its step ends, every byte checked, within the budget,
// and the activation's round trip is off the link (2 MiB less each way than the same budget's
// plan that moves it, on this schedule).
TEST(LiveReplayChecks, APlanThatRecomputesRunsLiveEveryByteChecked) {
  const std::string dir = ::testing::TempDir();
  const std::string schedule = WriteSmallTraining(2 << 20, 512 << 10);
  const std::string cli = TIERPOOL_CLI_PATH;
  int rc = 0;
  std::string out = RunShell(cli + " plan " + schedule + " --device h100 --hbm 65% " +
                                 "--recompute 0.5 -o " + dir + "/recompute-plan.pb",
                             &rc);
  ASSERT_EQ(rc, 0) << out;
  ASSERT_NE(out.find("recomputes 1 activations (2.0 MiB)"), std::string::npos) << out;
  const std::string report = dir + "/live-recompute.json";
  out = RunShell(cli + " replay " + schedule + " --live --device h100 --policy planned --plan " +
                     dir + "/recompute-plan.pb --verify all --iterations 2 --link-rate 100M " +
                     "--json " + report,
                 &rc);
  ASSERT_EQ(rc, 0) << out;
  std::ifstream f(report);
  auto j = nlohmann::json::parse(f);
  EXPECT_EQ(j["executor"]["recomputed"], 1) << out;
  EXPECT_GT(j["executor"]["recompute_us"].get<double>(), 0) << out;
  ExpectLiveChecksClean(j, out);
  EXPECT_EQ(j["checks"]["uses_outside_hbm"], 0) << out;
  EXPECT_LE(j["live"]["h2d_bytes"].get<std::uint64_t>(), 4u << 20) << out;
}

TEST(LiveReplayChecks, AServerThatCannotHoldTheRunIsRefusedFirstWithWhatToChange) {
  ServerProcess server({"--dram", "256M", "--hbm", "64M"});
  ASSERT_TRUE(server.started());
  const std::string schedule = WriteSmallTraining(2 << 20, 512 << 10);
  int rc = 0;
  // reactive-lru swaps when the tier is full: a tier larger than the budget makes it
  // meaningless, and the server's own watermark moves would be counted as the policy's.
  std::string out = RunShell(std::string(TIERPOOL_CLI_PATH) + " replay " + schedule +
                                 " --live --device h100 --hbm 60% --policy reactive-lru --socket " +
                                 server.socket(),
                             &rc);
  EXPECT_EQ(rc, 2) << out;
  EXPECT_EQ(
      out.rfind("CHECK FAILED (reactive-lru): reactive-lru: the server's hbm tier is 64.0 MiB", 0),
      0u)
      << out;
  EXPECT_NE(out.find("Start tierpoold with --hbm "), std::string::npos) << out;
  EXPECT_NE(out.find("--hbm-high-watermark 1"), std::string::npos) << out;
  EXPECT_NE(out.find("not run"), std::string::npos) << out;
  // A tier too small for the budget and its largest tensor.
  out = RunShell(std::string(TIERPOOL_CLI_PATH) + " replay " + schedule +
                     " --live --device h100 --hbm 80M --policy planned --socket " + server.socket(),
                 &rc);
  EXPECT_EQ(rc, 2) << out;
  EXPECT_NE(out.find("the server's hbm tier is 64.0 MiB, less than the"), std::string::npos) << out;
}

TEST(LiveReplayChecks, HostWorkPastTheComputeWindowsIsSaidFirst) {
  // Links uncapped: compute is stretched little, and writing and checking 8 MiB tensors takes
  // longer than the steps' windows. The figures then measure this host's copies.
  ServerProcess server({"--dram", "512M", "--hbm", "256M"});
  ASSERT_TRUE(server.started());
  const std::string schedule = WriteSmallTraining(8 << 20, 2 << 20);
  int rc = 0;
  std::string out =
      RunShell(std::string(TIERPOOL_CLI_PATH) + " replay " + schedule +
                   " --live --device h100 --hbm 60% --policy planned --socket " + server.socket(),
               &rc);
  EXPECT_EQ(rc, 3) << out;
  // Before the figures it makes doubtful (only the calibration's progress line comes first).
  const auto check = out.find("CHECK FAILED (planned): the job's own byte work");
  ASSERT_NE(check, std::string::npos) << out;
  EXPECT_LT(check, out.find("small-training, planned, budget")) << out;
  EXPECT_NE(out.find("Start tierpoold with --link-rate "), std::string::npos) << out;
  EXPECT_NE(out.find("host work past compute"), std::string::npos) << out;
}

TEST(LiveReplayChecks, CompareRunsEveryPolicySideBySide) {
  const std::string schedule = WriteSmallTraining(2 << 20, 512 << 10);
  const std::string report = ::testing::TempDir() + "/compare.json";
  int rc = 0;
  std::string out =
      RunShell(std::string(TIERPOOL_CLI_PATH) + " replay " + schedule +
                   " --live --device h100 --hbm 60% --compare --link-rate 100M --json " + report,
               &rc);
  ASSERT_EQ(rc, 0) << out;
  for (const char* row : {"  none ", "  reactive-lru ", "  planned "}) {
    EXPECT_NE(out.find(row), std::string::npos) << out;
  }
  EXPECT_NE(out.find("planned took"), std::string::npos) << out;
  std::ifstream f(report);
  auto j = nlohmann::json::parse(f);
  ASSERT_EQ(j["policies"].size(), 3u);
  EXPECT_EQ(j["policies"][0]["live"]["policy"], "none");
  EXPECT_EQ(j["policies"][1]["live"]["policy"], "reactive-lru");
  EXPECT_EQ(j["policies"][2]["live"]["policy"], "planned");
  for (const auto& p : j["policies"]) {
    EXPECT_EQ(p["checks"]["wrong_bytes"], 0);
    EXPECT_TRUE(p["checks"]["failed"].empty()) << p["checks"];
  }
}

INSTANTIATE_TEST_SUITE_P(Policies, LiveReplay,
                         ::testing::Values("none", "reactive-lru", "planned",
                                           "planned --no-early-loads"),
                         [](const auto& param_info) { return AsName(param_info.param); });

}  // namespace
}  // namespace tierpool::testing
