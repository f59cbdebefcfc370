// Recompute as a planned action: a tensor that a plan neither keeps in hbm nor moves across a
// long gap between its uses, but makes again, by running its defining step once more just
// before the use after the gap (Checkmate's and Capuchin's choice, Megatron's selective
// recompute). On a host behind PCIe the link is too slow to hide every activation's round trip;
// re-running a cheap step (an elementwise op, a norm) costs a little compute and no link time.
//
// A recompute is a rewrite of the schedule: the tensor T keeps its uses before the gap; a new
// tensor T' (T's size and kind, named "T@recompute") is defined at `at_step`, the step before
// the use after the gap, and takes T's uses after it; `at_step` gains the defining step's
// compute (its time, kernels, flops and bytes) and uses that step's inputs; where T carries a
// recipe (the op that made it, when its defining step is not that op: a recorded trainer's),
// the recipe's inputs and compute instead. Everything that reads a schedule (the planner, the
// simulator, the LP, the live replay) then accounts for the recompute by reading the rewritten
// one. A recompute is allowed only where it keeps no input longer: each input is in hbm at
// `at_step` anyway (it is persistent, or defined before and used at or after it), and the
// step's bytes stay within the plan's budget (or the schedule's step floor, if that is more).
//
// Plain functions on values: no state, no locking. docs/schedules.md ("Recompute") has the
// format.
#pragma once

#include <cstdint>
#include <vector>

#include "common/status.h"
#include "prefetch/schedule.h"

namespace tierpool::prefetch {

// Activations smaller than this are not worth a recompute's bookkeeping.
inline constexpr std::uint64_t kRecomputeMinBytes = 1 << 20;

// One tensor a plan may recompute, and what it would cost and free.
struct RecomputeCandidate {
  std::uint32_t tensor = 0;
  std::uint32_t at_step = 0;
  double cost_us = 0;        // the defining step's compute, added at at_step
  double freed_byte_us = 0;  // the tensor's bytes times the gap it no longer spans
  std::uint64_t bytes = 0;
};

// Every activation of `s` that may be recomputed across the longest gap between its uses, most
// bytes freed per microsecond of compute first. Tensors of at most `min_bytes` are left out, and
// recomputes that would make their step touch more than `step_bytes` or the schedule's step
// floor, whichever is more (a planner passes its budget: the plan stays feasible).
std::vector<RecomputeCandidate> RecomputeCandidates(const Schedule& s, const Lifetimes& lt,
                                                    std::uint64_t min_bytes = kRecomputeMinBytes,
                                                    std::uint64_t step_bytes = 0);

// The greedy choice of candidates (in their order) whose costs add up to at most `cost_cap_us`,
// none of them an input of another's defining step (so that no recompute stretches the life of
// another's input): the recomputes for a plan.
std::vector<schedule::Recompute> ChooseRecomputes(const Schedule& s, const Lifetimes& lt,
                                                  const std::vector<RecomputeCandidate>& c,
                                                  double cost_cap_us, std::uint64_t step_bytes = 0);

// `s` with the recomputes applied in order (the file's header says how). INVALID_ARGUMENT,
// naming the recompute, for one that is not allowed: an unknown tensor, one that is not an
// activation, is updated or recomputed twice, a step that is not between two of its uses, or an
// input of the defining step that is not in hbm then anyway. The result validates.
Result<Schedule> ApplyRecomputes(const Schedule& s,
                                 const google::protobuf::RepeatedPtrField<schedule::Recompute>& r);

// The schedule a plan's actions are for: `s` itself where the plan recomputes nothing (`*out`
// untouched, `s` returned), else the rewritten one, kept in `*out`.
Result<const Schedule*> ScheduleForPlan(const Schedule& s, const schedule::Plan& plan,
                                        Schedule* out);

// The compute that a plan's recomputes add to one iteration of `s` (what the defining steps
// cost), and the bytes they recompute.
double RecomputeUs(const Schedule& s, const schedule::Plan& plan);
std::uint64_t RecomputeBytes(const Schedule& s, const schedule::Plan& plan);

}  // namespace tierpool::prefetch
