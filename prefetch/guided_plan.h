// Planning with an offline optimum as a guide. The transfer LP (transfer_lp.h) is solved at the
// budget, and the planner is run again with the relaxation's residency (which share of each
// tensor the LP's optimum keeps in hbm at each boundary) deciding its eviction order; both
// plans are replayed and the one that stalls less is kept, so a guide never makes a plan worse.
// Costs the LP's solve (seconds on a 600-step training graph), so it is asked for
// (`--lp-guided`), not the default. Stateless; safe to call from several threads.
#pragma once

#include <optional>

#include "prefetch/planner.h"
#include "prefetch/simulator.h"
#include "prefetch/transfer_lp.h"

namespace tierpool::prefetch {

struct GuidedPlan {
  schedule::Plan plan;  // the faster of the two
  bool guided = false;  // the guided plan was kept
  ReplayReport plain_replay;
  std::optional<ReplayReport> guided_replay;  // absent when there was no guide to follow
  TransferLpBound lp;                         // the bound at this budget (its residency cleared)
  double plain_planning_ms = 0, guided_planning_ms = 0;  // the planner's own time, LP apart
};

// FAILED_PRECONDITION as BuildPlan when the budget is below what a step needs at once.
Result<GuidedPlan> BuildLpGuidedPlan(const Schedule& s, const Lifetimes& lt, const DeviceProfile& d,
                                     const PlannerConfig& config, const TransferLpOptions& lp = {});

}  // namespace tierpool::prefetch
