#include "prefetch/planner.h"

#include <algorithm>
#include <limits>
#include <map>
#include <set>

#include "common/units.h"

namespace tierpool::prefetch {

Status PlannerConfig::validate() const {
  if (hbm_budget == 0) return Status::InvalidArgument("hbm budget must be > 0");
  if (!(prefetch_margin >= 1.0 && prefetch_margin <= 100)) {
    return Status::InvalidArgument("prefetch margin must be in [1, 100]");
  }
  return Status::Ok();
}

namespace {

constexpr std::int64_t kNever = std::numeric_limits<std::int64_t>::max();

struct Occurrence {
  std::int64_t window;  // first step it must be resident for this occurrence
  std::int64_t step;    // the use (or def)
};

struct TensorState {
  std::vector<Occurrence> occ;  // over the whole planned timeline, ascending
  std::size_t next = 0;         // index of the next occurrence not yet reached
  bool resident = false;
  bool dirty = false;  // hbm holds the only current copy
  std::int64_t last_touch = -1;
  std::int64_t resident_since = -1;
  std::vector<std::pair<std::int64_t, std::int64_t>> intervals;  // [from, to] steps resident
};

}  // namespace

Result<schedule::Plan> BuildPlan(const Schedule& s, const Lifetimes& lt, const DeviceProfile& d,
                                 const PlannerConfig& config) {
  TIERPOOL_RETURN_IF_ERROR(config.validate());
  const std::int64_t n = lt.steps();
  // A repeating schedule is planned over five iterations and the middle one is kept: the cold
  // start is two iterations behind it, and every decision that takes effect in it (evictions are
  // decided later, when room is needed) still sees two iterations of real future.
  const int iterations = s.repeats() ? 5 : 1;
  const int kept = s.repeats() ? 2 : 0;
  const std::int64_t total = n * iterations;
  const std::size_t nt = static_cast<std::size_t>(s.tensors_size());

  // Start time of every step on the planned timeline, from the compute estimates.
  std::vector<double> start(static_cast<std::size_t>(total) + 1, 0.0);
  for (std::int64_t g = 0; g < total; ++g) {
    start[static_cast<std::size_t>(g + 1)] =
        start[static_cast<std::size_t>(g)] + s.steps(static_cast<int>(g % n)).compute_us();
  }
  auto window_for = [&](std::uint64_t bytes, std::int64_t use, std::int64_t prev) {
    double need = (d.link_latency_us + static_cast<double>(bytes) / (d.h2d_gbps * 1e3)) *
                  config.prefetch_margin;
    // Latest step w with start[use] - start[w] >= need.
    double target = start[static_cast<std::size_t>(use)] - need;
    auto it = std::upper_bound(start.begin(), start.begin() + use + 1, target);
    std::int64_t w = static_cast<std::int64_t>(it - start.begin()) - 1;
    return std::max<std::int64_t>({w, prev + 1, 0});
  };

  std::vector<TensorState> ts(nt);
  std::vector<std::vector<std::uint32_t>> windows_at(static_cast<std::size_t>(total));
  std::vector<std::vector<std::uint32_t>> defs_at(static_cast<std::size_t>(total));
  std::vector<std::vector<std::uint32_t>> touch_at(static_cast<std::size_t>(total));
  std::vector<std::vector<std::uint32_t>> update_at(static_cast<std::size_t>(n));
  for (std::size_t t = 0; t < nt; ++t) {
    const auto& tensor = s.tensors(static_cast<int>(t));
    auto& st = ts[t];
    std::int64_t prev = -1;
    for (int k = 0; k < iterations; ++k) {
      std::int64_t base = static_cast<std::int64_t>(k) * n;
      if (!lt.persistent(static_cast<std::uint32_t>(t))) {
        std::int64_t def = base + lt.def(static_cast<std::uint32_t>(t));
        st.occ.push_back({def, def});
        defs_at[static_cast<std::size_t>(def)].push_back(static_cast<std::uint32_t>(t));
        prev = def;
      }
      for (auto u : lt.uses(static_cast<std::uint32_t>(t))) {
        std::int64_t g = base + u;
        std::int64_t w = window_for(tensor.size_bytes(), g, prev);
        st.occ.push_back({w, g});
        prev = g;
      }
      if (!lt.persistent(static_cast<std::uint32_t>(t))) prev = -1;  // a fresh instance
    }
    for (const auto& o : st.occ) {
      if (o.window != o.step || lt.persistent(static_cast<std::uint32_t>(t))) {
        windows_at[static_cast<std::size_t>(o.window)].push_back(static_cast<std::uint32_t>(t));
      }
      touch_at[static_cast<std::size_t>(o.step)].push_back(static_cast<std::uint32_t>(t));
    }
    for (auto u : tensor.update_steps()) update_at[u].push_back(static_cast<std::uint32_t>(t));
  }

  schedule::Plan plan;
  plan.set_format_version(1);
  plan.set_schedule(s.name());
  plan.set_hbm_budget_bytes(config.hbm_budget);
  plan.set_device(d.name);
  const std::int64_t keep_from = kept * n, keep_to = keep_from + n;

  // Actions belong to the kept iteration when the use they serve (prefetch) or the point they
  // take effect (offload, free) falls in it; a prefetch whose window opens in the previous
  // iteration is issued at that step of every iteration, for the next one's use.
  struct Pending {
    schedule::ActionKind kind;
    std::uint32_t tensor;
    std::int64_t at;   // the step it is issued at (global)
    std::int64_t use;  // prefetch: the use it serves; else == at
  };
  std::vector<Pending> pending;

  // Resident tensors keyed by the start of their next window: the largest is the eviction victim.
  std::set<std::pair<std::int64_t, std::uint32_t>> by_next;
  auto key = [&](std::uint32_t t) {
    const auto& st = ts[t];
    return st.next < st.occ.size() ? st.occ[st.next].window : kNever;
  };
  std::uint64_t occupancy = 0;
  auto size_of = [&](std::uint32_t t) { return s.tensors(static_cast<int>(t)).size_bytes(); };
  auto make_resident = [&](std::uint32_t t, std::int64_t g, bool dirty) {
    auto& st = ts[t];
    st.resident = true;
    st.dirty = dirty;
    st.resident_since = g;
    occupancy += size_of(t);
    by_next.insert({key(t), t});
  };
  auto drop = [&](std::uint32_t t, std::int64_t after_step) {
    auto& st = ts[t];
    by_next.erase({key(t), t});
    st.resident = false;
    occupancy -= size_of(t);
    st.intervals.emplace_back(st.resident_since, after_step);
  };

  for (std::int64_t g = 0; g < total; ++g) {
    // 1. What must be resident from this step on: windows opening, tensors defined.
    std::vector<std::uint32_t> loads;
    for (auto t : windows_at[static_cast<std::size_t>(g)]) {
      // A deferred load can be listed twice for one step; it loads once.
      if (!ts[t].resident && std::find(loads.begin(), loads.end(), t) == loads.end()) {
        loads.push_back(t);
      }
    }
    std::uint64_t adding = 0;
    for (auto t : loads) adding += size_of(t);
    for (auto t : defs_at[static_cast<std::size_t>(g)]) adding += size_of(t);
    // 2. Make room: evict what is needed farthest in the future. When nothing can go, a load
    // for a later step waits a step (its prefetch starts later, and may stall); only what this
    // step itself needs cannot wait.
    std::sort(loads.begin(), loads.end(), [&](std::uint32_t a, std::uint32_t b) {
      return ts[a].occ[ts[a].next].step < ts[b].occ[ts[b].next].step;
    });
    while (occupancy + adding > config.hbm_budget) {
      if (by_next.empty() || by_next.rbegin()->first <= g) {
        if (!loads.empty() && ts[loads.back()].occ[ts[loads.back()].next].step > g) {
          std::uint32_t t = loads.back();
          loads.pop_back();
          adding -= size_of(t);
          ts[t].occ[ts[t].next].window = g + 1;
          windows_at[static_cast<std::size_t>(g + 1)].push_back(t);
          continue;
        }
        // Last resort: a resident tensor already in its prefetch window but not used by this
        // step goes out and comes back later (its window reopens next step; it may stall).
        std::uint32_t late = static_cast<std::uint32_t>(nt);
        std::int64_t late_use = g;
        for (const auto& [k, t] : by_next) {
          const auto& st = ts[t];
          if (st.next < st.occ.size() && st.occ[st.next].step > late_use) {
            late_use = st.occ[st.next].step;
            late = t;
          }
        }
        if (late < nt) {
          auto& ls = ts[late];
          bool prefetched_unused = ls.resident_since > ls.last_touch && !ls.dirty;
          if (prefetched_unused) {
            // It came in for this use and has not been used: take the prefetch back instead.
            for (auto it = pending.rbegin(); it != pending.rend(); ++it) {
              if (it->tensor == late && it->kind == schedule::PREFETCH &&
                  it->at == ls.resident_since) {
                pending.erase(std::next(it).base());
                break;
              }
            }
            by_next.erase({key(late), late});
            ls.resident = false;
            occupancy -= size_of(late);
          } else {
            std::int64_t after = std::max<std::int64_t>(ls.last_touch, ls.resident_since);
            if (after < 0) after = g - 1;
            if (after >= 0) {
              pending.push_back(
                  {ls.dirty ? schedule::OFFLOAD : schedule::FREE, late, after, after});
            }
            ls.dirty = false;
            drop(late, after);
          }
          ls.occ[ls.next].window = g + 1;
          windows_at[static_cast<std::size_t>(g + 1)].push_back(late);
          continue;
        }
        return Status::FailedPrecondition("hbm budget " + FormatBytes(config.hbm_budget) +
                                          " is below what step " + std::to_string(g % n) + " (" +
                                          s.steps(static_cast<int>(g % n)).name() +
                                          ") needs at once: " + FormatBytes(occupancy + adding));
      }
      // Among the farthest-needed few, prefer one that is free to drop (clean) or whose copy-out
      // finishes within its idle gap; else the farthest.
      std::uint32_t victim = by_next.rbegin()->second;
      int looked = 0;
      for (auto it = by_next.rbegin(); it != by_next.rend() && it->first > g && looked < 16;
           ++it, ++looked) {
        const auto& c = ts[it->second];
        std::int64_t after = std::max<std::int64_t>(c.last_touch, c.resident_since);
        double idle = after < 0 ? 0
                                : start[static_cast<std::size_t>(g)] -
                                      start[static_cast<std::size_t>(after + 1)];
        double out_us =
            d.link_latency_us + static_cast<double>(size_of(it->second)) / (d.d2h_gbps * 1e3);
        if (!c.dirty || idle >= out_us) {
          victim = it->second;
          break;
        }
      }
      auto& vs = ts[victim];
      // The copy-out goes right after the victim's last touch, so it has the idle gap to run.
      std::int64_t after = std::max<std::int64_t>(vs.last_touch, vs.resident_since);
      if (after < 0) after = g - 1;  // resident before anything touched it: drop now
      if (after >= 0) {
        pending.push_back({vs.dirty ? schedule::OFFLOAD : schedule::FREE, victim, after, after});
      }
      vs.dirty = false;  // the host holds a current copy now
      drop(victim, after);
    }
    for (auto t : loads) {
      pending.push_back({schedule::PREFETCH, t, g, ts[t].occ[ts[t].next].step});
      make_resident(t, g, false);
    }
    for (auto t : defs_at[static_cast<std::size_t>(g)]) make_resident(t, g, true);
    // 3. The step runs; touched tensors move on to their next occurrence.
    for (auto t : touch_at[static_cast<std::size_t>(g)]) {
      auto& st = ts[t];
      if (st.resident) by_next.erase({key(t), t});
      while (st.next < st.occ.size() && st.occ[st.next].step <= g) ++st.next;
      st.last_touch = g;
      if (st.resident) by_next.insert({key(t), t});
    }
    for (auto t : update_at[static_cast<std::size_t>(g % n)]) ts[t].dirty = true;
    // 4. Dead tensors (last touch of this instance) are freed after the step.
    for (auto t : touch_at[static_cast<std::size_t>(g)]) {
      auto& st = ts[t];
      if (lt.persistent(t) || !st.resident) continue;
      // Each iteration defines a fresh instance: this one is done when nothing of it is left in
      // this iteration.
      if (st.next >= st.occ.size() || st.occ[st.next].step / n != g / n) drop(t, g);
    }
  }
  for (std::size_t t = 0; t < nt; ++t) {
    if (ts[t].resident) ts[t].intervals.emplace_back(ts[t].resident_since, total);
  }
  std::sort(pending.begin(), pending.end(),
            [](const Pending& a, const Pending& b) { return a.at < b.at; });
  for (const auto& pa : pending) {
    if (pa.use < keep_from || pa.use >= keep_to) continue;
    auto* a = plan.add_actions();
    a->set_kind(pa.kind);
    a->set_tensor(pa.tensor);
    a->set_step(static_cast<std::uint32_t>(pa.at % n));
    a->set_after(pa.kind != schedule::PREFETCH);
    if (pa.kind == schedule::PREFETCH) a->set_needed_by(static_cast<std::uint32_t>(pa.use % n));
  }

  // Occupancy over the kept iteration, and what is resident when it starts.
  std::vector<std::int64_t> delta(static_cast<std::size_t>(total) + 2, 0);
  for (std::size_t t = 0; t < nt; ++t) {
    for (auto [from, to] : ts[t].intervals) {
      auto sz = static_cast<std::int64_t>(size_of(static_cast<std::uint32_t>(t)));
      delta[static_cast<std::size_t>(from)] += sz;
      delta[static_cast<std::size_t>(to) + 1] -= sz;
      if (from < keep_from && to >= keep_from) {
        plan.add_resident_at_start(static_cast<std::uint32_t>(t));
      }
    }
  }
  std::int64_t running = 0, peak = 0;
  for (std::int64_t g = 0; g < keep_to; ++g) {
    running += delta[static_cast<std::size_t>(g)];
    if (g >= keep_from) peak = std::max(peak, running);
  }
  plan.set_predicted_peak_bytes(static_cast<std::uint64_t>(peak));
  return plan;
}

}  // namespace tierpool::prefetch
