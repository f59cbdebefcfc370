// Execution-order refinement: a schedule's steps in another order that keeps every dependency,
// chosen so that transfers hide behind compute and memory frees sooner (HyperOffload's global
// execution-order refinement). The first case: each optimizer update runs as soon as its
// gradient exists, instead of all at the end of the backward pass, so the gradient dies there
// and the parameter's optimizer states stream through hbm while backward still computes.
//
// Dependencies come from the tensors: a read after the write it reads, a write after the write
// and every read of the value it replaces (in-place updates included). A step of class `kSync`
// (a point in the order with no kernel) is a barrier nothing crosses. Plain functions on
// values: no state, no locking.
#pragma once

#include <cstdint>
#include <vector>

#include "common/status.h"
#include "prefetch/schedule.h"

namespace tierpool::prefetch {

// For each step, the steps that must run before it (original indices, ascending).
std::vector<std::vector<std::uint32_t>> StepDependencies(const Schedule& s);

// OK when `order` (new position -> original step) is a permutation that runs every step after
// the steps it depends on; otherwise what is wrong, naming the steps.
Status CheckOrder(const Schedule& s, const std::vector<std::uint32_t>& order);

// The schedule with its steps in `order`, every tensor's steps renumbered to match.
Schedule ApplyOrder(const Schedule& s, const std::vector<std::uint32_t>& order);

struct ReorderResult {
  Schedule schedule;                 // reordered
  std::vector<std::uint32_t> order;  // new position -> original step
  std::uint32_t moved = 0;           // steps no longer at their original position
  std::uint32_t hoisted = 0;         // optimizer updates that now run earlier
};

// Every optimizer update (op class kOptimizer) as early as its dependencies allow; all other
// steps keep their relative order.
Result<ReorderResult> HoistOptimizerUpdates(const Schedule& s);

}  // namespace tierpool::prefetch
