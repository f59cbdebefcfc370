#include "prefetch/reorder.h"

#include <algorithm>
#include <queue>
#include <string>
#include <utility>

#include "prefetch/cost_model.h"

namespace tierpool::prefetch {

std::vector<std::vector<std::uint32_t>> StepDependencies(const Schedule& s) {
  const auto n = static_cast<std::uint32_t>(s.steps_size());
  std::vector<std::vector<std::uint32_t>> deps(n);
  auto edge = [&](std::uint32_t from, std::uint32_t to) {
    if (from != to) deps[to].push_back(from);
  };
  for (const auto& t : s.tensors()) {
    // Accesses in step order; a step that updates the tensor reads and writes it.
    std::vector<std::pair<std::uint32_t, bool>> access;  // (step, writes)
    if (t.def_step() >= 0) access.push_back({static_cast<std::uint32_t>(t.def_step()), true});
    for (auto u : t.use_steps()) {
      bool writes =
          std::find(t.update_steps().begin(), t.update_steps().end(), u) != t.update_steps().end();
      access.push_back({u, writes});
    }
    std::sort(access.begin(), access.end());
    std::int64_t last_write = -1;
    std::vector<std::uint32_t> readers;  // since the last write
    for (auto [step, writes] : access) {
      if (last_write >= 0) edge(static_cast<std::uint32_t>(last_write), step);
      if (writes) {
        for (auto r : readers) edge(r, step);
        readers.clear();
        last_write = step;
      } else {
        readers.push_back(step);
      }
    }
  }
  // Barriers.
  std::int64_t barrier = -1;
  for (std::uint32_t i = 0; i < n; ++i) {
    if (barrier >= 0) edge(static_cast<std::uint32_t>(barrier), i);
    if (ClassifyOp(s.steps(static_cast<int>(i)).op_type()) == OpClass::kSync) {
      for (auto j = static_cast<std::uint32_t>(barrier + 1); j < i; ++j) edge(j, i);
      barrier = i;
    }
  }
  for (auto& d : deps) {
    std::sort(d.begin(), d.end());
    d.erase(std::unique(d.begin(), d.end()), d.end());
  }
  return deps;
}

Status CheckOrder(const Schedule& s, const std::vector<std::uint32_t>& order) {
  const auto n = static_cast<std::uint32_t>(s.steps_size());
  if (order.size() != n) {
    return Status::InvalidArgument("the order has " + std::to_string(order.size()) +
                                   " steps; the schedule " + std::to_string(n));
  }
  std::vector<std::int64_t> position(n, -1);
  for (std::uint32_t i = 0; i < n; ++i) {
    if (order[i] >= n || position[order[i]] >= 0) {
      return Status::InvalidArgument("the order is not a permutation of the steps (step " +
                                     std::to_string(order[i]) + " at position " +
                                     std::to_string(i) + ")");
    }
    position[order[i]] = i;
  }
  auto deps = StepDependencies(s);
  for (std::uint32_t step = 0; step < n; ++step) {
    for (auto d : deps[step]) {
      if (position[d] > position[step]) {
        return Status::InvalidArgument(
            "step " + std::to_string(step) + " (" + s.steps(static_cast<int>(step)).name() +
            ") runs before step " + std::to_string(d) + " (" + s.steps(static_cast<int>(d)).name() +
            "), which it depends on");
      }
    }
  }
  return Status::Ok();
}

Schedule ApplyOrder(const Schedule& s, const std::vector<std::uint32_t>& order) {
  Schedule out = s;
  std::vector<std::uint32_t> position(order.size());
  for (std::uint32_t i = 0; i < order.size(); ++i) {
    position[order[i]] = i;
    *out.mutable_steps(static_cast<int>(i)) = s.steps(static_cast<int>(order[i]));
  }
  for (auto& t : *out.mutable_tensors()) {
    if (t.def_step() >= 0) t.set_def_step(static_cast<int>(position[t.def_step()]));
    for (auto& u : *t.mutable_use_steps()) u = position[u];
    std::sort(t.mutable_use_steps()->begin(), t.mutable_use_steps()->end());
    for (auto& u : *t.mutable_update_steps()) u = position[u];
    std::sort(t.mutable_update_steps()->begin(), t.mutable_update_steps()->end());
  }
  return out;
}

Result<ReorderResult> HoistOptimizerUpdates(const Schedule& s) {
  if (Status st = Validate(s); !st.ok()) return st;
  const auto n = static_cast<std::uint32_t>(s.steps_size());
  auto deps = StepDependencies(s);
  std::vector<std::vector<std::uint32_t>> next(n);
  std::vector<std::uint32_t> waiting(n);
  for (std::uint32_t i = 0; i < n; ++i) {
    waiting[i] = static_cast<std::uint32_t>(deps[i].size());
    for (auto d : deps[i]) next[d].push_back(i);
  }
  std::vector<char> hoist(n);
  for (std::uint32_t i = 0; i < n; ++i)
    hoist[i] = ClassifyOp(s.steps(static_cast<int>(i)).op_type()) == OpClass::kOptimizer;
  // Ready steps, hoisted ones first, then by original position: every other step keeps its
  // order, because the earliest one not yet placed is always ready.
  using Key = std::pair<int, std::uint32_t>;
  std::priority_queue<Key, std::vector<Key>, std::greater<>> ready;
  for (std::uint32_t i = 0; i < n; ++i) {
    if (waiting[i] == 0) ready.push({hoist[i] ? 0 : 1, i});
  }
  ReorderResult r;
  r.order.reserve(n);
  while (!ready.empty()) {
    auto [_, step] = ready.top();
    ready.pop();
    if (step != r.order.size()) {
      ++r.moved;
      if (hoist[step] && step > r.order.size()) ++r.hoisted;
    }
    r.order.push_back(step);
    for (auto j : next[step]) {
      if (--waiting[j] == 0) ready.push({hoist[j] ? 0 : 1, j});
    }
  }
  if (r.order.size() != n) return Status::Internal("the step dependencies have a cycle");
  r.schedule = ApplyOrder(s, r.order);
  return r;
}

namespace {

// What running a step does to the memory in use: the bytes it makes, and, given how many steps
// still touch each tensor, the bytes whose last touch it is.
class MemoryEffects {
 public:
  explicit MemoryEffects(const Schedule& s)
      : touches_(static_cast<std::size_t>(s.steps_size())),
        made_(static_cast<std::size_t>(s.steps_size()), 0) {
    remaining_.resize(static_cast<std::size_t>(s.tensors_size()));
    size_.resize(remaining_.size());
    for (const auto& t : s.tensors()) {
      if (t.def_step() < 0) continue;  // persistent: in use throughout, whatever the order
      size_[t.id()] = t.size_bytes();
      made_[static_cast<std::uint32_t>(t.def_step())] += t.size_bytes();
      std::vector<std::uint32_t> steps(t.use_steps().begin(), t.use_steps().end());
      steps.push_back(static_cast<std::uint32_t>(t.def_step()));
      std::sort(steps.begin(), steps.end());
      steps.erase(std::unique(steps.begin(), steps.end()), steps.end());
      remaining_[t.id()] = static_cast<std::uint32_t>(steps.size());
      for (auto step : steps) touches_[step].push_back(t.id());
    }
  }

