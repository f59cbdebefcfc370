#include "prefetch/periodic_copies.h"

#include <algorithm>
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
  enum Kind : std::uint8_t { kUse, kUpdate, kLoad, kFree, kOffload } kind;
  std::uint32_t step;
  std::uint8_t phase;  // 0 issued at the start, 1 used, 2 delayed, 3 updated, 4 issued at the end
  double delay_us = 0;
  int action = -1;  // index into the tensor's actions (a load, free or offload)
};

// One tensor's events into *ev; a null action is one dropped.
void EventsOf(const std::vector<std::uint32_t>& uses,
              const google::protobuf::RepeatedField<std::uint32_t>& updates,
              const std::vector<const schedule::Action*>& actions, std::vector<Event>* ev) {
  ev->clear();
  for (auto u : uses) ev->push_back({Event::kUse, u, 1});
  for (auto u : updates) ev->push_back({Event::kUpdate, u, 3});
  for (std::size_t i = 0; i < actions.size(); ++i) {
    const schedule::Action* a = actions[i];
    if (a == nullptr) continue;
    const auto kind = a->kind() == schedule::PREFETCH ? Event::kLoad
                      : a->kind() == schedule::FREE   ? Event::kFree
                                                      : Event::kOffload;
    const std::uint8_t phase = a->after() ? 4 : a->delay_us() > 0 ? 2 : 0;
    ev->push_back({kind, a->step(), phase, a->delay_us(), static_cast<int>(i)});
  }
  // As ActionsByStep orders the plan: at one step and phase, evictions before loads, and
  // otherwise the plan's order (an eviction added here last among the evictions).
  std::stable_sort(ev->begin(), ev->end(), [](const Event& a, const Event& b) {
    if (a.step != b.step) return a.step < b.step;
    if (a.phase != b.phase) return a.phase < b.phase;
    if (a.delay_us != b.delay_us) return a.delay_us < b.delay_us;
    return a.kind != Event::kLoad && b.kind == Event::kLoad;
  });
}

struct Copies {
  bool in = false;     // in hbm
  bool dirty = false;  // hbm holds the only current copy
};

// One iteration from `c`. Calls on_redundant(i) for a load that finds the tensor in hbm and
// on_dirty_free(i) for a free that finds it dirty (i: index into `ev`).
template <typename Redundant, typename DirtyFree>
Copies Walk(const std::vector<Event>& ev, Copies c, Redundant on_redundant,
            DirtyFree on_dirty_free) {
  for (std::size_t i = 0; i < ev.size(); ++i) {
    switch (ev[i].kind) {
      case Event::kUse:
        break;
      case Event::kUpdate:
        if (c.in) c.dirty = true;
        break;
      case Event::kLoad:
        if (c.in) {
          on_redundant(i);
        } else {
          c = {true, false};
        }
        break;
      case Event::kFree:
      case Event::kOffload:
        if (!c.in) break;
        if (ev[i].kind == Event::kFree && c.dirty) on_dirty_free(i);
        c = {false, false};
        break;
    }
  }
  return c;
}

// The steady state: an iteration from the plan's start state (a clean copy), then the one
// that the callbacks see, from where the first left the tensor.
template <typename Redundant, typename DirtyFree>
void SteadyWalk(const std::vector<Event>& ev, bool at_start, Redundant on_redundant,
                DirtyFree on_dirty_free) {
  auto ignore = [](std::size_t) {};
  Walk(ev, Walk(ev, {at_start, false}, ignore, ignore), on_redundant, on_dirty_free);
}

// A tensor's action as the fix leaves it: the plan's (changed or dropped) or one added.
struct TensorAction {
  schedule::Action action;
  int original = -1;  // its index in the plan; -1 for an eviction added here
  bool dropped = false;
};

std::vector<const schedule::Action*> Pointers(const std::vector<TensorAction>& actions) {
  std::vector<const schedule::Action*> out;
  for (const auto& a : actions) out.push_back(a.dropped ? nullptr : &a.action);
  return out;
}

