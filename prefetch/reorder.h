// Execution-order refinement: a schedule's steps in another order that keeps every dependency,
// chosen so that transfers hide behind compute and memory frees sooner (HyperOffload's global
// execution-order refinement). The first case: each optimizer update runs as soon as its
// gradient exists, instead of all at the end of the backward pass, so the gradient dies there
// and the parameter's optimizer states stream through hbm while backward still computes. The
// second: a branch's steps run where their results are needed, so that they are not held across
// the rest of the graph (LowerPeakOrder).
//
// Dependencies come from the tensors: a read after the write it reads, a write after the write
// and every read of the value it replaces (in-place updates included). A step of class `kSync`
// (a point in the order with no kernel) is a barrier nothing crosses. Plain functions on
// values: no state, no locking.
#pragma once

#include <cstdint>
#include <functional>
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
  std::uint32_t hoisted = 0;  // optimizer updates that now run earlier (HoistOptimizerUpdates)
};

// Every optimizer update (op class kOptimizer) as early as its dependencies allow; all other
// steps keep their relative order.
Result<ReorderResult> HoistOptimizerUpdates(const Schedule& s);

// An order with a lower no-offload peak, for graphs with branches (inference exports above all,
// where no step is an optimizer update): a list schedule that at each point runs, of the steps
// whose dependencies have run, the one that leaves the least memory in use after it (a step that
// frees its inputs' last use before one that only allocates; ties in the original order), and a
// second that runs a freeing step first where there is one and otherwise keeps the original
// order. Of the two and the original order, the one with the lowest peak is returned (the
// original unless one is strictly lower, so `moved` is 0 where nothing helps). `acceptable`, when
// given, vetoes a candidate for another reason (the tool: a no-offload iteration that grows on
// the device by more than --max-overhead, since the order moves kernels against each other).
Result<ReorderResult> LowerPeakOrder(
    const Schedule& s, const std::function<bool(const Schedule&)>& acceptable = nullptr);

}  // namespace tierpool::prefetch
