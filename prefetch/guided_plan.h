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

// The LP at one budget and the plan it guides.
struct LpGuidance {
  TransferLpBound lp;                  // the bound (its residency cleared)
  std::optional<schedule::Plan> plan;  // the guided plan, where one was made
  std::optional<ReplayReport> replay;  // ...and its replay
  double planning_ms = 0;              // the guided planner's own time, the LP's solve apart
};

// Solves the LP at config's budget and, where the plain plan's replay (`plain`; null when the
// planner found the budget infeasible) stalls and the LP gives a guide, plans again with it.
Result<LpGuidance> GuideByLp(const Schedule& s, const Lifetimes& lt, const DeviceProfile& d,
                             const PlannerConfig& config, const TransferLpOptions& lp,
                             const ReplayReport* plain);

struct GuidedPlan {
  schedule::Plan plan;  // the faster of the two
  bool guided = false;  // the guided plan was kept
  ReplayReport plain_replay;
  LpGuidance guidance;  // the bound, and the guided plan's replay where one was made
};

// The plain plan, the guidance, and the faster of the two plans. FAILED_PRECONDITION as
// BuildPlan when the budget is below what a step needs at once.
Result<GuidedPlan> BuildLpGuidedPlan(const Schedule& s, const Lifetimes& lt, const DeviceProfile& d,
                                     const PlannerConfig& config, const TransferLpOptions& lp = {});

}  // namespace tierpool::prefetch