// One tensor's actions (whose steady state drops an update) and whether it is in hbm at the
// start, fixed (periodic_copies.h). Each round fixes the first load of the steady state that
// finds the tensor in hbm: after its last touch before it (looking back across the iteration's
// start into the one before) the eviction the walk left out goes, or the load goes when another
// load came first (then it is only a repeat). A tensor has a few actions; each round adds one
// eviction or drops one load.
void FixTensor(const std::vector<std::uint32_t>& uses,
               const google::protobuf::RepeatedField<std::uint32_t>& updates,
               std::vector<TensorAction>* actions, char* at_start, std::vector<Event>* ev) {
  auto ignore = [](std::size_t) {};
  for (std::size_t round = 0; round <= actions->size(); ++round) {
    EventsOf(uses, updates, Pointers(*actions), ev);
    std::optional<std::size_t> redundant;
    SteadyWalk(
        *ev, *at_start != 0,
        [&](std::size_t i) {
          if (!redundant) redundant = i;
        },
        ignore);
    if (!redundant) break;
    const std::size_t before = (*redundant + ev->size() - 1) % ev->size();
    const Event& load = (*ev)[*redundant];
    const Event& touch = (*ev)[before];
    if (before == *redundant || (touch.kind != Event::kUse && touch.kind != Event::kUpdate)) {
      (*actions)[static_cast<std::size_t>(load.action)].dropped = true;
      continue;
    }
    schedule::Action out;
    out.set_kind(schedule::FREE);  // an offload below where the tensor is dirty
    out.set_tensor((*actions)[0].action.tensor());
    out.set_step(touch.step);
    out.set_after(true);
    actions->push_back({out, -1});
    if (before > *redundant) *at_start = 0;  // evicted at the end of the iteration before
  }
  // Frees of dirty copies in the steady state become offloads (the same moves in hbm).
  EventsOf(uses, updates, Pointers(*actions), ev);
  SteadyWalk(*ev, *at_start != 0, ignore, [&](std::size_t i) {
    (*actions)[static_cast<std::size_t>((*ev)[i].action)].action.set_kind(schedule::OFFLOAD);
  });
}

}  // namespace

void KeepPeriodicCopiesCurrent(const Schedule& s, const Lifetimes& lt, schedule::Plan* plan) {
  const std::size_t nt = static_cast<std::size_t>(s.tensors_size());
  // Only a tensor whose update a free would drop is changed. A load that finds a clean tensor in
  // hbm leaves it there, as the kept iteration did; evicting it to make the load real adds a
  // transfer. Where the room it keeps is room a load counted on, the planner's replay finds the
  // plan over its budget and keeps another.
  auto watched = [&](std::uint32_t t) {
    return t < nt && lt.persistent(t) && s.tensors(static_cast<int>(t)).update_steps_size() > 0;
  };
  // The watched tensors' actions, in plan order, grouped by tensor (a counting sort): read in
  // place, since most plans need no fix.
  std::vector<std::uint32_t> offset(nt + 1, 0);
  for (const auto& a : plan->actions()) {
    if (watched(a.tensor())) ++offset[a.tensor() + 1];
  }
  for (std::size_t t = 0; t < nt; ++t) offset[t + 1] += offset[t];
  std::vector<int> by_tensor(offset[nt]);
  {
    std::vector<std::uint32_t> fill(offset.begin(), offset.end() - 1);
    for (int i = 0; i < plan->actions_size(); ++i) {
      const auto t = plan->actions(i).tensor();
      if (watched(t)) by_tensor[fill[t]++] = i;
    }
  }
  std::vector<char> at_start(nt, 0);
  for (auto t : plan->resident_at_start()) {
    if (t < nt) at_start[t] = 1;
  }
  std::vector<TensorAction> added;
  std::vector<char> dropped(static_cast<std::size_t>(plan->actions_size()), 0);
  std::vector<const schedule::Action*> pointers;
  std::vector<Event> ev;
  bool changed = false;
  for (std::uint32_t t = 0; t < nt; ++t) {
    if (offset[t] == offset[t + 1]) continue;
    const auto& updates = s.tensors(static_cast<int>(t)).update_steps();
    pointers.clear();
    for (auto k = offset[t]; k < offset[t + 1]; ++k) {
      pointers.push_back(&plan->actions(by_tensor[k]));
    }
    EventsOf(lt.uses(t), updates, pointers, &ev);
    bool drops_update = false;
    SteadyWalk(
        ev, at_start[t] != 0, [](std::size_t) {}, [&](std::size_t) { drops_update = true; });
    if (!drops_update) continue;
    changed = true;
    std::vector<TensorAction> actions;
    for (auto k = offset[t]; k < offset[t + 1]; ++k) {
      actions.push_back({plan->actions(by_tensor[k]), by_tensor[k]});
    }
    FixTensor(lt.uses(t), updates, &actions, &at_start[t], &ev);
    for (auto& a : actions) {
      if (a.original < 0) {
        added.push_back(std::move(a));
      } else if (a.dropped) {
        dropped[static_cast<std::size_t>(a.original)] = 1;
      } else {
        *plan->mutable_actions(a.original) = std::move(a.action);
      }
    }
  }
  if (!changed) return;
  // The plan's actions in their order, changed where fixed, then the added evictions; sorted by
  // step again (stable: the order within a step, which the links follow, stays).
  google::protobuf::RepeatedPtrField<schedule::Action> kept;
  for (int i = 0; i < plan->actions_size(); ++i) {
    if (!dropped[static_cast<std::size_t>(i)]) *kept.Add() = plan->actions(i);
  }
  for (auto& a : added) *kept.Add() = std::move(a.action);
  plan->mutable_actions()->Swap(&kept);
  std::stable_sort(plan->mutable_actions()->begin(), plan->mutable_actions()->end(), ActionsByStep);
  plan->clear_resident_at_start();
  for (std::uint32_t t = 0; t < nt; ++t) {
    if (at_start[t]) plan->add_resident_at_start(t);
  }
}

