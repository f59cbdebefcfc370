// Optimizer updates as streams: a large parameter's update split into chunks that each read and
// write one slice of the weight, its gradient and its optimizer states, so that the planner can
// bring a slice in, update it and send it out while the next one comes in (ZeRO-Infinity's
// sub-groups), instead of holding every byte of the update in hbm at once.
//
// The update of one parameter is elementwise (Adam, AdamW, SGD: element i of the new weight and
// states depends only on element i of the old ones and of the gradient), so any partition of the
// elements is exact. A step is split only when it is that case on its face: an optimizer update
// (op class kOptimizer) whose every tensor has a known shape and the same element count, none of
// them already split for another update. Each of its tensors becomes `k` tensors, the slices
// [n*j/k, n*(j+1)/k) of its flattened elements, named "NAME[j/k]"; the step becomes `k` steps
// in a row, each touching its slice and costing its share of the step's compute. Every other
// step that defines or uses a split tensor defines or uses all of its slices. A trainer that
// runs such a plan steps its optimizer slice by slice, in the same order.
//
// Plain functions on values: no state, no locking. docs/schedules.md has the format.
#pragma once

#include <cstdint>

#include "common/status.h"
#include "prefetch/schedule.h"

namespace tierpool::prefetch {

struct SplitUpdatesResult {
  Schedule schedule;
  std::uint32_t steps_split = 0;    // optimizer updates split
  std::uint32_t chunk_steps = 0;    // the steps they became
  std::uint32_t tensors_split = 0;  // tensors split into slices
  std::uint32_t skipped = 0;        // large updates left whole (shapes unknown or unlike)
};

// Splits every optimizer update whose largest tensor is above max_chunk_bytes into the fewest
// slices that bring each of its tensors to at most max_chunk_bytes (as near as whole elements
// allow). max_chunk_bytes must be at least 4 KiB. The result validates.
Result<SplitUpdatesResult> SplitOptimizerUpdates(const Schedule& s, std::uint64_t max_chunk_bytes);

}  // namespace tierpool::prefetch
