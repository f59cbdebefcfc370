// Turning replays into things people read: JSON reports, Chrome trace files (open in Perfetto),
// an SVG of each tier's use over time, and the budget sweep.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "prefetch/planner.h"
#include "prefetch/simulator.h"

namespace tierpool::prefetch {

std::string ReportJson(const ReplayReport& r, const Schedule& s);
// Chrome trace event format: compute and stalls, h2d and d2h transfers on their own tracks,
// hbm and host bytes as counters.
std::string ChromeTraceJson(const ReplayReport& r);
std::string MemorySvg(const ReplayReport& r, const std::string& title);

struct SweepRow {
  double fraction = 0;  // of the no-offload peak
  std::uint64_t budget = 0;
  bool planned_ok = false;
  std::string planned_error;  // when the planner finds the budget infeasible
  ReplayReport planned;
  ReplayReport reactive;
};

struct SweepResult {
  ReplayReport none;
  double max_overhead = 0.01;
  std::vector<SweepRow> rows;
  std::optional<std::size_t> smallest_within;  // row index of the smallest budget within overhead
  double planning_ms_max = 0;                  // slowest plan of the sweep
};

// Tries budgets from 100% of the no-offload peak down in `step` fractions to `lowest`.
Result<SweepResult> Sweep(const Schedule& s, const Lifetimes& lt, const DeviceProfile& d,
                          double max_overhead, double step = 0.05, double lowest = 0.2,
                          double prefetch_margin = PlannerConfig{}.prefetch_margin);
std::string SweepTable(const SweepResult& r, const Schedule& s, const DeviceProfile& d);
std::string SweepJson(const SweepResult& r, const Schedule& s, const DeviceProfile& d);

}  // namespace tierpool::prefetch
