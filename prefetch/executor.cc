#include "prefetch/executor.h"

#include <algorithm>
#include <chrono>
#include <unordered_set>

#include "common/logging.h"
#include "common/no_wait_scope.h"
#include "common/units.h"
#include "prefetch/planner.h"
#include "prefetch/recompute.h"

namespace tierpool::prefetch {

using schedule::Action;
using schedule::ActionKind;

struct Executor::Job {
  std::uint64_t id = 0;
  std::uint64_t owner = 0;
  std::string ns;
  std::string name;
  Schedule schedule;
  schedule::Plan plan;
  std::unique_ptr<Lifetimes> lt;
  std::vector<std::string> keys;
  std::unordered_map<std::string, std::uint32_t> tensor_of_key;
  std::uint64_t budget = 0;
  // Action indexes issued as each step starts (by delay) and as it ends.
  std::vector<std::vector<std::uint32_t>> before, after;
  std::vector<double> sched_start_us;  // schedule time at each step's start; back() = total
  // Progress: the steps whose before-actions ([0, next_before)) and after-actions
  // ([0, next_after)) were issued this iteration.
  bool started = false;
  std::uint64_t iteration = 0;
  std::uint32_t step = 0;
  std::uint32_t next_before = 0;
  std::uint32_t next_after = 0;
  // Wall time per schedule time, learned from the reports (1 until known).
  double pace = 1.0;
  std::uint64_t last_report_us = 0;
  double last_report_sched_us = 0;
  // Prefetches held back by the budget: by deadline, then tensor -> when its use comes
  // (iteration, step).
  std::map<std::pair<std::uint64_t, std::uint32_t>, std::pair<std::uint64_t, std::uint32_t>>
      waiting;
  std::unordered_set<std::uint32_t> waiting_tensors;
  JobCounters counters;
};

Executor::Executor(TierControl* control, std::uint64_t hbm_capacity)
    : control_(control), hbm_capacity_(hbm_capacity) {}

Executor::~Executor() { Stop(); }

void Executor::Start() {
  MutexLock lock(mu_);
  if (timer_.joinable()) return;
  stopping_ = false;
  timer_ = std::thread([this] { TimerLoop(); });
}

void Executor::Stop() {
  {
    MutexLock lock(mu_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (timer_.joinable()) timer_.join();
}

Result<std::uint64_t> Executor::Register(JobSpec spec, std::uint64_t owner) {
  TIERPOOL_RETURN_IF_ERROR(Validate(spec.schedule));
  const auto& s = spec.schedule;
  const auto steps = static_cast<std::uint32_t>(s.steps_size());
  const auto tensors = static_cast<std::uint32_t>(s.tensors_size());
  if (steps == 0) return Status::InvalidArgument("the schedule has no steps");
  if (!spec.keys.empty() && spec.keys.size() != tensors) {
    return Status::InvalidArgument("plan names " + std::to_string(spec.keys.size()) +
                                   " keys for a schedule of " + std::to_string(tensors) +
                                   " tensors");
  }
  if (spec.keys.empty()) {
    for (const auto& t : s.tensors()) spec.keys.push_back(t.name());
  }
  TIERPOOL_RETURN_IF_ERROR(ValidatePlan(spec.plan, s));
  // A plan that recomputes is for the schedule with its recomputes applied: the trainer makes
  // each copy again at its step and puts it under its tensor's key with "@recompute" added, and
  // the executor moves it like any other tensor the job puts.
  if (!spec.plan.recomputes().empty()) {
    auto rewritten = ApplyRecomputes(spec.schedule, spec.plan.recomputes());
    if (!rewritten.ok()) return rewritten.status();
    for (const auto& r : spec.plan.recomputes()) {
      spec.keys.push_back(spec.keys[r.tensor()] + "@recompute");
    }
    spec.schedule = std::move(rewritten).value();
  }
  const auto tensors_planned = static_cast<std::uint32_t>(spec.schedule.tensors_size());
  auto job = std::make_unique<Job>();
  for (std::uint32_t t = 0; t < tensors_planned; ++t) {
    if (spec.keys[t].empty()) {
      return Status::InvalidArgument("tensor " + std::to_string(t) + " has an empty key");
    }
    if (!job->tensor_of_key.emplace(spec.keys[t], t).second) {
      return Status::InvalidArgument("two tensors share the key " + spec.keys[t]);
    }
  }
  const std::uint64_t budget =
      spec.hbm_budget != 0 ? spec.hbm_budget : spec.plan.hbm_budget_bytes();
  if (budget == 0) return Status::InvalidArgument("the job has no hbm budget");
  if (budget > hbm_capacity_) {
    return Status::InvalidArgument("an hbm budget of " + FormatBytes(budget) +
                                   " is above the hbm tier's " + FormatBytes(hbm_capacity_) +
                                   ": start tierpoold with a larger --hbm, or ask for less");
  }
  auto lt = std::make_unique<Lifetimes>(spec.schedule);
  // A budget below what one step holds at once would miss that step's uses every iteration.
  if (Status floor = BelowStepFloor(budget, s, *lt); !floor.ok()) {
    return Status::InvalidArgument(floor.message());
  }
  job->before.resize(steps);
  job->after.resize(steps);
  for (int i = 0; i < spec.plan.actions_size(); ++i) {
    const Action& a = spec.plan.actions(i);
    (a.after() ? job->after : job->before)[a.step()].push_back(static_cast<std::uint32_t>(i));
  }
  for (auto& list : job->before) {
    std::stable_sort(list.begin(), list.end(), [&](auto x, auto y) {
      return spec.plan.actions(static_cast<int>(x)).delay_us() <
             spec.plan.actions(static_cast<int>(y)).delay_us();
    });
  }
  job->sched_start_us.resize(steps + 1, 0);
  for (std::uint32_t i = 0; i < steps; ++i) {
    job->sched_start_us[i + 1] =
        job->sched_start_us[i] + std::max(1.0, s.steps(static_cast<int>(i)).compute_us());
  }
  job->lt = std::move(lt);
  job->owner = owner;
  job->ns = std::move(spec.ns);
  job->name = spec.name.empty() ? s.name() : spec.name;
  job->schedule = std::move(spec.schedule);
  job->plan = std::move(spec.plan);
  job->keys = std::move(spec.keys);
  job->budget = budget;
  MutexLock lock(mu_);
  if (job_by_ns_.count(job->ns) != 0) {
    return Status::AlreadyExists("namespace " + job->ns + " already has a registered plan");
  }
  if (jobs_.size() >= kMaxJobs) {
    return Status::ResourceExhausted("the server runs " + std::to_string(jobs_.size()) +
                                     " plans, its limit");
  }
  if (std::count_if(jobs_.begin(), jobs_.end(), [owner](const auto& j) {
        return j.second->owner == owner;
      }) >= static_cast<std::ptrdiff_t>(kMaxJobsPerOwner)) {
    return Status::ResourceExhausted("this connection has " + std::to_string(kMaxJobsPerOwner) +
                                     " plans registered, the limit per connection");
  }
  job->id = next_job_++;
  const std::uint64_t id = job->id;
  job_by_ns_[job->ns] = id;
  jobs_.emplace(id, std::move(job));
  reports_.Allow(id, owner);
  return id;
}

Status Executor::Unregister(std::uint64_t job_id, std::uint64_t owner) {
  MutexLock lock(mu_);
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) return Status::NotFound("no job " + std::to_string(job_id));
  if (it->second->owner != owner) {
    return Status::PermissionDenied("job " + std::to_string(job_id) +
                                    " belongs to another connection");
  }
  job_by_ns_.erase(it->second->ns);
  jobs_.erase(it);
  reports_.Forget(job_id);
  return Status::Ok();
}

std::vector<std::pair<std::uint64_t, std::string>> Executor::UnregisterOwner(std::uint64_t owner) {
  MutexLock lock(mu_);
  std::vector<std::pair<std::uint64_t, std::string>> gone;
  for (auto it = jobs_.begin(); it != jobs_.end();) {
    if (it->second->owner == owner) {
      gone.emplace_back(it->first, it->second->ns);
      reports_.Forget(it->first);  // its reports not yet carried out go with it
      job_by_ns_.erase(it->second->ns);
      it = jobs_.erase(it);
    } else {
      ++it;
    }
  }
  return gone;
}

bool Executor::HasJobs(std::uint64_t owner) const {
  MutexLock lock(mu_);
  for (const auto& [id, job] : jobs_) {
    if (job->owner == owner) return true;
  }
  return false;
}

bool Executor::Covers(const std::string& ns, const std::string& key) const {
  MutexLock lock(mu_);
  auto it = job_by_ns_.find(ns);
  if (it == job_by_ns_.end()) return false;
  return jobs_.at(it->second)->tensor_of_key.count(key) != 0;
}

Status Executor::Progress(std::uint64_t job_id, std::uint64_t owner, std::uint64_t iteration,
                          std::uint32_t step, std::uint64_t outside_bytes) {
  MutexLock lock(mu_);
  return ProgressLocked(job_id, owner, iteration, step, outside_bytes);
}

Status Executor::ProgressLocked(std::uint64_t job_id, std::uint64_t owner, std::uint64_t iteration,
                                std::uint32_t step, std::uint64_t outside_bytes) {
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) return Status::NotFound("no job " + std::to_string(job_id));
  Job& job = *it->second;
  if (job.owner != owner) return Status::PermissionDenied("the job belongs to another connection");
  if (step >= job.before.size()) {
    return Status::InvalidArgument("step " + std::to_string(step) + " is beyond the schedule's " +
                                   std::to_string(job.before.size()));
  }
  if (job.started &&
      (iteration < job.iteration || (iteration == job.iteration && step < job.step))) {
    return Status::InvalidArgument("progress went backwards");
  }
  if (!job.started || iteration > job.iteration) {  // the peaks start again with the iteration
    job.counters.last_hbm_peak = job.started ? control_->HbmPeak(job.ns) : 0;
    job.counters.last_outside_peak = job.counters.outside_peak;
    job.counters.outside_peak = 0;
    control_->ResetHbmPeak(job.ns);
  }
  job.counters.outside_peak = std::max(job.counters.outside_peak, outside_bytes);
  AdvanceLocked(job, iteration, step);
  wake_.notify_all();
  return Status::Ok();
}

bool Executor::SmallAdvanceLocked(const Job& job, std::uint64_t iteration, std::uint32_t step,
                                  std::size_t limit) const {
  const auto steps = static_cast<std::uint32_t>(job.before.size());
  if (step >= steps) return true;  // refused at once
  std::size_t n = 0;
  for (const Timed& t : timed_) n += t.job == job.id ? 1 : 0;
  auto add = [&](const std::vector<std::vector<std::uint32_t>>& lists, std::uint32_t from,
                 std::uint32_t to) {
    for (std::uint32_t s = from; s < to && n <= limit; ++s) n += lists[s].size();
  };
  if (!job.started) {
    n += static_cast<std::size_t>(job.plan.resident_at_start_size());
    add(job.before, 0, step + 1);
    add(job.after, 0, step);
  } else if (iteration > job.iteration) {
    add(job.before, job.next_before, steps);  // the rest of the iteration under way
    add(job.after, job.next_after, steps);
    add(job.before, 0, step + 1);
    add(job.after, 0, step);
  } else {
    add(job.before, job.next_before, step + 1);
    add(job.after, job.next_after, step);
  }
  return n <= limit;
}

Status Executor::PostProgress(std::uint64_t job_id, std::uint64_t owner, std::uint64_t iteration,
                              std::uint32_t step, std::uint64_t outside_bytes) {
  // Small, and nothing of the job waiting: at once, in order, as the job's next requests
  // (deletes, puts on other connections) expect. An I/O thread never waits for the lock (the
  // timer thread may hold it for a large report): it gives the report to a worker, and the
  // job's connection waits for it there, in order, while the thread serves everyone else.
  if (!reports_.Pending(job_id)) {
    if (ThisThreadMayWait()) {
      mu_.lock();
    } else if (!mu_.try_lock()) {
      RefuseWait();
      return Status::Ok();
    }
    MutexLock lock(mu_, std::adopt_lock);
    auto it = jobs_.find(job_id);
    if (it != jobs_.end() && it->second->owner == owner &&
        SmallAdvanceLocked(*it->second, iteration, step, kInlineActions)) {
      return ProgressLocked(job_id, owner, iteration, step, outside_bytes);
    }
  }
  auto first = reports_.Post({job_id, owner, iteration, step, outside_bytes});
  if (!first.ok()) return first.status();
  if (*first) wake_.notify_all();
  return Status::Ok();
}

void Executor::DrainReports() {
  for (const ProgressReports::Report& r : reports_.Take()) {
    Status s = Progress(r.job, r.owner, r.iteration, r.step, r.outside_bytes);
    if (!s.ok()) spdlog::debug("job {}: progress: {}", r.job, s.ToString());
  }
}

std::uint64_t Executor::DeadlineLocked(const Job& job, std::uint32_t needed_by) const {
  const double total = job.sched_start_us.back();
  double ahead = job.sched_start_us[needed_by] - job.sched_start_us[job.step];
  if (ahead < 0) ahead += total;  // needed in the next iteration
  // Measured from the last report, not from the clock now: the same action always gets the
  // same deadline within a report, whatever order it is looked at in.
  return job.last_report_us + static_cast<std::uint64_t>(ahead * job.pace);
}

void Executor::AdvanceLocked(Job& job, std::uint64_t iteration, std::uint32_t step) {
  const std::uint64_t now = control_->clock()->NowMicros();
  const auto steps = static_cast<std::uint32_t>(job.before.size());
  const double total = job.sched_start_us.back();
  // Learn the pace: wall time per schedule time between two reports.
  const double sched_now = static_cast<double>(iteration) * total + job.sched_start_us[step];
  if (job.started && sched_now > job.last_report_sched_us && now > job.last_report_us) {
    const double ratio =
        static_cast<double>(now - job.last_report_us) / (sched_now - job.last_report_sched_us);
    job.pace = std::clamp(0.7 * job.pace + 0.3 * ratio, 0.01, 100.0);
  }
  job.last_report_us = now;
  job.last_report_sched_us = sched_now;

  std::vector<std::uint32_t> due;  // actions whose moment has passed
  // Delayed actions of earlier steps still in the timer are overdue: they go now.
  if (job.started) {
    std::vector<Timed> keep;
    for (const Timed& t : timed_) {
      if (t.job == job.id) {
        due.push_back(t.action);
      } else {
        keep.push_back(t);
      }
    }
    if (keep.size() != timed_.size()) {
      timed_ = std::move(keep);
      std::make_heap(timed_.begin(), timed_.end(), std::greater<>());
    }
  }
  auto collect_rest_of_iteration = [&] {
    for (std::uint32_t s = job.next_before; s < steps; ++s) {
      due.insert(due.end(), job.before[s].begin(), job.before[s].end());
    }
    for (std::uint32_t s = job.next_after; s < steps; ++s) {
      due.insert(due.end(), job.after[s].begin(), job.after[s].end());
    }
  };
  if (!job.started) {
    job.started = true;
    job.iteration = iteration;
    // What the plan wants in hbm as the first iteration starts.
    for (auto t : job.plan.resident_at_start()) {
      auto uses = job.lt->uses(t);
      IssuePrefetchLocked(job, t, 0, uses.empty() ? 0 : uses.front());
    }
  } else if (iteration > job.iteration) {
    collect_rest_of_iteration();  // what the old iteration had left is due now
    job.iteration = iteration;
    job.next_before = 0;
    job.next_after = 0;
  }
  job.step = step;
  for (std::uint32_t s = job.next_before; s < step; ++s) {
    due.insert(due.end(), job.before[s].begin(), job.before[s].end());
  }
  for (std::uint32_t s = job.next_after; s < step; ++s) {
    due.insert(due.end(), job.after[s].begin(), job.after[s].end());
  }
  job.next_after = std::max(job.next_after, step);
  // Steps skipped over: late prefetches first, most urgent first, then the rest in plan order.
  // Each key is computed once: a comparator that read the clock would not be a strict weak
  // order, and std::stable_sort with one is undefined behaviour (it crashed tierpoold).
  std::vector<std::pair<std::pair<int, std::uint64_t>, std::uint32_t>> keyed;
  keyed.reserve(due.size());
  for (auto index : due) {
    const Action& a = job.plan.actions(static_cast<int>(index));
    const bool prefetch = a.kind() == schedule::PREFETCH;
    keyed.push_back({{prefetch ? 0 : 1, prefetch ? DeadlineLocked(job, a.needed_by()) : 0}, index});
  }
  std::stable_sort(keyed.begin(), keyed.end(),
                   [](const auto& x, const auto& y) { return x.first < y.first; });
  for (const auto& [key, index] : keyed) IssueLocked(job, index);
  // This step's own before-actions: now, or delay_us into it (paced), by the timer.
  if (job.next_before <= step) {
    for (auto a : job.before[step]) {
      const double delay = job.plan.actions(static_cast<int>(a)).delay_us();
      if (delay <= 0) {
        IssueLocked(job, a);
      } else {
        timed_.push_back({now + static_cast<std::uint64_t>(delay * job.pace), job.id, a});
        std::push_heap(timed_.begin(), timed_.end(), std::greater<>());
      }
    }
    job.next_before = step + 1;
  }
  DrainWaitingLocked(job);
}

void Executor::IssueLocked(Job& job, std::uint32_t index) {
  const Action& a = job.plan.actions(static_cast<int>(index));
  const std::uint32_t t = a.tensor();
  const std::string& key = job.keys[t];
  spdlog::debug("job {} iteration {} step {}: {} {} (planned at step {}{})", job.name,
                job.iteration, job.step, schedule::ActionKind_Name(a.kind()), key, a.step(),
                a.after() ? " after" : "");
  if (a.kind() == schedule::PREFETCH) {
    IssuePrefetchLocked(job, t, a.step(), a.needed_by());
    return;
  }
  TensorPlacement p = control_->Placement(job.ns, key);
  if (!p.exists || !p.in_hbm || p.leaving_hbm || p.moving_out_of_hbm) {
    spdlog::debug("job {}: skipped: {} is {}", job.name, key,
                  !p.exists  ? "absent"
                  : p.in_hbm ? "leaving hbm already"
                             : "not in hbm");
    SkipLocked(job, p.exists ? Skip::kInPlace : Skip::kAbsent);
    return;
  }
  if (p.has_lower_copy) {
    // A clean copy below: leaving hbm costs no transfer.
    if (Status s = control_->Drop(job.ns, key); s.ok()) {
      ++job.counters.issued;
      ++job.counters.dropped_clean;
    } else {
      spdlog::debug("job {}: dropping {} failed: {}", job.name, key, s.ToString());
      ++job.counters.failed;
    }
    return;
  }
  if (a.kind() == schedule::FREE) {
    // A FREE of the only copy: a dead tensor is the job's to delete; a live one goes out.
    const std::uint32_t next = job.lt->NextUse(t, a.step() + (a.after() ? 1 : 0));
    if (next == kNoUse && !job.lt->persistent(t)) {
      SkipLocked(job, Skip::kDead);
      return;
    }
  }
  const std::uint64_t id = job.id, bytes = p.size;
  Status s = control_->Offload(
      job.ns, key, [this, id, bytes](Status st) { OnDone(id, false, bytes, std::move(st)); });
  if (s.ok()) {
    ++job.counters.issued;
  } else if (s.code() == StatusCode::kAlreadyExists) {
    ++job.counters.issued;  // left hbm at once: a clean copy was below after all
    ++job.counters.dropped_clean;
  } else {
    spdlog::debug("job {}: offloading {} failed: {}", job.name, key, s.ToString());
    ++job.counters.failed;
  }
}

void Executor::SkipLocked(Job& job, Skip why) {
  ++job.counters.skipped;
  switch (why) {
    case Skip::kAbsent:
      ++job.counters.skipped_absent;
      break;
    case Skip::kInPlace:
      ++job.counters.skipped_in_place;
      break;
    case Skip::kDead:
      ++job.counters.skipped_dead;
      break;
  }
}

void Executor::IssuePrefetchLocked(Job& job, std::uint32_t t, std::uint32_t action_step,
                                   std::uint32_t needed_by) {
  const std::string& key = job.keys[t];
  TensorPlacement p = control_->Placement(job.ns, key);
  if (KeepLeavingLocked(job, key, p)) return;
  if (!p.exists || p.in_hbm || p.moving_to_hbm) {
    spdlog::debug("job {}: prefetch skipped: {} is {}", job.name, key,
                  !p.exists  ? "absent"
                  : p.in_hbm ? "in hbm"
                             : "on its way");
    SkipLocked(job, p.exists ? Skip::kInPlace : Skip::kAbsent);
    return;
  }
  const std::uint64_t deadline = DeadlineLocked(job, needed_by);
  const std::uint64_t used = control_->HbmBytes(job.ns);
  if (used + p.size > job.budget || !job.waiting.empty()) {
    // No room within the budget (or others are already waiting for it): wait, as in replay.
    if (job.waiting_tensors.insert(t).second) {
      const std::uint64_t use_iteration = job.iteration + (needed_by < action_step ? 1 : 0);
      job.waiting.emplace(std::make_pair(deadline, t), std::make_pair(use_iteration, needed_by));
      ++job.counters.waited_for_room;
    }
    return;
  }
  StartPrefetchLocked(job, key, deadline, p.size, used);
}

bool Executor::KeepLeavingLocked(Job& job, const std::string& key, const TensorPlacement& p) {
  if (!p.exists || !p.leaving_hbm) return false;
  // Its FREE is still waiting for a reader to let go: keeping it costs no transfer and no
  // budget (its bytes never left).
  (void)control_->Prefetch(job.ns, key, 0, nullptr);
  ++job.counters.issued;
  return true;
}

void Executor::StartPrefetchLocked(Job& job, const std::string& key, std::uint64_t deadline,
                                   std::uint64_t bytes, std::uint64_t hbm_used) {
  const std::uint64_t id = job.id;
  Status s = control_->Prefetch(job.ns, key, deadline, [this, id, bytes](Status st) {
    OnDone(id, true, bytes, std::move(st));
  });
  if (s.ok() || s.code() == StatusCode::kAlreadyExists) {  // started, or done at once
    ++job.counters.issued;
    job.counters.budget_peak = std::max(job.counters.budget_peak, hbm_used + bytes);
  } else {
    spdlog::debug("job {}: prefetching {} failed: {}", job.name, key, s.ToString());
    ++job.counters.failed;
  }
}

void Executor::DrainWaitingLocked(Job& job) {
  // A prefetch whose use has come and gone is pointless now: the get brought it up itself.
  for (auto it = job.waiting.begin(); it != job.waiting.end();) {
    if (it->second < std::make_pair(job.iteration, job.step)) {
      job.waiting_tensors.erase(it->first.second);
      it = job.waiting.erase(it);
      ++job.counters.cancelled;
    } else {
      ++it;
    }
  }
  while (!job.waiting.empty()) {
    auto it = job.waiting.begin();
    const std::uint32_t t = it->first.second;
    const std::string& key = job.keys[t];
    TensorPlacement p = control_->Placement(job.ns, key);
    if (KeepLeavingLocked(job, key, p)) {
      // kept in hbm: nothing to move
    } else if (!p.exists || p.in_hbm || p.moving_to_hbm) {
      SkipLocked(job, p.exists ? Skip::kInPlace : Skip::kAbsent);
    } else {
      const std::uint64_t used = control_->HbmBytes(job.ns);
      if (used + p.size > job.budget) return;  // the most urgent waits for room; so do the rest
      StartPrefetchLocked(job, key, it->first.first, p.size, used);
    }
    job.waiting_tensors.erase(t);
    job.waiting.erase(it);
  }
}

void Executor::OnDone(std::uint64_t job_id, bool into_hbm, std::uint64_t bytes, Status s) {
  MutexLock lock(mu_);
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) return;
  Job& job = *it->second;
  if (!s.ok()) {
    ++job.counters.failed;
    spdlog::debug("job {}: a planned move failed: {}", job.name, s.ToString());
  } else {
    (into_hbm ? job.counters.bytes_in : job.counters.bytes_out) += bytes;
  }
  if (!into_hbm) DrainWaitingLocked(job);  // room freed
}