void MakePeriodic(const Schedule& s, const Lifetimes& lt,
                  const std::function<std::uint32_t(std::uint32_t)>& first_window,
                  schedule::Plan* plan) {
  const std::size_t nt = static_cast<std::size_t>(s.tensors_size());
  std::stable_sort(plan->mutable_actions()->begin(), plan->mutable_actions()->end(), ActionsByStep);
  // Walk the kept iteration from its start state with its own actions.
  std::vector<char> in(nt, 0), at_start(nt, 0);
  for (auto t : plan->resident_at_start()) in[t] = at_start[t] = 1;
  for (const auto& a : plan->actions()) {
    in[a.tensor()] = a.kind() == schedule::PREFETCH ? 1 : 0;  // actions are in step order
  }
  std::vector<std::uint32_t> keep_start;
  for (std::uint32_t t = 0; t < nt; ++t) {
    if (!lt.persistent(t) || lt.uses(t).empty()) {
      if (at_start[t]) keep_start.push_back(t);
      continue;
    }
    if (at_start[t] && !in[t]) {
      auto* a = plan->add_actions();
      a->set_kind(schedule::PREFETCH);
      a->set_tensor(t);
      a->set_step(first_window(t));
      a->set_needed_by(lt.uses(t).front());
    } else if (!at_start[t] && in[t]) {
      auto* a = plan->add_actions();
      a->set_kind(s.tensors(static_cast<int>(t)).update_steps_size() > 0 ? schedule::OFFLOAD
                                                                         : schedule::FREE);
      a->set_tensor(t);
      a->set_step(lt.uses(t).back());
      a->set_after(true);
    } else if (at_start[t]) {
      keep_start.push_back(t);
    }
  }
  plan->clear_resident_at_start();
  for (auto t : keep_start) plan->add_resident_at_start(t);
  std::stable_sort(plan->mutable_actions()->begin(), plan->mutable_actions()->end(), ActionsByStep);
  // Then each persistent tensor's copies as the iteration before leaves them: the kept
  // prefetches of the first uses came from that iteration.
  KeepPeriodicCopiesCurrent(s, lt, plan);
}

}  // namespace tierpool::prefetch
