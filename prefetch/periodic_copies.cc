#include "prefetch/periodic_copies.h"

#include <algorithm>
#include <cstdint>
#include <optional>
#include <vector>

namespace tierpool::prefetch {

bool ActionsByStep(const schedule::Action& a, const schedule::Action& b) {
  if (a.step() != b.step()) return a.step() < b.step();
  if (a.after() != b.after()) return !a.after();
  return a.kind() != schedule::PREFETCH && b.kind() == schedule::PREFETCH;
}

namespace {

// What happens to one tensor in one iteration, in the order a replay meets it: at each step the
// actions issued as it starts, the use, the actions issued during its compute (with a delay),
// the update, the actions issued as it ends.
struct Event {
  enum Kind : std::uint8_t { kUse, kUpdate, kAction } kind;
  std::uint32_t step;
  std::uint8_t phase;  // 0 issued at the start, 1 used, 2 delayed, 3 updated, 4 issued at the end
  double delay_us = 0;
  int action = -1;  // index into the tensor's actions (kAction)
};

struct TensorAction {
  schedule::Action action;
  int original = -1;  // its index in the plan; -1 for an eviction added here
  bool dropped = false;
};

std::vector<Event> EventsOf(const std::vector<std::uint32_t>& uses,
                            const google::protobuf::RepeatedField<std::uint32_t>& updates,
                            const std::vector<TensorAction>& actions) {
  std::vector<Event> ev;
  for (auto u : uses) ev.push_back({Event::kUse, u, 1});
  for (auto u : updates) ev.push_back({Event::kUpdate, u, 3});
  for (std::size_t i = 0; i < actions.size(); ++i) {
    if (actions[i].dropped) continue;
    const auto& a = actions[i].action;
    const std::uint8_t phase = a.after() ? 4 : a.delay_us() > 0 ? 2 : 0;
    ev.push_back({Event::kAction, a.step(), phase, a.delay_us(), static_cast<int>(i)});
  }
  // As ActionsByStep orders the plan: at one step and phase, evictions before prefetches, and
  // otherwise the plan's order (an eviction added here last among the evictions).
  auto prefetch = [&](const Event& e) {
    return e.kind == Event::kAction &&
           actions[static_cast<std::size_t>(e.action)].action.kind() == schedule::PREFETCH;
  };
  std::stable_sort(ev.begin(), ev.end(), [&](const Event& a, const Event& b) {
    if (a.step != b.step) return a.step < b.step;
    if (a.phase != b.phase) return a.phase < b.phase;
    if (a.delay_us != b.delay_us) return a.delay_us < b.delay_us;
    return !prefetch(a) && prefetch(b);
  });
  return ev;
}

struct Copies {
  bool in = false;     // in hbm
  bool dirty = false;  // hbm holds the only current copy
};

// One iteration from `c`. Calls on_redundant(i) for a prefetch that finds the tensor in hbm and
// on_dirty_free(i) for a free that finds it dirty (i: index into `ev`).
template <typename Redundant, typename DirtyFree>
Copies Walk(const std::vector<Event>& ev, const std::vector<TensorAction>& actions, Copies c,
            Redundant on_redundant, DirtyFree on_dirty_free) {
  for (std::size_t i = 0; i < ev.size(); ++i) {
    const Event& e = ev[i];
    if (e.kind == Event::kUpdate) {
      if (c.in) c.dirty = true;
      continue;
    }
    if (e.kind != Event::kAction) continue;
    const auto& a = actions[static_cast<std::size_t>(e.action)].action;
    if (a.kind() == schedule::PREFETCH) {
      if (c.in) {
        on_redundant(i);
      } else {
        c = {true, false};
      }
    } else if (c.in) {
      if (a.kind() == schedule::FREE && c.dirty) on_dirty_free(i);
      c = {false, false};
    }
  }
  return c;
}

// Where a prefetch at ev[at] finds its tensor in hbm: the eviction the walk left out, after the
// last touch before it (looking back across the iteration's start into the one before), or
// nothing when another prefetch came first (then this one is only a repeat).
struct Fix {
  std::optional<std::size_t> touch;  // index into ev; none: drop the prefetch
  bool across_start = false;         // the touch is in the iteration before
};
Fix FindFix(const std::vector<Event>& ev, std::size_t at) {
  const std::size_t before = (at + ev.size() - 1) % ev.size();
  if (before == at || ev[before].kind == Event::kAction) return {};
  return {before, before > at};
}

// The steady state: an iteration from the plan's start state (a clean copy), then the one
// that the callbacks see, from where the first left the tensor.
template <typename Redundant, typename DirtyFree>
void SteadyWalk(const std::vector<Event>& ev, const std::vector<TensorAction>& actions,
                bool at_start, Redundant on_redundant, DirtyFree on_dirty_free) {
  auto ignore = [](std::size_t) {};
  const Copies first = Walk(ev, actions, {at_start, false}, ignore, ignore);
  Walk(ev, actions, first, on_redundant, on_dirty_free);
}

// One tensor's actions and whether it is in hbm at the start, fixed (periodic_copies.h); false
// when its steady state drops no update, and nothing changed.
bool FixTensor(const std::vector<std::uint32_t>& uses,
               const google::protobuf::RepeatedField<std::uint32_t>& updates,
               std::vector<TensorAction>* actions, char* at_start) {
  auto ignore = [](std::size_t) {};
  bool drops_update = false;
  SteadyWalk(EventsOf(uses, updates, *actions), *actions, *at_start != 0, ignore,
             [&](std::size_t) { drops_update = true; });
  if (!drops_update) return false;
  // Each round fixes the first prefetch of the steady state that finds the tensor in hbm (a
  // tensor has a few actions; each round adds one eviction or drops one load).
  for (std::size_t round = 0; round <= actions->size(); ++round) {
    const auto ev = EventsOf(uses, updates, *actions);
    std::optional<std::size_t> redundant;
    SteadyWalk(
        ev, *actions, *at_start != 0,
        [&](std::size_t i) {
          if (!redundant) redundant = i;
        },
        ignore);
    if (!redundant) break;
    const Fix fix = FindFix(ev, *redundant);
    if (!fix.touch) {
      (*actions)[static_cast<std::size_t>(ev[*redundant].action)].dropped = true;
      continue;
    }
    schedule::Action out;
    out.set_kind(schedule::FREE);  // an offload below where the tensor is dirty
    out.set_tensor((*actions)[0].action.tensor());
    out.set_step(ev[*fix.touch].step);
    out.set_after(true);
    actions->push_back({out, -1});
    if (fix.across_start) *at_start = 0;  // evicted at the end of the iteration before
  }
  // Frees of dirty copies in the steady state become offloads (the same moves in hbm).
  const auto ev = EventsOf(uses, updates, *actions);
  SteadyWalk(ev, *actions, *at_start != 0, ignore, [&](std::size_t i) {
    (*actions)[static_cast<std::size_t>(ev[i].action)].action.set_kind(schedule::OFFLOAD);
  });
  return true;
}

}  // namespace

void KeepPeriodicCopiesCurrent(const Schedule& s, const Lifetimes& lt, schedule::Plan* plan) {
  const std::size_t nt = static_cast<std::size_t>(s.tensors_size());
  std::vector<std::vector<TensorAction>> by_tensor(nt);
  for (int i = 0; i < plan->actions_size(); ++i) {
    const auto& a = plan->actions(i);
    if (a.tensor() < nt) by_tensor[a.tensor()].push_back({a, i});
  }
  std::vector<char> at_start(nt, 0);
  for (auto t : plan->resident_at_start()) {
    if (t < nt) at_start[t] = 1;
  }
  // Only a tensor whose update a free would drop is changed. A load that finds a clean tensor in
  // hbm leaves it there, as the kept iteration did; evicting it to make the load real adds a
  // transfer. Where the room it keeps is room a load counted on, the planner's replay finds the
  // plan over its budget and keeps another.
  bool changed = false;
  for (std::uint32_t t = 0; t < nt; ++t) {
    const auto& updates = s.tensors(static_cast<int>(t)).update_steps();
    if (!lt.persistent(t) || by_tensor[t].empty() || updates.empty()) continue;
    changed |= FixTensor(lt.uses(t), updates, &by_tensor[t], &at_start[t]);
  }
  if (!changed) return;
  // The plan's actions in their order, changed where fixed, then the added evictions; sorted by
  // step again (stable: the order within a step, which the links follow, stays).
  std::vector<char> dropped(static_cast<std::size_t>(plan->actions_size()), 0);
  std::vector<schedule::Action> added;
  for (const auto& actions : by_tensor) {
    for (const auto& a : actions) {
      if (a.original < 0) {
        added.push_back(a.action);
      } else if (a.dropped) {
        dropped[static_cast<std::size_t>(a.original)] = 1;
      } else {
        *plan->mutable_actions(a.original) = a.action;
      }
    }
  }
  google::protobuf::RepeatedPtrField<schedule::Action> kept;
  for (int i = 0; i < plan->actions_size(); ++i) {
    if (!dropped[static_cast<std::size_t>(i)]) *kept.Add() = plan->actions(i);
  }
  for (auto& a : added) *kept.Add() = std::move(a);
  plan->mutable_actions()->Swap(&kept);
  std::stable_sort(plan->mutable_actions()->begin(), plan->mutable_actions()->end(), ActionsByStep);
  plan->clear_resident_at_start();
  for (std::uint32_t t = 0; t < nt; ++t) {
    if (at_start[t]) plan->add_resident_at_start(t);
  }
}

}  // namespace tierpool::prefetch
