// The last step of a planning pass on a repeating schedule: the plan's actions, run again every
// iteration, must treat each persistent tensor's copies as the iteration before left them.
//
// A pass keeps the actions of one iteration of its walk, and the prefetches of that iteration's
// first uses were issued at the end of the iteration before it. Where the two iterations' tails
// differ (the one before evicted a weight after its update and loaded it again; the kept one
// left it in hbm, dirty), the periodic plan loads a tensor that is already in hbm (a no-op) and
// later frees it as if the load had made it clean: its update is lost. For such a tensor this
// pass makes the steady state what the kept prefetches assume: a prefetch that would find it in
// hbm gets the eviction before it (after the tensor's last touch, an offload where it is dirty),
// a load that repeats the one before it goes, and a free that would still find its only current
// copy in hbm becomes an offload. Other tensors are left as they are.
//
// Locking: none; a pure function of its inputs.
#pragma once

#include "prefetch/schedule.h"

namespace tierpool::prefetch {

// Fixes `plan` (actions sorted by step, as a pass leaves them; resident_at_start set) in place:
// only ever adds evictions, drops prefetches of tensors already in hbm, and turns frees of dirty
// tensors into offloads, so hbm use never rises; a plan that drops no update is left byte for
// byte. Leaves the actions sorted by step.
void KeepPeriodicCopiesCurrent(const Schedule& s, const Lifetimes& lt, schedule::Plan* plan);

// The order of a plan's actions: by step; at one step, what is issued as it starts before what
// is issued as it ends, and room made before what needs it comes in.
bool ActionsByStep(const schedule::Action& a, const schedule::Action& b);

}  // namespace tierpool::prefetch
