// Turning replays into things people read: JSON reports, Chrome trace files (open in Perfetto),
// an SVG of each tier's use over time, and the budget sweep.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "prefetch/guided_plan.h"
#include "prefetch/planner.h"
#include "prefetch/simulator.h"
#include "prefetch/transfer_lp.h"

namespace tierpool::prefetch {

std::string ReportJson(const ReplayReport& r, const Schedule& s);
// A replay's largest causes of stall, a line each after `lead`: how long, waiting for what (and
// on which link), and from which step.
std::string StallCausesText(const ReplayReport& r, const std::string& lead);
// Chrome trace event format: compute and stalls, h2d and d2h transfers on their own tracks,
// hbm and host bytes as counters.
std::string ChromeTraceJson(const ReplayReport& r);
// hbm and host bytes over r's iteration, its budget, and where its compute stalled; `others`
// (the same schedule without offload, or under another policy) as hbm curves beside it.
std::string MemorySvg(const ReplayReport& r, const std::string& title,
                      const std::vector<const ReplayReport*>& others = {});

struct SweepRow {
  double fraction = 0;  // of the no-offload peak
  std::uint64_t budget = 0;
  bool at_step_floor = false;  // the step floor, between two of the sweep's steps
  bool planned_ok = false;
  std::string planned_error;  // when the planner finds the budget infeasible
  ReplayReport planned;
  ReplayReport reactive;
  std::optional<TransferLpBound> lp;  // when the sweep computes it
  // The plan guided by the LP's residency (guided_plan.h), when the sweep solves the LP and the
  // plain plan stalls.
  std::optional<ReplayReport> guided;
  // The faster of the plain and the LP-guided plan (the plain one where there is no other).
  const ReplayReport& better_plan() const {
    return guided && guided->time_us < planned.time_us ? *guided : planned;
  }
  // The best lower bound known at this budget: the step bound or the LP's.
  double stall_bound_us() const {
    return std::max(reactive.stall_lower_bound_us, lp ? lp->stall_us : 0.0);
  }
};

struct SweepResult {
  ReplayReport none;
  double max_overhead = 0.01;
  std::vector<SweepRow> rows;
  std::optional<std::size_t> smallest_within;  // row index of the smallest budget within overhead
  // The same with the better of the plain and the LP-guided plan at each budget.
  std::optional<std::size_t> smallest_within_guided;
  // What the busiest step touches at once (Lifetimes::step_floor_bytes): no policy keeps a
  // budget below it, so no sweep lowers the peak further than to it.
  std::uint64_t step_floor_bytes = 0;
  std::uint32_t step_floor_step = 0;
  double step_floor_fraction() const {  // of the no-offload peak
    return none.peak_hbm == 0
               ? 0.0
               : static_cast<double>(step_floor_bytes) / static_cast<double>(none.peak_hbm);
  }
  double planning_ms_max = 0;         // slowest plan of the sweep
  double guided_planning_ms_max = 0;  // slowest guided plan (the LP's solve apart)
};

struct SweepOptions {
  double max_overhead = 0.01;  // of the no-offload time, for the smallest budget reported
  double step = 0.05;          // budgets from 100% of the no-offload peak down in these steps
  double lowest = 0.2;         // ...to this fraction
  double prefetch_margin = PlannerConfig{}.prefetch_margin;
  bool early_loads = PlannerConfig{}.early_loads;
  double recompute_share = 0;  // PlannerConfig's: the planned column may recompute
  bool lp_bound = true;        // solve the transfer LP at each budget (transfer_lp.h)
  TransferLpOptions lp;
  // Budgets worked on at once, each on its own thread (the rows are the same whatever the
  // number; the planning times are each budget's own wall time, so more jobs than free cores
  // inflate them).
  std::uint32_t jobs = 1;

  Status validate() const;
};

Result<SweepResult> Sweep(const Schedule& s, const Lifetimes& lt, const DeviceProfile& d,
                          const SweepOptions& options = {});
std::string SweepTable(const SweepResult& r, const Schedule& s, const DeviceProfile& d);
std::string SweepJson(const SweepResult& r, const Schedule& s, const DeviceProfile& d);

}  // namespace tierpool::prefetch
