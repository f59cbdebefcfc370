// The offload planner: from a schedule, an hbm budget and the links' speed, a plan of when to
// offload, prefetch and free each tensor so that hbm stays within the budget and transfers hide
// behind compute where bandwidth allows.
//
// How: every use of a tensor gets a prefetch window, the latest stretch of steps whose
// estimated compute covers the tensor's transfer (with a margin). Walking the steps in order,
// when hbm would go over the budget the planner evicts the resident tensor whose next window
// is farthest away (Belady's rule, using lifetime knowledge), preferring one whose room is free
// in time, and places its copy-out on a calendar of the host-bound link, in the first idle gap
// after its last use. A tensor evicted before its window is prefetched when the window opens; a
// prefetch that does not fit waits a step. Reloads are then laid out back to back on the link
// and the plan made again; each candidate is replayed and the fastest kept. Where the plan still
// stalls, the rounds run again with loads issued ahead of their windows into free room and with
// evictions that keep reloads on time (plan_pass.h: EarlyLoads, PassOptions); with a recompute
// share, also for the schedule with some activations recomputed instead (recompute.h). Repeating
// schedules are planned over five iterations and the middle one is kept (plan_pass.h): the plan is
// for the steady state, and repeats every iteration. docs/schedules.md has the whole story.
#pragma once

#include "prefetch/device_profile.h"
#include "prefetch/residency_guide.h"
#include "prefetch/schedule.h"

namespace tierpool::prefetch {

struct PlannerConfig {
  std::uint64_t hbm_budget = 0;
  double prefetch_margin = 1.5;  // windows cover this many times the transfer's estimate
  // Replay each candidate plan and keep the fastest (off: keep the last candidate that fits).
  bool choose_by_replay = true;
  // When set: an offline optimum's residency (the transfer LP's, transfer_lp.h). Among the
  // eviction candidates the planner then prefers the tensors the guide has out of hbm.
  const ResidencyGuide* guide = nullptr;
  // Where the plan stalls, plan again with loads issued ahead of their windows into room that
  // is free and with reload-aware evictions (plan_pass.h: EarlyLoads, PassOptions), and keep
  // the fastest replay. Two to three times the planning time where it runs; off: the plans of
  // the planner before them.
  bool early_loads = true;
  // Where the plan still stalls, also plans with recomputes (recompute.h) adding at most this
  // share of the iteration's compute, and keeps the fastest replay, the recompute's time
  // included. 0: tensors are only kept or moved.
  double recompute_share = 0;
  Status validate() const;
};

// An hbm budget from the command line: a size ("12G") or a percentage of `peak` ("70%").
Result<std::uint64_t> ParseHbmBudget(const std::string& text, std::uint64_t peak);
// FAILED_PRECONDITION for a budget below the schedule's step floor (the most one step holds in
// hbm at once, Lifetimes::step_floor_bytes), naming the floor, its share of the no-offload
// peak and its step: no plan keeps such a budget.
Status BelowStepFloor(std::uint64_t budget, const Schedule& s, const Lifetimes& lt);

// FAILED_PRECONDITION when the budget is below what some step needs at once.
Result<schedule::Plan> BuildPlan(const Schedule& s, const Lifetimes& lt, const DeviceProfile& d,
                                 const PlannerConfig& config);

}  // namespace tierpool::prefetch
