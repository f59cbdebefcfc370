// A lower bound on the stall of every policy under an hbm budget, from a linear-programming
// relaxation of the transfer schedule (COIN-OR CLP), and on small schedules the optimum of its
// integral form (CBC).
//
// The model. The iteration is cut at boundary steps a_0 = 0 < a_1 < ... (all steps when there
// are few; otherwise the steps with the most memory in use and steps evenly spaced in compute
// time). Boundary k is the moment step a_k's compute starts; window k runs from there to the
// next boundary, for its steps' compute plus S_k, the stall inside it (the objective is the sum).
// For each tensor live at a boundary, x is the fraction of its bytes in hbm then and h the
// fraction with a current host copy; in each window, g and o are the fractions of its bytes the
// host->hbm and hbm->host links carry. Then:
//   x + h >= 1                    every byte is somewhere
//   x' <= x + g                   bytes reach hbm only over the link
//   h' <= h + o  (h' <= o once the window writes the tensor: a write makes the host copy stale)
//   x = 1 at a boundary step that touches the tensor; x + g >= 1 for a use inside the window
//   sum bytes * x <= budget       at each boundary where the no-offload memory exceeds it
//   sum bytes * g <= h2d rate * (compute + S), likewise hbm->host
// Every replay that keeps the budget gives a feasible point (its state at each boundary, the
// bytes each link moved in each window) whose objective is at most its stall, because the model
// only drops constraints: copies that must follow the write inside a window, the order of
// transfers on a link, link latency, memory between boundaries. The initial state is free, so
// the bound holds for the second iteration of a repeating schedule whatever the first left.
// Tensors with the same pattern across the boundaries are one variable (their bytes summed):
// an LP is unchanged by merging columns that every constraint treats alike.
//
// The integral form adds, per boundary, whether each tensor is allocated in hbm (0/1, at least
// its x): it is tighter, and exact for the model, but the model itself is still a relaxation
// of the replay, so it too is a lower bound, not the optimal policy's stall.
#pragma once

#include <cstdint>
#include <vector>

#include "common/status.h"
#include "prefetch/device_profile.h"
#include "prefetch/residency_guide.h"
#include "prefetch/schedule.h"

namespace tierpool::prefetch {

struct TransferLpOptions {
  std::uint32_t max_windows = 64;  // boundaries kept; every step when the schedule has fewer
  bool integral = false;           // 0/1 residency, solved by branch and bound (small schedules)
  double time_limit_s = 60;
  bool residency = false;  // also return the relaxation's residency per tensor (TransferLpBound)

  Status validate() const;
};

struct TransferLpBound {
  double stall_us = 0;   // the bound; infinity when no policy keeps the budget
  bool feasible = true;  // false: even the relaxation cannot keep the budget
  bool proven = false;   // solved to optimality (else an unfinished search's best bound, or 0)
  std::uint32_t windows = 0;
  std::uint32_t tensor_groups = 0;  // modelled tensors after merging identical patterns
  int columns = 0, rows = 0;
  double solve_ms = 0;
  // With TransferLpOptions::residency and a solved relaxation: the relaxation's optimum, as the
  // share of each tensor in hbm at each boundary.
  ResidencyGuide residency;
};

// Budgets at or above the no-offload peak give 0 without solving; budgets below the step floor
// (Lifetimes::step_floor_bytes) are infeasible without solving.
Result<TransferLpBound> TransferLpStallBound(const Schedule& s, const Lifetimes& lt,
                                             const DeviceProfile& d, std::uint64_t budget,
                                             const TransferLpOptions& options = {});

}  // namespace tierpool::prefetch
