// One pass of the offload planner (planner.h): the walk over the planned iterations that makes a
// plan on a given clock, with given prefetch windows, and the helpers that lay those windows
// out. The planner's rounds (planner.cc) call it many times and choose among its plans by replay;
// nothing outside prefetch/ uses it.
//
// Locking: none; a pass owns everything it builds, and passes on separate threads share only
// their const inputs.
#pragma once

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "common/status.h"
#include "prefetch/planner.h"
#include "prefetch/simulator.h"

namespace tierpool::prefetch {

// Window starts (and how far into that step the transfer should start), by (tensor, global use).
struct WindowOverride {
  std::int64_t step;
  double delay_us;
};
// By tensor, then by use (ascending): a pass looks them up for every occurrence of every tensor
// (a hash map of all of them missed the cache on nearly every look, and a tensor used in every
// step of every planned iteration has dozens).
class WindowOverrides {
 public:
  WindowOverrides() = default;
  explicit WindowOverrides(std::size_t tensors) : by_tensor_(tensors) {}
  void Set(std::uint32_t tensor, std::int64_t use, WindowOverride o) {
    auto& v = by_tensor_[tensor];
    auto it = std::lower_bound(v.begin(), v.end(), use,
                               [](const auto& e, std::int64_t u) { return e.first < u; });
    if (it != v.end() && it->first == use) {
      it->second = o;
    } else {
      v.emplace(it, use, o);
    }
  }
  const WindowOverride* Find(std::uint32_t tensor, std::int64_t use) const {
    if (tensor >= by_tensor_.size()) return nullptr;
    const auto& v = by_tensor_[tensor];
    auto it = std::lower_bound(v.begin(), v.end(), use,
                               [](const auto& e, std::int64_t u) { return e.first < u; });
    return it != v.end() && it->first == use ? &it->second : nullptr;
  }
  // As Find, for a caller whose uses of a tensor never decrease from one call to the next:
  // `*pos` (0 at the first call) is where the last call stopped, and the look goes on from there.
  const WindowOverride* FindAfter(std::uint32_t tensor, std::int64_t use,
                                  std::uint32_t* pos) const {
    if (tensor >= by_tensor_.size()) return nullptr;
    const auto& v = by_tensor_[tensor];
    while (*pos < v.size() && v[*pos].first < use) ++*pos;
    return *pos < v.size() && v[*pos].first == use ? &v[*pos].second : nullptr;
  }

 private:
  std::vector<std::vector<std::pair<std::int64_t, WindowOverride>>> by_tensor_;
};

struct Reload {
  std::uint32_t tensor;
  std::int64_t use;
};

// A repeating schedule is planned over five iterations and the middle one is kept: the cold
// start is two iterations behind it (one was not enough for a decoder's weights streaming
// through hbm: its stall at 90% on h100 rose from 12 to 40 ms), and the walk goes on through the
// fourth, where the evictions that take effect in the kept one are decided (when room is
// needed, after their tensor's last touch). The fifth is only looked ahead into (next uses and
// windows), not walked: for the link layout its reloads are the fourth's, an iteration later.
// (Walking all five stalled as much in total on the bf16 corpus, 9,062.8 against 9,062.9 ms
// over its 1,242 budgets, and took 1.1-1.2x as long: docs/benchmarks/planning.md, "Planning time on
// real graphs".)
int PlannedIterations(const Schedule& s);

// Start time of every step on the planned timeline, from the compute estimates; one more entry
// for the end.
// With `replayed` (a replay of an earlier plan), each step lasts as long as it did there, stalls
// included; the planner then plans on the clock its plans actually run to.
std::vector<double> StepStarts(const Schedule& s, std::int64_t n, std::int64_t total,
                               const ReplayReport* replayed = nullptr);

// The step running at moment t: the latest step w <= limit with start[w] <= t (0 if none).
std::int64_t StepAt(const std::vector<double>& start, std::int64_t limit, double t);

// Latest use first (then by tensor), each (tensor, use) once: the order the link layout walks.
void SortUnique(std::vector<Reload>* r);
// Adds `more` to `sorted` (SortUnique's order, each once), in that order: a sort of `more` and a
// merge instead of sorting all again (a round's list grows to tens of thousands).
void MergeUnique(std::vector<Reload>* sorted, std::vector<Reload>* more);

// Loads issued ahead of their windows into room nothing needs yet. A pass evicts only on
// demand, so at a tight budget a load starts when its window opens and room is made for it,
// and the host->hbm link idles wherever the windows are far apart, even with room free (the
// end of a backward pass, where activations die, or the optimizer's burst of loads). With
// early loads, each step also issues the loads whose windows open within the next `steps`
// steps, in window order, while they fit in the budget less what is resident, waiting, and
// defined within the next `defs_ahead` steps; the first that does not fit stops the walk, so
// that the link still carries loads in the order of their windows.
struct EarlyLoads {
  std::int64_t steps = 0;  // 0: none
  std::int64_t defs_ahead = 8;
  // The load holds its room until its use (its window moves to the step it is issued at).
  // Otherwise it stays an eviction candidate under its own window, last among the resident
  // tensors to go by Belady's rule but gone if a nearer need wants the room.
  bool holds_room = false;
};

// How a pass departs from the plain planner's rules; the planner's later rounds try a few.
struct PassOptions {
  EarlyLoads early;
  // Evictions that keep the host->hbm link ahead: the pass keeps a calendar of that link (the
  // loads it has issued, and the reload of each tensor it evicted, placed from its next
  // window on), and among the candidates prefers those whose reload would still end before
  // their next use. Belady's rule alone, on a loop that streams more than fits (a decoder's
  // weights, token after token), evicts what was used last, so the tensors that go out are
  // neighbours and their reloads queue behind each other; these spread them out.
  bool reload_aware = false;
  bool plain() const { return early.steps == 0 && !reload_aware; }
};

// Memory one pass leaves to the next on the same thread: the per-tensor lists and the window
// sets (a round makes up to seven passes; allocating these anew for each cost about 8% of the
// planning time of the largest graphs). Not for two passes at once.
class PassBuffers {
 public:
  PassBuffers();
  ~PassBuffers();
  PassBuffers(const PassBuffers&) = delete;
  PassBuffers& operator=(const PassBuffers&) = delete;

 private:
  friend Result<schedule::Plan> PlanPass(const Schedule&, const Lifetimes&, const DeviceProfile&,
                                         const PlannerConfig&, const std::vector<double>&,
                                         const WindowOverrides&, const PassOptions&,
                                         std::vector<Reload>*, PassBuffers*);
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// One plan for config's budget on the clock `start` (StepStarts), each prefetch window where
// `overrides` puts it or else sized from the link; the loads it issues are appended to
// `reloads`. FAILED_PRECONDITION when a step needs more than the budget at once. `buffers`, if
// given, is memory an earlier pass left (the plan is the same with or without).
Result<schedule::Plan> PlanPass(const Schedule& s, const Lifetimes& lt, const DeviceProfile& d,
                                const PlannerConfig& config, const std::vector<double>& start,
                                const WindowOverrides& overrides, const PassOptions& options,
                                std::vector<Reload>* reloads, PassBuffers* buffers = nullptr);

}  // namespace tierpool::prefetch