  // Bytes in use after the step runs, less before it.
  std::int64_t Net(std::uint32_t step) const {
    std::int64_t freed = 0;
    for (auto t : touches_[step]) {
      if (remaining_[t] == 1) freed += static_cast<std::int64_t>(size_[t]);
    }
    return static_cast<std::int64_t>(made_[step]) - freed;
  }
  void Run(std::uint32_t step) {
    for (auto t : touches_[step]) --remaining_[t];
  }

 private:
  std::vector<std::vector<std::uint32_t>> touches_;  // non-persistent tensors, per step
  std::vector<std::uint64_t> made_;
  std::vector<std::uint32_t> remaining_;  // steps still to run that touch it
  std::vector<std::uint64_t> size_;
};

enum class Pick { kLeastNet, kFreeingFirst };

// A list schedule over the dependencies: of the ready steps, the one `pick` prefers.
std::vector<std::uint32_t> ListOrder(const Schedule& s,
                                     const std::vector<std::vector<std::uint32_t>>& deps,
                                     Pick pick) {
  const auto n = static_cast<std::uint32_t>(s.steps_size());
  std::vector<std::vector<std::uint32_t>> next(n);
  std::vector<std::uint32_t> waiting(n);
  for (std::uint32_t i = 0; i < n; ++i) {
    waiting[i] = static_cast<std::uint32_t>(deps[i].size());
    for (auto d : deps[i]) next[d].push_back(i);
  }
  MemoryEffects memory(s);
  std::vector<std::uint32_t> ready;  // ascending original position
  for (std::uint32_t i = 0; i < n; ++i) {
    if (waiting[i] == 0) ready.push_back(i);
  }
  std::vector<std::uint32_t> order;
  order.reserve(n);
  while (!ready.empty()) {
    std::size_t best = 0;  // the earliest ready step, unless another is preferred
    std::int64_t best_net = memory.Net(ready[0]);
    for (std::size_t i = 1; i < ready.size(); ++i) {
      if (pick == Pick::kFreeingFirst && best_net <= 0) break;
      const std::int64_t net = memory.Net(ready[i]);
      if (pick == Pick::kLeastNet ? net < best_net : net <= 0) {
        best = i;
        best_net = net;
        if (pick == Pick::kFreeingFirst) break;
      }
    }
    const std::uint32_t step = ready[best];
    ready.erase(ready.begin() + static_cast<std::ptrdiff_t>(best));
    memory.Run(step);
    order.push_back(step);
    for (auto j : next[step]) {
      if (--waiting[j] == 0) ready.insert(std::upper_bound(ready.begin(), ready.end(), j), j);
    }
  }
  return order;
}

}  // namespace

Result<ReorderResult> LowerPeakOrder(const Schedule& s,
                                     const std::function<bool(const Schedule&)>& acceptable) {
  if (Status st = Validate(s); !st.ok()) return st;
  const auto n = static_cast<std::uint32_t>(s.steps_size());
  const auto deps = StepDependencies(s);
  ReorderResult best;
  best.order.resize(n);
  for (std::uint32_t i = 0; i < n; ++i) best.order[i] = i;
  std::uint64_t best_peak = Lifetimes(s).peak_bytes();
  for (Pick pick : {Pick::kLeastNet, Pick::kFreeingFirst}) {
    std::vector<std::uint32_t> order = ListOrder(s, deps, pick);
    if (order.size() != n) return Status::Internal("the step dependencies have a cycle");
    Schedule candidate = ApplyOrder(s, order);
    const std::uint64_t peak = Lifetimes(candidate).peak_bytes();
    if (peak < best_peak && (!acceptable || acceptable(candidate))) {
      best_peak = peak;
      best.order = std::move(order);
      best.schedule = std::move(candidate);
    }
  }
  best.moved = 0;
  for (std::uint32_t i = 0; i < n; ++i) best.moved += best.order[i] != i ? 1 : 0;
  if (best.moved == 0) best.schedule = s;
  return best;
}

}  // namespace tierpool::prefetch
