// Replay: a discrete-event simulation of a schedule's compute and its transfers over the
// host<->hbm links (each direction one copy stream, running its transfers in issue order),
// under a policy:
//   none          everything stays in hbm: the baseline for peak and time
//   reactive-lru  swap on demand, least recently used out (what runtime offloaders do)
//   planned       follow a Plan from the planner
// It reports peak hbm, time, stall time, bytes per link and actions, and can record a timeline.
#pragma once

#include <string>
#include <vector>

#include "prefetch/device_profile.h"
#include "prefetch/schedule.h"

namespace tierpool::prefetch {

enum class Policy { kNone, kReactiveLru, kPlanned };
Result<Policy> ParsePolicy(const std::string& name);
std::string PolicyName(Policy p);

struct TimelineEvent {
  enum class Kind { kCompute, kStall, kH2D, kD2H, kHbmBytes, kHostBytes };
  Kind kind;
  double start_us;
  double dur_us;     // 0 for counters
  std::string name;  // step or tensor
  double value = 0;  // bytes, for counters
};

// One cause of a replay's stall: what it waited for (the timeline's stall names: a prefetch
// late, room, an eviction, a fetch on demand, the order of transfers), the tensor waited for
// where there is one, the step where it first stalled so, and the time in all.
struct StallCause {
  std::string why;
  std::string tensor;  // "" where the wait is for room, not one tensor
  std::string link;    // "host->hbm", "hbm->host", or "" where the wait is on neither alone
  std::uint64_t bytes = 0;
  std::uint32_t step = 0;
  std::string step_name;
  double us = 0;
};
inline constexpr std::size_t kStallCauses = 5;

struct ReplayReport {
  std::string policy;
  std::uint64_t budget = 0;  // 0: unlimited
  std::uint64_t peak_hbm = 0;
  double time_us = 0;  // the measured iteration
  double compute_us = 0;
  double stall_us = 0;
  double stall_lower_bound_us = 0;
  std::uint64_t h2d_bytes = 0;
  std::uint64_t d2h_bytes = 0;
  std::uint64_t actions = 0;  // transfers and frees issued
  // What the plan recomputes (recompute.h): tensors, their bytes, and the compute that adds to
  // the iteration (in compute_us and time_us already).
  std::uint32_t recomputed = 0;
  std::uint64_t recomputed_bytes = 0;
  double recompute_us = 0;
  // Invariant breaches (a correct plan has none): uses that found their tensor absent,
  // moments over the budget, actions on tensors that were dead or in the wrong place.
  std::uint64_t missing_at_use = 0;
  std::uint64_t budget_violations = 0;
  std::uint64_t bad_actions = 0;
  std::uint64_t breaches() const { return missing_at_use + budget_violations + bad_actions; }
  std::vector<std::string> problems;  // the first few, spelled out
  // The measured iteration's largest causes of stall (at most kStallCauses), largest first.
  std::vector<StallCause> stall_causes;
  // When each step's compute began, from the measured iteration's start: the clock the
  // planner re-plans on, stalls included.
  std::vector<double> compute_start_us;
  std::vector<TimelineEvent> timeline;
};

struct ReplayOptions {
  Policy policy = Policy::kNone;
  std::uint64_t hbm_budget = 0;          // required for reactive-lru and planned
  const schedule::Plan* plan = nullptr;  // required for planned
  bool record_timeline = false;
  bool lower_bound = true;        // compute stall_lower_bound_us (off in the planner's own replays)
  bool name_stall_causes = true;  // fill stall_causes (off in the planner's own replays)
};

// A lower bound on the stall any policy has under the budget, from the schedule alone. At a
// step p where the memory in use without offload exceeds the budget by E, E bytes of what p
// does not touch must be out of hbm while p runs. Whatever was last written this iteration
// (defined or updated) must have been copied out since, before p; and all of it must come back
// before its next use. Taking the tensors that make each side cheapest, the bytes one link must
// carry by a given moment, less the compute before that moment, is stall; the two sides fall
// before and after p, so they add up. The largest over the steps with the most excess.
double StallLowerBound(const Schedule& s, const Lifetimes& lt, const DeviceProfile& d,
                       std::uint64_t budget);

// Repeating schedules run two iterations (the first warms up) and report the second. A plan
// that recomputes is replayed on the schedule with its recomputes applied (recompute.h).

Result<ReplayReport> Replay(const Schedule& s, const Lifetimes& lt, const DeviceProfile& d,
                            const ReplayOptions& options);

}  // namespace tierpool::prefetch
