// The executor: carries out registered plans while their jobs run. A job registers its plan,
// schedule, the key of each tensor and an hbm budget, then reports progress (iteration, step).
// Each action is issued when its step (and delay_us) comes: prefetches with a deadline at the
// step that needs them, offloads as copy-outs unless a clean copy below makes them a free drop,
// frees as drops. A prefetch never takes the job's hbm use over its budget: without room it
// waits (ordered by the step that needs it) and goes when room frees. When a report skips
// steps, the actions of the skipped steps are issued at once, prefetches first, most urgent
// first; nothing is issued before its step, so a job that falls behind never gets prefetches
// early beyond what its budget holds.
//
// Bounds, so that one client cannot make the executor's work unbounded: a plan has at most a few
// actions per def, use and update of its schedule's tensors (ValidatePlan), a connection has at
// most kMaxJobsPerOwner plans, the server kMaxJobs, and a namespace one.
//
// Locking: one mutex guards the jobs (clang checks the executor's own fields and *Locked
// methods; a Job's fields are the same mutex's, unchecked). TierControl is called with it held only
// for calls that do not block (all of them); completions take it again from mover threads. Tick and
// Progress never block on I/O. PostProgress carries a small report out under the lock; on a
// server's I/O thread it never waits for it (common/no_wait_scope.h: a worker carries the report
// on), and a large report is queued under the reports' own lock (prefetch/progress_reports.h) for
// the timer thread.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "common/mutex.h"
#include "prefetch/progress_reports.h"
#include "prefetch/schedule.h"
#include "prefetch/tier_control.h"

namespace tierpool::prefetch {

struct JobSpec {
  std::string ns;
  std::string name;  // for stat; default: the schedule's name
  Schedule schedule;
  schedule::Plan plan;
  std::vector<std::string> keys;  // one per tensor; empty: the tensors' names
  std::uint64_t hbm_budget = 0;   // 0: the plan's
};

struct JobCounters {
  std::uint64_t hits = 0;  // uses that found their tensor in hbm
  std::uint64_t late = 0;  // uses that found it on its way in, and waited
  std::uint64_t late_wait_us = 0;
  std::uint64_t misses = 0;            // uses that found it below, not moving in
  std::uint64_t bytes_in = 0;          // prefetched into hbm
  std::uint64_t bytes_out = 0;         // copied out of hbm
  std::uint64_t issued = 0;            // actions started
  std::uint64_t dropped_clean = 0;     // offloads that were free drops of a clean copy
  std::uint64_t skipped = 0;           // nothing to do: the sum of the three reasons below
  std::uint64_t skipped_absent = 0;    // no such object (deleted already, or never stored)
  std::uint64_t skipped_in_place = 0;  // already where the action puts it (or on its way)
  std::uint64_t skipped_dead = 0;      // a FREE of a dead tensor's only copy: the job deletes it
  std::uint64_t cancelled = 0;         // dropped at unregistration or an iteration's end
  std::uint64_t waited_for_room = 0;   // prefetches held back by the budget
  std::uint64_t failed = 0;
  std::uint64_t budget_peak = 0;  // highest hbm bytes seen when issuing
  // Gauges of the iteration under way and of the last one: the job's highest use of hbm (its
  // namespace's copies and room on its way in, every allocation counted), and the most memory
  // the job said it held outside tierpool (ProgressReport.outside_bytes).
  std::uint64_t hbm_peak = 0;
  std::uint64_t outside_peak = 0;
  std::uint64_t last_hbm_peak = 0;
  std::uint64_t last_outside_peak = 0;
};

struct JobStatus {
  std::uint64_t id = 0;
  std::string ns;
  std::string name;
  std::uint64_t hbm_budget = 0;
  std::uint64_t iteration = 0;
  std::uint32_t step = 0;
  std::uint64_t pending = 0;  // prefetches waiting for room
  JobCounters counters;
};

enum class UseOutcome : std::uint8_t { kHit, kLate, kMiss };

class Executor {
 public:
  static constexpr std::size_t kMaxJobsPerOwner = 16;
  static constexpr std::size_t kMaxJobs = 256;
  static constexpr std::size_t kInlineActions = 512;

  // hbm_capacity: budgets above it are refused.
  Executor(TierControl* control, std::uint64_t hbm_capacity);
  ~Executor();
  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;

  // Starts / stops the timer thread that issues delayed actions (tests call Tick instead).
  void Start();
  void Stop();

