// The last step of a planning pass on a repeating schedule: the plan's actions, run again every
// iteration, must find each persistent tensor where the iteration before left it.
//
// Where: a persistent tensor that ends the kept iteration out of hbm but started it in starts
// out instead and comes in at its window before its first use; one that ends in but started out
// goes after its last use. Both only lower hbm use, so the budget still holds.
//
// Its copies: a pass keeps the actions of one iteration of its walk, and the prefetches of that
// iteration's first uses were issued at the end of the iteration before it. Where the two
// iterations' tails differ (the one before evicted a weight after its update and loaded it
// again; the kept one left it in hbm, dirty), the periodic plan loads a tensor that is already in
// hbm (a no-op) and later frees it as if the load had made it clean: its update is lost. For such
// a tensor the steady state is made what the kept prefetches assume: a prefetch that would find
// it in hbm gets the eviction before it (after the tensor's last touch, an offload where it is
// dirty), a load that repeats the one before it goes, and a free that would still find its only
// current copy in hbm becomes an offload. Other tensors are left as they are.
//
// Locking: none; pure functions of their inputs.
#pragma once

#include <cstdint>
#include <functional>

#include "prefetch/schedule.h"

namespace tierpool::prefetch {

// Makes `plan` (one iteration's actions, sorted or not; resident_at_start as the walk had it)
// periodic: first where each persistent tensor is, then its copies (KeepPeriodicCopiesCurrent).
// first_window(t) is the step at which the window of t's first use in the iteration opens.
// Leaves the actions sorted by step.
void MakePeriodic(const Schedule& s, const Lifetimes& lt,
                  const std::function<std::uint32_t(std::uint32_t)>& first_window,
                  schedule::Plan* plan);

// The copies half of MakePeriodic, on a plan whose tensors already end where they start (actions
// sorted by step): only ever adds evictions, drops prefetches of tensors already in hbm, and
// turns frees of dirty tensors into offloads, so hbm use never rises; a plan that drops no
// update is left byte for byte. Leaves the actions sorted by step.
void KeepPeriodicCopiesCurrent(const Schedule& s, const Lifetimes& lt, schedule::Plan* plan);

// The order of a plan's actions: by step; at one step, what is issued as it starts before what
// is issued as it ends, and room made before what needs it comes in.
bool ActionsByStep(const schedule::Action& a, const schedule::Action& b);

}  // namespace tierpool::prefetch
