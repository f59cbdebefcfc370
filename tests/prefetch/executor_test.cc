// The executor against a fake store with a controlled clock: actions at the right steps,
// the budget never exceeded, a job running ahead and falling behind, delayed actions, and the
// checks on what a job registers.
#include "prefetch/executor.h"

#include <gtest/gtest.h>

#include <atomic>
#include <map>

namespace tierpool::prefetch {
namespace {

// A store that records calls and keeps each tensor's placement; moves complete when the test
// says so.
class FakeControl final : public TierControl {
 public:
  struct Obj {
    std::uint64_t size = 0;
    bool in_hbm = false;
    bool moving_in = false;
    bool lower = true;
    bool leaving = false;  // in hbm, freed as its readers let go
    bool moving_out = false;
  };
  std::map<std::string, Obj> objs;
  std::vector<std::string> log;  // "P:key@deadline", "O:key", "D:key", "K:key" (kept)
  std::vector<std::pair<std::string, Done>> in_flight;
  std::uint64_t peak = 0;
  ManualClock clock_;

  TensorPlacement Placement(const std::string&, const std::string& key) override {
    auto it = objs.find(key);
    if (it == objs.end()) return {};
    return {true,
            it->second.in_hbm,
            it->second.moving_in,
            it->second.lower,
            it->second.size,
            it->second.leaving,
            it->second.moving_out};
  }
  std::uint64_t HbmBytes(const std::string&) override {
    std::uint64_t b = 0;
    for (auto& [k, o] : objs) b += (o.in_hbm || o.moving_in) ? o.size : 0;
    return b;
  }
  std::uint64_t HbmPeak(const std::string&) override { return std::max(peak, HbmBytes("")); }
  void ResetHbmPeak(const std::string&) override {
    peak = HbmBytes("");
    ++resets;
  }
  int resets = 0;
  Status Prefetch(const std::string&, const std::string& key, std::uint64_t deadline,
                  Done done) override {
    if (objs[key].in_hbm && objs[key].leaving) {
      log.push_back("K:" + key);
      objs[key].leaving = false;
      return Status::AlreadyExists("kept in hbm");
    }
    log.push_back("P:" + key + "@" + std::to_string(deadline - clock_.NowMicros()));
    objs[key].moving_in = true;
    peak = std::max(peak, HbmBytes(""));
    in_flight.emplace_back(key, std::move(done));
    return Status::Ok();
  }
  Status Offload(const std::string&, const std::string& key, Done done) override {
    log.push_back("O:" + key);
    objs[key].moving_out = true;
    in_flight.emplace_back("out:" + key, std::move(done));
    return Status::Ok();
  }
  Status Drop(const std::string&, const std::string& key) override {
    log.push_back("D:" + key);
    objs[key].in_hbm = false;
    return Status::Ok();
  }
  const Clock* clock() const override { return &clock_; }