  // Checks everything (schedule, plan against it, keys, budget) and registers the job for
  // `owner` (a connection). A namespace has at most one job.
  Result<std::uint64_t> Register(JobSpec spec, std::uint64_t owner);
  Status Unregister(std::uint64_t job_id, std::uint64_t owner);
  // The connection is gone: its plans go. Returns their (job id, namespace).
  std::vector<std::pair<std::uint64_t, std::string>> UnregisterOwner(std::uint64_t owner);
  bool HasJobs(std::uint64_t owner) const;
  // The job is about to start `step` of `iteration`; it held `outside_bytes` at most outside
  // tierpool since its last report (0: it does not say).
  Status Progress(std::uint64_t job_id, std::uint64_t owner, std::uint64_t iteration,
                  std::uint32_t step, std::uint64_t outside_bytes = 0);
  // The same for the transport's I/O thread, which must never carry out much: a report whose
  // steps hold at most kInlineActions actions, of a job with no report waiting, is carried out
  // at once (a job reporting each step keeps its order and timing; on an I/O thread that finds
  // the lock held, RefuseWait, and a worker calls again); any other is left to the
  // timer thread (Start), where a job's reports not yet carried out are replaced by its latest
  // (the largest outside_bytes kept). A report it cannot take (no such job, another's) is
  // refused at once.
  Status PostProgress(std::uint64_t job_id, std::uint64_t owner, std::uint64_t iteration,
                      std::uint32_t step, std::uint64_t outside_bytes = 0);
  // Carries out the posted reports now (the timer thread does; tests may).
  void DrainReports();
  std::uint64_t reports_coalesced() const { return reports_.coalesced(); }
  // Issues what is due (delayed actions, prefetches waiting for room). Called by the timer
  // thread, by completions, and by tests.
  void Tick();
  // A get of (ns, key) found it in hbm, on its way, or below; the store reports it.
  void NoteUse(const std::string& ns, const std::string& key, UseOutcome outcome,
               std::uint64_t wait_us);
  // True when (ns, key) is a tensor of a registered plan: its hbm placement is the plan's.
  bool Covers(const std::string& ns, const std::string& key) const;

  std::vector<JobStatus> Jobs() const;

 private:
  struct Job;
  struct Timed {
    std::uint64_t due_us = 0;
    std::uint64_t job = 0;
    std::uint32_t action = 0;
    bool operator>(const Timed& o) const { return due_us > o.due_us; }
  };

  // All require mu_.
  Status ProgressLocked(std::uint64_t job_id, std::uint64_t owner, std::uint64_t iteration,
                        std::uint32_t step, std::uint64_t outside_bytes) REQUIRES(mu_);
  // Whether a report of (iteration, step) would carry out at most `limit` actions.
  bool SmallAdvanceLocked(const Job& job, std::uint64_t iteration, std::uint32_t step,
                          std::size_t limit) const REQUIRES(mu_);
  void AdvanceLocked(Job& job, std::uint64_t iteration, std::uint32_t step) REQUIRES(mu_);
  void IssueLocked(Job& job, std::uint32_t action_index) REQUIRES(mu_);
  // action_step: the step the prefetch was planned at (a needed_by before it is in the next
  // iteration).
  void IssuePrefetchLocked(Job& job, std::uint32_t tensor, std::uint32_t action_step,
                           std::uint32_t needed_by) REQUIRES(mu_);
  void DrainWaitingLocked(Job& job) REQUIRES(mu_);
  enum class Skip : std::uint8_t { kAbsent, kInPlace, kDead };
  static void SkipLocked(Job& job, Skip why);
  // A tensor whose hbm copy waits for a reader to let go before its FREE: the copy is kept
  // (a prefetch with no transfer) and counted as issued. False for any other tensor.
  bool KeepLeavingLocked(Job& job, const std::string& key, const TensorPlacement& p) REQUIRES(mu_);
  // Hands one prefetch to the store and counts how that went.
  void StartPrefetchLocked(Job& job, const std::string& key, std::uint64_t deadline,
                           std::uint64_t bytes, std::uint64_t hbm_used) REQUIRES(mu_);
  std::uint64_t DeadlineLocked(const Job& job, std::uint32_t needed_by) const REQUIRES(mu_);
  void OnDone(std::uint64_t job_id, bool into_hbm, std::uint64_t bytes, Status s) EXCLUDES(mu_);
  void TimerLoop() EXCLUDES(mu_);

  TierControl* control_;
  const std::uint64_t hbm_capacity_;
  mutable Mutex mu_;
  std::map<std::uint64_t, std::unique_ptr<Job>> jobs_ GUARDED_BY(mu_);
  std::unordered_map<std::string, std::uint64_t> job_by_ns_ GUARDED_BY(mu_);
  std::vector<Timed> timed_ GUARDED_BY(mu_);  // a min-heap on due_us
  std::uint64_t next_job_ GUARDED_BY(mu_) = 1;
  ProgressReports reports_;
  std::condition_variable wake_;
  std::thread timer_;
  bool stopping_ GUARDED_BY(mu_) = false;
};

}  // namespace tierpool::prefetch