void Executor::Tick() {
  MutexLock lock(mu_);
  const std::uint64_t now = control_->clock()->NowMicros();
  while (!timed_.empty() && timed_.front().due_us <= now) {
    std::pop_heap(timed_.begin(), timed_.end(), std::greater<>());
    Timed t = timed_.back();
    timed_.pop_back();
    auto it = jobs_.find(t.job);
    if (it == jobs_.end()) continue;
    IssueLocked(*it->second, t.action);
  }
  for (auto& [id, job] : jobs_) DrainWaitingLocked(*job);
}

void Executor::NoteUse(const std::string& ns, const std::string& key, UseOutcome outcome,
                       std::uint64_t wait_us) {
  MutexLock lock(mu_);
  auto it = job_by_ns_.find(ns);
  if (it == job_by_ns_.end()) return;
  Job& job = *jobs_.at(it->second);
  if (job.tensor_of_key.count(key) == 0) return;
  switch (outcome) {
    case UseOutcome::kHit:
      ++job.counters.hits;
      break;
    case UseOutcome::kLate:
      ++job.counters.late;
      job.counters.late_wait_us += wait_us;
      break;
    case UseOutcome::kMiss:
      ++job.counters.misses;
      break;
  }
}

std::vector<JobStatus> Executor::Jobs() const {
  MutexLock lock(mu_);
  std::vector<JobStatus> out;
  for (const auto& [id, job] : jobs_) {
    out.push_back({id, job->ns, job->name, job->budget, job->iteration, job->step,
                   job->waiting.size(), job->counters});
    out.back().counters.hbm_peak = control_->HbmPeak(job->ns);
  }
  return out;
}

void Executor::TimerLoop() {
  UniqueMutexLock lock(mu_);
  while (!stopping_) {
    if (timed_.empty()) {
      wake_.wait_for(lock.native(), std::chrono::milliseconds(50));
    } else {
      const std::uint64_t now = control_->clock()->NowMicros();
      const std::uint64_t due = timed_.front().due_us;
      if (due > now) wake_.wait_for(lock.native(), std::chrono::microseconds(due - now));
    }
    if (stopping_) return;
    lock.Unlock();
    DrainReports();
    Tick();
    lock.Lock();
  }
}

}  // namespace tierpool::prefetch