  // Completes every move in flight (copy-outs free their hbm copy).
  void Land() {
    auto flights = std::move(in_flight);
    in_flight.clear();
    for (auto& [key, done] : flights) {
      if (key.rfind("out:", 0) == 0) {
        auto& o = objs[key.substr(4)];
        o.in_hbm = o.moving_out = false;
        o.lower = true;
      } else {
        objs[key].moving_in = false;
        objs[key].in_hbm = true;
      }
      done(Status::Ok());
    }
  }
};

// Six steps of 100 us; tensors a, b, c of 1000 bytes.
Schedule SixSteps() {
  Schedule s;
  s.set_format_version(1);
  s.set_name("six");
  for (int i = 0; i < 6; ++i) {
    auto* st = s.add_steps();
    st->set_name("s" + std::to_string(i));
    st->set_compute_us(100);
  }
  const char* names[] = {"a", "b", "c"};
  const int defs[] = {0, 1, -1};
  const std::vector<std::vector<std::uint32_t>> uses = {{2, 5}, {3, 4}, {1, 5}};
  for (int i = 0; i < 3; ++i) {
    auto* t = s.add_tensors();
    t->set_id(static_cast<std::uint32_t>(i));
    t->set_name(names[i]);
    t->set_size_bytes(1000);
    t->set_def_step(defs[i]);
    for (auto u : uses[static_cast<std::size_t>(i)]) t->add_use_steps(u);
  }
  return s;
}

schedule::Action Act(schedule::ActionKind k, std::uint32_t tensor, std::uint32_t step,
                     bool after = false, std::uint32_t needed_by = 0, double delay = 0) {
  schedule::Action a;
  a.set_kind(k);
  a.set_tensor(tensor);
  a.set_step(step);
  a.set_after(after);
  a.set_needed_by(needed_by);
  a.set_delay_us(delay);
  return a;
}

class ExecutorTest : public ::testing::Test {
 protected:
  std::uint64_t Register(std::vector<schedule::Action> actions, std::uint64_t budget) {
    JobSpec spec;
    spec.ns = "job";
    spec.schedule = SixSteps();
    for (auto& a : actions) *spec.plan.add_actions() = a;
    spec.hbm_budget = budget;
    auto id = exec_.Register(std::move(spec), kOwner);
    EXPECT_TRUE(id.ok()) << id.status().ToString();
    return id.ok() ? *id : 0;
  }
  static constexpr std::uint64_t kOwner = 9;
  FakeControl control_;
  Executor exec_{&control_, 1 << 20};
};

TEST_F(ExecutorTest, ActionsIssueAtTheirSteps) {
  control_.objs["a"] = {1000, true, false, false};
  control_.objs["c"] = {1000, false, false, true};
  std::uint64_t job =
      Register({Act(schedule::OFFLOAD, 0, 2, /*after=*/true),
                Act(schedule::PREFETCH, 0, 4, false, 5), Act(schedule::PREFETCH, 2, 0, false, 1)},
               10'000);
  ASSERT_TRUE(exec_.Progress(job, kOwner, 0, 0).ok());
  // c is prefetched as step 0 starts, needed 100 us later.
  EXPECT_EQ(control_.log, (std::vector<std::string>{"P:c@100"}));
  ASSERT_TRUE(exec_.Progress(job, kOwner, 0, 1).ok());
  ASSERT_TRUE(exec_.Progress(job, kOwner, 0, 2).ok());
  EXPECT_EQ(control_.log.size(), 1u);  // a's offload waits for step 2 to end
  ASSERT_TRUE(exec_.Progress(job, kOwner, 0, 3).ok());
  ASSERT_EQ(control_.log.size(), 2u);
  EXPECT_EQ(control_.log[1], "O:a");
  control_.Land();
  ASSERT_TRUE(exec_.Progress(job, kOwner, 0, 4).ok());
  ASSERT_EQ(control_.log.size(), 3u);
  EXPECT_EQ(control_.log[2], "P:a@100");
  auto jobs = exec_.Jobs();
  ASSERT_EQ(jobs.size(), 1u);
  EXPECT_EQ(jobs[0].counters.issued, 3u);
  EXPECT_EQ(jobs[0].counters.bytes_out, 1000u);
}

// #76 item 4: one connection registered 100k plans (+362 MB, a 130 MB /metrics), and a plan of a
// million duplicate actions was taken.
TEST_F(ExecutorTest, PlansAreBoundedPerConnectionInAllAndByTheirSchedule) {
  auto spec = [](const std::string& ns, int actions) {
    JobSpec s;
    s.ns = ns;
    s.schedule = SixSteps();
    for (int i = 0; i < actions; ++i)
      *s.plan.add_actions() = Act(schedule::PREFETCH, 0, 1, false, 2);
    s.hbm_budget = 10'000;
    return s;
  };
  // Three tensors with a def and two uses each (c has no def step but counts as one): 4 per
  // such event and 64 more.
  EXPECT_TRUE(exec_.Register(spec("fits", 4 * 9 + 64), kOwner).ok());
  auto too_many = exec_.Register(spec("dupes", 4 * 9 + 65), kOwner);
  EXPECT_EQ(too_many.status().code(), StatusCode::kInvalidArgument);
  for (std::size_t i = 1; i < Executor::kMaxJobsPerOwner; ++i) {
    ASSERT_TRUE(exec_.Register(spec("ns" + std::to_string(i), 1), kOwner).ok()) << i;
  }
  auto over = exec_.Register(spec("one-more", 1), kOwner);
  EXPECT_EQ(over.status().code(), StatusCode::kResourceExhausted) << over.status().ToString();
  EXPECT_TRUE(exec_.Register(spec("one-more", 1), kOwner + 1).ok());  // another connection
  std::uint64_t owner = 100;
  Status last;
  for (std::size_t n = exec_.Jobs().size(); n <= Executor::kMaxJobs; ++n) {
    auto id = exec_.Register(spec("many" + std::to_string(n), 1), owner + n / 8);
    if (!id.ok()) {
      last = id.status();
      break;
    }
  }
  EXPECT_EQ(last.code(), StatusCode::kResourceExhausted) << last.ToString();
  EXPECT_EQ(exec_.Jobs().size(), Executor::kMaxJobs);
}

// Reports posted from the I/O thread: a small one is carried out at once, in order; one whose
// steps hold more than kInlineActions actions is left to the timer thread, and replaced there by
// the job's next report until it is carried out; a job that goes takes its report with it.
TEST_F(ExecutorTest, PostedReportsAreCarriedOutAtOnceWhenSmallElseCoalesced) {
  JobSpec spec;
  spec.ns = "big";
  spec.schedule = SixSteps();
  for (int t = 3; t < 203; ++t) {  // 200 more tensors, each used at steps 1 to 5
    auto* x = spec.schedule.add_tensors();
    x->set_id(static_cast<std::uint32_t>(t));
    x->set_name("t" + std::to_string(t));
    x->set_size_bytes(10);
    x->set_def_step(-1);
    for (std::uint32_t u = 1; u < 6; ++u) x->add_use_steps(u);
  }
  for (std::uint32_t t = 3; t < 203; ++t) {
    for (int n = 0; n < 3; ++n) *spec.plan.add_actions() = Act(schedule::PREFETCH, t, 3, false, 4);
  }
  spec.hbm_budget = 100'000;
  auto job = exec_.Register(std::move(spec), kOwner);
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  ASSERT_TRUE(exec_.PostProgress(*job, kOwner, 0, 0).ok());
  ASSERT_TRUE(exec_.PostProgress(*job, kOwner, 0, 1, 100).ok());
  ASSERT_EQ(exec_.Jobs()[0].step, 1u);  // small: carried out at once
  // Step 3's 600 prefetches are more than a report may carry out on the I/O thread.
  for (std::uint32_t step = 4; step < 6; ++step) {
    ASSERT_TRUE(exec_.PostProgress(*job, kOwner, 0, step, 100 * step).ok());
  }
  EXPECT_EQ(exec_.PostProgress(*job, kOwner + 1, 0, 5).code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(exec_.PostProgress(*job + 1, kOwner, 0, 5).code(), StatusCode::kNotFound);
  EXPECT_EQ(exec_.Jobs()[0].step, 1u);
  EXPECT_EQ(exec_.Jobs()[0].counters.skipped, 0u);
  EXPECT_EQ(exec_.reports_coalesced(), 1u);
  exec_.DrainReports();
  auto jobs = exec_.Jobs();
  EXPECT_EQ(jobs[0].counters.skipped_absent, 600u);  // (the tensors are not stored)
  ASSERT_EQ(jobs.size(), 1u);
  EXPECT_EQ(jobs[0].step, 5u);
  EXPECT_EQ(jobs[0].counters.outside_peak, 500u);
  ASSERT_TRUE(exec_.PostProgress(*job, kOwner, 1, 4).ok());  // the next iteration's step 3
  ASSERT_TRUE(exec_.Unregister(*job, kOwner).ok());
  exec_.DrainReports();  // nothing left to carry out, and no job to carry it out for
  EXPECT_TRUE(exec_.Jobs().empty());
}

TEST_F(ExecutorTest, CleanCopiesAreDroppedNotCopiedOut) {
  control_.objs["a"] = {1000, true, false, /*lower=*/true};
  std::uint64_t job = Register({Act(schedule::OFFLOAD, 0, 0)}, 10'000);
  ASSERT_TRUE(exec_.Progress(job, kOwner, 0, 0).ok());
  EXPECT_EQ(control_.log, (std::vector<std::string>{"D:a"}));
  EXPECT_EQ(exec_.Jobs()[0].counters.dropped_clean, 1u);
}

TEST_F(ExecutorTest, ACopyLeavingAsItsReaderLetsGoIsKeptByAPrefetchAndNotFreedTwice) {
  // b's FREE met a reader's pin: it is in hbm, leaving when the reader lets go. The budget is
  // full with it counted; a prefetch of b keeps it (no transfer, no wait for room) and a second
  // FREE is not sent.
  control_.objs["a"] = {1000, true, false, true};
  control_.objs["b"] = {1000, true, false, true, /*leaving=*/true};
  std::uint64_t job = Register({Act(schedule::FREE, 1, 0), Act(schedule::PREFETCH, 1, 1, false, 3)},
                               /*budget=*/2000);
  ASSERT_TRUE(exec_.Progress(job, kOwner, 0, 0).ok());
  EXPECT_TRUE(control_.log.empty());
  ASSERT_TRUE(exec_.Progress(job, kOwner, 0, 1).ok());
  EXPECT_EQ(control_.log, (std::vector<std::string>{"K:b"}));
  EXPECT_FALSE(control_.objs["b"].leaving);
  const auto c = exec_.Jobs()[0].counters;
  EXPECT_EQ(c.skipped, 1u);
  EXPECT_EQ(c.issued, 1u);
  EXPECT_EQ(c.waited_for_room, 0u);
}

TEST_F(ExecutorTest, SkippedActionsSayWhy) {
  // b was never stored (absent), c is in hbm already (in place), and a, dead after step 5, has
  // its only copy in hbm (its FREE is the job's delete).
  control_.objs["a"] = {1000, true, false, /*lower=*/false};
  control_.objs["c"] = {1000, true, false, true};
  std::uint64_t job =
      Register({Act(schedule::PREFETCH, 1, 0, false, 3), Act(schedule::PREFETCH, 2, 0, false, 1),
                Act(schedule::FREE, 0, 5, /*after=*/true)},
               10'000);
  ASSERT_TRUE(exec_.Progress(job, kOwner, 0, 0).ok());
  // The next iteration: step 5's FREE, and step 0's prefetches again.
  ASSERT_TRUE(exec_.Progress(job, kOwner, 1, 0).ok());
  EXPECT_TRUE(control_.log.empty());
  const auto c = exec_.Jobs()[0].counters;
  EXPECT_EQ(c.skipped, 5u);
  EXPECT_EQ(c.skipped_absent, 2u);
  EXPECT_EQ(c.skipped_in_place, 2u);
  EXPECT_EQ(c.skipped_dead, 1u);
  EXPECT_EQ(c.issued, 0u);
}

TEST_F(ExecutorTest, AnOffloadOfATensorOnItsWayOutIsSkippedNotFailed) {
  // A periodic plan may offload a tensor after the last step and again as the next iteration
  // starts: both are issued at the same report, and the second finds the first's copy moving.
  control_.objs["a"] = {1000, true, false, /*lower=*/false};
  std::uint64_t job = Register(
      {Act(schedule::OFFLOAD, 0, 5, /*after=*/true), Act(schedule::OFFLOAD, 0, 0)}, 10'000);
  ASSERT_TRUE(exec_.Progress(job, kOwner, 0, 1).ok());  // step 0's offload
  control_.Land();
  control_.objs["a"] = {1000, true, false, /*lower=*/false};  // written again in hbm
  ASSERT_TRUE(exec_.Progress(job, kOwner, 0, 5).ok());
  ASSERT_TRUE(exec_.Progress(job, kOwner, 1, 0).ok());  // step 5's after, then step 0's
  EXPECT_EQ(control_.log, (std::vector<std::string>{"O:a", "O:a"}));
  const auto c = exec_.Jobs()[0].counters;
  EXPECT_EQ(c.issued, 2u);
  EXPECT_EQ(c.skipped_in_place, 1u);
  EXPECT_EQ(c.failed, 0u);
}

TEST_F(ExecutorTest, PeaksAreKeptPerIteration) {
  control_.objs["a"] = {1000, true, false, true};
  control_.objs["c"] = {1000, false, false, true};
  std::uint64_t job = Register({Act(schedule::PREFETCH, 2, 0, false, 1)}, 10'000);
  ASSERT_TRUE(exec_.Progress(job, kOwner, 0, 0, /*outside_bytes=*/500).ok());
  ASSERT_TRUE(exec_.Progress(job, kOwner, 0, 1, 700).ok());
  ASSERT_TRUE(exec_.Progress(job, kOwner, 0, 2, 300).ok());
  auto c = exec_.Jobs()[0].counters;
  EXPECT_EQ(c.hbm_peak, 2000u);  // a, and c on its way in
  EXPECT_EQ(c.outside_peak, 700u);
  control_.Land();
  ASSERT_TRUE(control_.Drop("", "c").ok());
  ASSERT_TRUE(exec_.Progress(job, kOwner, 1, 1, 100).ok());  // a new iteration
  c = exec_.Jobs()[0].counters;
  EXPECT_EQ(c.last_hbm_peak, 2000u);
  EXPECT_EQ(c.last_outside_peak, 700u);
  EXPECT_EQ(c.outside_peak, 100u);
  EXPECT_EQ(c.hbm_peak, 2000u);  // from a alone as it started, c's prefetch came again
  EXPECT_EQ(control_.resets, 2);
}

TEST_F(ExecutorTest, PrefetchesNeverExceedTheBudget) {
  control_.objs["a"] = {1000, true, false, false};
  control_.objs["b"] = {1000, false, false, true};
  control_.objs["c"] = {1000, false, false, true};
  // Budget 2000: a is in; b and c both want in at step 1; a leaves after step 1.
  std::uint64_t job =
      Register({Act(schedule::PREFETCH, 1, 1, false, 3), Act(schedule::PREFETCH, 2, 1, false, 5),
                Act(schedule::OFFLOAD, 0, 1, true)},
               2000);
  ASSERT_TRUE(exec_.Progress(job, kOwner, 0, 1).ok());
  EXPECT_EQ(control_.log, (std::vector<std::string>{"P:b@200"}));  // c waits: no room
  EXPECT_EQ(exec_.Jobs()[0].pending, 1u);
  control_.Land();
  ASSERT_TRUE(exec_.Progress(job, kOwner, 0, 2).ok());  // a's copy-out goes
  EXPECT_LE(control_.HbmBytes(""), 2000u);
  control_.Land();  // a is out: room for c
  ASSERT_EQ(control_.log.size(), 3u);
  EXPECT_EQ(control_.log[1], "O:a");
  EXPECT_EQ(control_.log[2].substr(0, 4), "P:c@");
  EXPECT_LE(control_.peak, 2000u);
  EXPECT_EQ(exec_.Jobs()[0].counters.waited_for_room, 1u);
  EXPECT_EQ(exec_.Jobs()[0].pending, 0u);
}

TEST_F(ExecutorTest, AJobRunningAheadGetsItsLatePrefetchesFirst) {
  control_.objs["a"] = {1000, true, false, false};
  control_.objs["b"] = {1000, false, false, true};
  control_.objs["c"] = {1000, false, false, true};
  std::uint64_t job =
      Register({Act(schedule::OFFLOAD, 0, 0), Act(schedule::PREFETCH, 2, 1, false, 5),
                Act(schedule::PREFETCH, 1, 2, false, 3)},
               10'000);
  ASSERT_TRUE(exec_.Progress(job, kOwner, 0, 0).ok());
  control_.Land();
  // The job reports step 3 next: steps 1 and 2 went by unseen. b (needed at 3) before c (5).
  ASSERT_TRUE(exec_.Progress(job, kOwner, 0, 3).ok());
  ASSERT_EQ(control_.log.size(), 3u);
  EXPECT_EQ(control_.log[1], "P:b@0");
  EXPECT_EQ(control_.log[2], "P:c@200");
}

// A clock that moves every time it is read: deadlines computed twice for the same action differ,
// which must not matter to the order actions are issued in (a sort whose comparator read the
// clock crashed tierpoold).
class TickingClock final : public Clock {
 public:
  // Irregular jumps, larger than the deadlines' differences.
  std::uint64_t NowMicros() const override {
    const std::uint64_t n = reads_.fetch_add(1);
    return now_.fetch_add((n * 2654435761u) % 97) + 1;
  }

 private:
  mutable std::atomic<std::uint64_t> now_{1'000'000};
  mutable std::atomic<std::uint64_t> reads_{0};
};

class TickingControl final : public TierControl {
 public:
  TensorPlacement Placement(const std::string&, const std::string& key) override {
    return {true, key == "a", false, true, 1000};
  }
  std::uint64_t HbmBytes(const std::string&) override { return 0; }
  std::uint64_t HbmPeak(const std::string&) override { return 0; }
  void ResetHbmPeak(const std::string&) override {}
  Status Prefetch(const std::string&, const std::string& key, std::uint64_t, Done) override {
    prefetched.push_back(key);
    return Status::Ok();
  }
  Status Offload(const std::string&, const std::string&, Done) override { return Status::Ok(); }
  Status Drop(const std::string&, const std::string&) override { return Status::Ok(); }
  const Clock* clock() const override { return &clock_; }
  std::vector<std::string> prefetched;

 private:
  TickingClock clock_;
};

TEST(ExecutorOrder, ManyLatePrefetchesOnAMovingClock) {
  TickingControl control;
  Executor exec(&control, 1ull << 40);
  JobSpec spec;
  spec.ns = "job";
  spec.schedule.set_format_version(1);
  spec.schedule.set_name("many");
  const int kSteps = 64, kTensors = 200;
  for (int i = 0; i < kSteps; ++i) {
    auto* st = spec.schedule.add_steps();
    st->set_name("s" + std::to_string(i));
    st->set_compute_us(1);
  }
  for (int t = 0; t < kTensors; ++t) {
    auto* x = spec.schedule.add_tensors();
    x->set_id(static_cast<std::uint32_t>(t));
    x->set_name("t" + std::to_string(t));
    x->set_size_bytes(1000);
    x->set_def_step(-1);
    const auto needed = static_cast<std::uint32_t>(2 + (t * 7) % 60);
    x->add_use_steps(needed);
    // Many prefetches at step 1 for steps 1 us apart, and offloads mixed in.
    *spec.plan.add_actions() =
        Act(schedule::PREFETCH, static_cast<std::uint32_t>(t), 1, false, needed);
    *spec.plan.add_actions() = Act(schedule::OFFLOAD, static_cast<std::uint32_t>(t), 1, true);
  }
  spec.hbm_budget = 1ull << 30;
  auto id = exec.Register(std::move(spec), 1);
  ASSERT_TRUE(id.ok()) << id.status().ToString();
  ASSERT_TRUE(exec.Progress(*id, 1, 0, 0).ok());
  ASSERT_TRUE(exec.Progress(*id, 1, 0, 2).ok());  // step 1 went by unseen
  ASSERT_EQ(control.prefetched.size(), static_cast<std::size_t>(kTensors));
  // Most urgent first: in the order of the steps that need them.
  auto needed = [](const std::string& key) { return 2 + (std::stoi(key.substr(1)) * 7) % 60; };
  for (std::size_t i = 1; i < control.prefetched.size(); ++i) {
    EXPECT_LE(needed(control.prefetched[i - 1]), needed(control.prefetched[i])) << i;
  }
}

TEST_F(ExecutorTest, AJobFallingBehindGetsNothingEarly) {
  control_.objs["c"] = {1000, false, false, true};
  std::uint64_t job = Register({Act(schedule::PREFETCH, 2, 4, false, 5)}, 10'000);
  ASSERT_TRUE(exec_.Progress(job, kOwner, 0, 0).ok());
  // The job is slow: three times the schedule's pace.
  for (std::uint32_t s = 1; s <= 3; ++s) {
    control_.clock_.Advance(300);
    ASSERT_TRUE(exec_.Progress(job, kOwner, 0, s).ok());
    exec_.Tick();
    EXPECT_TRUE(control_.log.empty()) << "issued before its step";
  }
  control_.clock_.Advance(300);
  ASSERT_TRUE(exec_.Progress(job, kOwner, 0, 4).ok());
  ASSERT_EQ(control_.log.size(), 1u);
  // Its deadline is paced by what the job showed: one step of 100 us took about 300 us.
  const std::uint64_t deadline = std::stoull(control_.log[0].substr(4));
  EXPECT_GT(deadline, 200u);
  EXPECT_LE(deadline, 300u);
}

TEST_F(ExecutorTest, DelayedActionsWaitForTheirMomentInTheStep) {
  control_.objs["b"] = {1000, false, false, true};
  std::uint64_t job = Register({Act(schedule::PREFETCH, 1, 2, false, 3, /*delay=*/40)}, 10'000);
  ASSERT_TRUE(exec_.Progress(job, kOwner, 0, 2).ok());
  EXPECT_TRUE(control_.log.empty());
  control_.clock_.Advance(39);
  exec_.Tick();
  EXPECT_TRUE(control_.log.empty());
  control_.clock_.Advance(1);
  exec_.Tick();
  EXPECT_EQ(control_.log.size(), 1u);
}

TEST_F(ExecutorTest, NextIterationIssuesWhatTheLastOneLeft) {
  control_.objs["a"] = {1000, true, false, false};
  control_.objs["c"] = {1000, false, false, true};
  std::uint64_t job = Register(
      {Act(schedule::OFFLOAD, 0, 5, true), Act(schedule::PREFETCH, 2, 5, false, 1)}, 10'000);
  ASSERT_TRUE(exec_.Progress(job, kOwner, 0, 4).ok());
  EXPECT_TRUE(control_.log.empty());
  ASSERT_TRUE(exec_.Progress(job, kOwner, 1, 0).ok());  // step 5 went by unseen
  ASSERT_EQ(control_.log.size(), 2u);
  EXPECT_EQ(control_.log[0].substr(0, 4), "P:c@");  // prefetch first
  EXPECT_EQ(control_.log[1], "O:a");
  EXPECT_FALSE(exec_.Progress(job, kOwner, 0, 3).ok());  // backwards
}

// A plan that recomputes runs on the schedule with its recomputes applied: the copy the trainer
// puts again has its tensor's key with "@recompute" added, and the plan's actions move it.
TEST_F(ExecutorTest, APlanThatRecomputesMovesTheCopyUnderItsOwnKey) {
  JobSpec spec;
  spec.ns = "job";
  spec.schedule = SixSteps();
  spec.schedule.mutable_tensors(0)->set_kind(schedule::SAVED_ACTIVATION);
  auto* r = spec.plan.add_recomputes();
  r->set_tensor(0);  // a: defined at 0, used at 2 and 5; made again at 3 for its use at 5
  r->set_at_step(3);
  *spec.plan.add_actions() = Act(schedule::OFFLOAD, 3, 3, true);  // the copy, tensor 3
  spec.keys = {"k/a", "k/b", "k/c"};
  spec.hbm_budget = 10'000;
  auto job = exec_.Register(std::move(spec), kOwner);
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  EXPECT_TRUE(exec_.Covers("job", "k/a@recompute"));
  control_.objs["k/a@recompute"] = {1000, true, false, false};
  ASSERT_TRUE(exec_.Progress(*job, kOwner, 0, 4).ok());
  ASSERT_EQ(control_.log.size(), 1u);
  EXPECT_EQ(control_.log[0], "O:k/a@recompute");
}

TEST_F(ExecutorTest, RegistrationChecksEverything) {
  auto bad = [&](std::function<void(JobSpec&)> edit) {
    JobSpec spec;
    spec.ns = "x";
    spec.schedule = SixSteps();
    spec.hbm_budget = 2000;  // the floor: step 1 defines b and reads c
    edit(spec);
    return exec_.Register(std::move(spec), kOwner).status();
  };
  // A budget below the floor would miss that step's uses every iteration: refused, the floor
  // and its step named.
  const Status below = bad([](JobSpec& s) { s.hbm_budget = 1999; });
  EXPECT_EQ(below.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(below.message().find("floor of 2.0 KiB"), std::string::npos) << below.message();
  EXPECT_NE(below.message().find("step 1 (s1)"), std::string::npos) << below.message();
  EXPECT_EQ(bad([](JobSpec& s) { *s.plan.add_actions() = Act(schedule::PREFETCH, 7, 0); }).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(bad([](JobSpec& s) { *s.plan.add_actions() = Act(schedule::OFFLOAD, 0, 6); }).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(bad([](JobSpec& s) {
              *s.plan.add_actions() = Act(schedule::PREFETCH, 0, 0, false, 9);
            }).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(bad([](JobSpec& s) { s.hbm_budget = 2 << 20; }).code(), StatusCode::kInvalidArgument);
  // A recompute that is not allowed (tensor a is no activation): refused, named.
  const Status recomputes = bad([](JobSpec& s) {
    auto* r = s.plan.add_recomputes();
    r->set_tensor(0);
    r->set_at_step(3);
    *s.plan.add_actions() = Act(schedule::FREE, 3, 2);
  });
  EXPECT_EQ(recomputes.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(recomputes.message().find("only activations"), std::string::npos)
      << recomputes.message();
  EXPECT_EQ(bad([](JobSpec& s) { s.keys = {"k1", "k2"}; }).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(bad([](JobSpec& s) { s.keys = {"k", "k", "z"}; }).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(bad([](JobSpec& s) { s.schedule.mutable_tensors(0)->set_def_step(40); }).code(),
            StatusCode::kInvalidArgument);
  EXPECT_TRUE(bad([](JobSpec&) {}).ok());
  // One plan per namespace; another connection cannot drive or drop it.
  EXPECT_EQ(bad([](JobSpec&) {}).code(), StatusCode::kAlreadyExists);
  auto jobs = exec_.Jobs();
  ASSERT_EQ(jobs.size(), 1u);
  EXPECT_EQ(exec_.Progress(jobs[0].id, kOwner + 1, 0, 0).code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(exec_.Unregister(jobs[0].id, kOwner + 1).code(), StatusCode::kPermissionDenied);
  EXPECT_TRUE(exec_.Covers("x", "a"));
  exec_.UnregisterOwner(kOwner);
  EXPECT_TRUE(exec_.Jobs().empty());
  EXPECT_FALSE(exec_.Covers("x", "a"));
}

}  // namespace
}  // namespace tierpool::prefetch
