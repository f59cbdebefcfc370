// The tool's `plan` and `replay` commands: a schedule planned under an hbm budget (or a plan read
// back) and replayed, with its report, sweep, trace and SVG. schedule_main.cc parses the flags
// and calls PlanOrReplay; the `schedule ...` commands stay there.
#pragma once

#include <string>

#include "prefetch/device_profile.h"
#include "prefetch/planner.h"
#include "prefetch/transfer_lp.h"

namespace tierpool::tool {

// The flags `plan` and `replay` read (kUsage in schedule_main.cc says what each does).
struct PlanReplayFlags {
  std::string out, json, hbm, policy = "planned", trace, svg, plan_file, split_updates, recompute;
  double max_overhead = 0.01, sweep_step = 0.05, sweep_lowest = 0.2;
  double margin = prefetch::PlannerConfig{}.prefetch_margin;
  bool sweep = false, lp_guided = false, no_early_loads = false;
  unsigned lp_windows = prefetch::TransferLpOptions{}.max_windows, sweep_jobs = 1;
  bool lp_windows_given = false;  // --lp-windows on the command line (not its default)
};

// `cmd` is "plan" or "replay", of the schedule at `path`: the process's exit status (0; 1 with
// the error printed; 3 for a replay that broke an invariant).
int PlanOrReplay(const std::string& cmd, const std::string& path,
                 const prefetch::DeviceProfile& profile, const PlanReplayFlags& f);

}  // namespace tierpool::tool
