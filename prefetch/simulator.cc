#include "prefetch/simulator.h"

#include <algorithm>
#include <deque>
#include <limits>
#include <map>

#include "common/units.h"

namespace tierpool::prefetch {

Result<Policy> ParsePolicy(const std::string& name) {
  if (name == "none") return Policy::kNone;
  if (name == "reactive-lru") return Policy::kReactiveLru;
  if (name == "planned") return Policy::kPlanned;
  return Status::InvalidArgument("unknown policy '" + name + "' (none, reactive-lru, planned)");
}

std::string PolicyName(Policy p) {
  switch (p) {
    case Policy::kNone:
      return "none";
    case Policy::kReactiveLru:
      return "reactive-lru";
    case Policy::kPlanned:
      return "planned";
  }
  return "?";
}

namespace {

enum class Where { kHost, kHbm, kIn, kOut };

struct Transfer {
  std::uint32_t tensor;
  double remaining;  // bytes, latency included as bytes at the link's rate
  double started;    // when it reached the head of its link's queue
};

class Simulation {
 public:
  Simulation(const Schedule& s, const Lifetimes& lt, const DeviceProfile& d, const ReplayOptions& o)
      : s_(s), lt_(lt), d_(d), o_(o), n_(static_cast<std::uint32_t>(s.tensors_size())) {
    budget_ = o.policy == Policy::kNone ? std::numeric_limits<std::uint64_t>::max() : o.hbm_budget;
    where_.assign(n_, Where::kHost);
    dirty_.assign(n_, false);
    stays_.assign(n_, false);
    updated_during_out_.assign(n_, false);
    alive_.assign(n_, false);
    last_access_.assign(n_, -1.0);
    rate_[0] = d.h2d_gbps * 1e3;  // bytes per microsecond
    rate_[1] = d.d2h_gbps * 1e3;
    for (std::uint32_t t = 0; t < n_; ++t) {
      if (lt.persistent(t)) {
        alive_[t] = true;
        host_bytes_ += size(t);
      }
    }
    if (o.policy == Policy::kPlanned) {
      for (const auto& a : o.plan->actions()) {
        (a.after() ? actions_after_ : actions_before_)[a.step()].push_back(&a);
      }
    }
    std::vector<std::uint32_t> start_resident;
    if (o.policy == Policy::kNone) {
      for (std::uint32_t t = 0; t < n_; ++t) {
        if (lt.persistent(t)) start_resident.push_back(t);
      }
    } else if (o.policy == Policy::kPlanned) {
      start_resident.assign(o.plan->resident_at_start().begin(), o.plan->resident_at_start().end());
    }
    for (auto t : start_resident) {
      if (t < n_ && lt.persistent(t) && where_[t] == Where::kHost) {
        where_[t] = Where::kHbm;
        Hold(t);
      }
    }
  }

  ReplayReport Run() {
    const int iterations = s_.repeats() ? 2 : 1;
    double iter_start = 0;
    for (int k = 0; k < iterations; ++k) {
      measuring_ = k == iterations - 1;
      if (measuring_) {
        iter_start = now_;
        r_.peak_hbm = occupancy_;
        Counter();
      }
      for (std::uint32_t i = 0; i < lt_.steps(); ++i) Step(i);
    }
    // Transfers still running when the last step ends serve the next iteration and overlap it.
    r_.policy = PolicyName(o_.policy);
    r_.budget = o_.policy == Policy::kNone ? 0 : budget_;
    r_.time_us = now_ - iter_start;
    for (const auto& st : s_.steps()) r_.compute_us += st.compute_us();
    if (o_.policy != Policy::kNone && lt_.peak_bytes() > budget_) {
      double excess = static_cast<double>(lt_.peak_bytes() - budget_);
      r_.stall_lower_bound_us =
          std::max(0.0, excess / rate_[0] - r_.compute_us);  // it must come back once
    }
    return std::move(r_);
  }

 private:
  std::uint64_t size(std::uint32_t t) const { return s_.tensors(static_cast<int>(t)).size_bytes(); }
  const std::string& name(std::uint32_t t) const { return s_.tensors(static_cast<int>(t)).name(); }

  void Problem(std::uint64_t* counter, const std::string& what) {
    ++*counter;
    if (r_.problems.size() < 20) r_.problems.push_back(what);
  }

  void Counter() {
    if (!measuring_ || !o_.record_timeline) return;
    r_.timeline.push_back(
        {TimelineEvent::Kind::kHbmBytes, now_, 0, "hbm", static_cast<double>(occupancy_)});
    r_.timeline.push_back(
        {TimelineEvent::Kind::kHostBytes, now_, 0, "host", static_cast<double>(host_bytes_)});
  }

  void Hold(std::uint32_t t) {
    occupancy_ += size(t);
    if (occupancy_ > budget_ && o_.policy != Policy::kNone) {
      Problem(&r_.budget_violations, "hbm at " + FormatBytes(occupancy_) + " over the budget " +
                                         FormatBytes(budget_) + " when " + name(t) + " came in");
    }
    if (measuring_) r_.peak_hbm = std::max(r_.peak_hbm, occupancy_);
    Counter();
  }
  void Release(std::uint32_t t) {
    occupancy_ -= size(t);
    Counter();
  }

  // ---- links ----
  // Each direction is one copy stream: transfers run one at a time, in the order issued, at the
  // link's full rate (a copy engine working through its queue).
  double NextCompletion() const {
    double best = std::numeric_limits<double>::infinity();
    for (int l = 0; l < 2; ++l) {
      if (!links_[l].empty()) best = std::min(best, now_ + links_[l].front().remaining / rate_[l]);
    }
    return best;
  }

  void AdvanceTo(double t) {
    for (;;) {
      double next = NextCompletion();
      double until = std::min(next, t);
      // The head that finishes first is completed explicitly: at large times
      // now_ + (tiny remaining / rate) == now_, and rounding would leave it running forever.
      int first_link = -1;
      double first_time = std::numeric_limits<double>::infinity();
      for (int l = 0; l < 2; ++l) {
        if (links_[l].empty()) continue;
        double done_at = now_ + links_[l].front().remaining / rate_[l];
        if (done_at < first_time) {
          first_time = done_at;
          first_link = l;
        }
        links_[l].front().remaining -= rate_[l] * (until - now_);
      }
      now_ = until;
      if (next > t) return;
      if (first_link >= 0) links_[first_link].front().remaining = 0;
      for (int l = 0; l < 2; ++l) {
        auto& link = links_[l];
        while (!link.empty() && link.front().remaining <= 1.0) {  // within a byte
          Transfer tr = link.front();
          link.pop_front();
          if (!link.empty()) link.front().started = now_;
          Complete(l, tr);
        }
      }
    }
  }

  // Advances to completions until pred holds; the wait is stall. False if nothing can change.
  template <typename Pred>
  bool WaitUntil(Pred pred, const char* why = "stall") {
    double t0 = now_;
    while (!pred()) {
      double next = NextCompletion();
      if (next == std::numeric_limits<double>::infinity()) break;
      AdvanceTo(next);
    }
    Stall(t0, why);
    return pred();
  }
  void Stall(double t0, const char* why) {
    if (now_ <= t0 || !measuring_) return;
    r_.stall_us += now_ - t0;
    if (o_.record_timeline)
      r_.timeline.push_back({TimelineEvent::Kind::kStall, t0, now_ - t0, why});
  }

  void StartTransfer(std::uint32_t t, bool h2d) {
    int l = h2d ? 0 : 1;
    // Queued behind others, its start is set when it reaches the head.
    links_[l].push_back({t, static_cast<double>(size(t)) + d_.link_latency_us * rate_[l], now_});
    if (measuring_) {
      (h2d ? r_.h2d_bytes : r_.d2h_bytes) += size(t);
      ++r_.actions;
    }
  }

  void Complete(int link, const Transfer& tr) {
    std::uint32_t t = tr.tensor;
    if (measuring_ && o_.record_timeline) {
      r_.timeline.push_back({link == 0 ? TimelineEvent::Kind::kH2D : TimelineEvent::Kind::kD2H,
                             tr.started, now_ - tr.started, name(t)});
    }
    if (link == 0) {
      where_[t] = Where::kHbm;
      dirty_[t] = false;
    } else if (stays_[t]) {
      // Copied out while wanted back in hbm: it stays, and is clean unless updated meanwhile.
      stays_[t] = false;
      dirty_[t] = updated_during_out_[t];
      updated_during_out_[t] = false;
    } else {
      ToHost(t);
    }
  }

  // ---- memory ----
  // Room for bytes: reactive-lru evicts least recently used (copying dirty ones out and waiting);
  // the others wait for offloads already under way.
  void MakeRoom(std::uint64_t bytes, const std::vector<std::uint32_t>& keep) {
    if (occupancy_ + bytes <= budget_) return;
    if (o_.policy == Policy::kReactiveLru) {
      while (occupancy_ + bytes > budget_) {
        std::uint32_t victim = n_;
        for (std::uint32_t t = 0; t < n_; ++t) {
          if (where_[t] != Where::kHbm) continue;
          if (std::find(keep.begin(), keep.end(), t) != keep.end()) continue;
          if (victim == n_ || last_access_[t] < last_access_[victim]) victim = t;
        }
        if (victim == n_) {
          if (!WaitUntil([&] { return occupancy_ + bytes <= budget_; }, "stall: room")) return;
          continue;
        }
        if (dirty_[victim]) {
          where_[victim] = Where::kOut;
          StartTransfer(victim, false);
          WaitUntil([&] { return where_[victim] == Where::kHost; }, "stall: evicting");
        } else {
          ToHost(victim);
          if (measuring_) ++r_.actions;
        }
      }
      return;
    }
    WaitUntil([&] { return occupancy_ + bytes <= budget_; }, "stall: room (offloads in flight)");
  }

  // A tensor whose host copy is current leaves hbm: its room is free, the host holds it.
  void ToHost(std::uint32_t t) {
    where_[t] = Where::kHost;
    dirty_[t] = false;
    Release(t);
    if (alive_[t] && !lt_.persistent(t)) host_bytes_ += size(t);
    Counter();
  }

  void Fetch(std::uint32_t t, const std::vector<std::uint32_t>& keep) {
    MakeRoom(size(t), keep);
    where_[t] = Where::kIn;
    Hold(t);
    if (!lt_.persistent(t)) host_bytes_ -= size(t);
    StartTransfer(t, true);
  }

  bool Alive(std::uint32_t t, const char* action, std::uint32_t step) {
    if (t >= n_ || !alive_[t]) {
      Problem(&r_.bad_actions, std::string(action) + " of " +
                                   (t < n_ ? name(t) : std::to_string(t)) + " at step " +
                                   std::to_string(step) + ", which is not alive then");
      return false;
    }
    return true;
  }

  void Step(std::uint32_t i) {
    // Plan actions issued as the step starts; those with a delay wait for their moment during
    // the step's compute.
    std::vector<const schedule::Action*> delayed;
    if (o_.policy == Policy::kPlanned) {
      for (const auto* a : actions_before_[i]) {
        if (a->delay_us() > 0) {
          delayed.push_back(a);
        } else {
          DoAction(*a, i);
        }
      }
      std::stable_sort(delayed.begin(), delayed.end(),
                       [](const auto* a, const auto* b) { return a->delay_us() < b->delay_us(); });
    }
    // What the step touches must be in hbm.
    std::vector<std::uint32_t> needs = lt_.used_at(i);
    for (auto t : needs) {
      if (where_[t] == Where::kIn) {
        WaitUntil([&] { return where_[t] != Where::kIn; }, "stall: prefetch late");
      }
      if (where_[t] == Where::kOut) {
        if (o_.policy == Policy::kPlanned) {
          Problem(&r_.missing_at_use,
                  name(t) + " is being offloaded when step " + std::to_string(i) + " needs it");
        }
        WaitUntil([&] { return where_[t] != Where::kOut; }, "stall: offload of a needed tensor");
      }
      if (where_[t] == Where::kHost) {
        if (o_.policy == Policy::kPlanned) {
          Problem(&r_.missing_at_use, name(t) + " is not in hbm when step " + std::to_string(i) +
                                          " (" + s_.steps(static_cast<int>(i)).name() +
                                          ") needs it");
        }
        Fetch(t, needs);
        WaitUntil([&] { return where_[t] == Where::kHbm; }, "stall: fetch on demand");
      }
    }
    for (auto t : lt_.defined_at(i)) {
      MakeRoom(size(t), needs);
      alive_[t] = true;
      where_[t] = Where::kHbm;
      dirty_[t] = true;
      Hold(t);
      needs.push_back(t);
    }
    // Compute, while the links keep moving.
    double c = s_.steps(static_cast<int>(i)).compute_us();
    if (measuring_ && o_.record_timeline) {
      r_.timeline.push_back(
          {TimelineEvent::Kind::kCompute, now_, c, s_.steps(static_cast<int>(i)).name()});
    }
    const double step_start = now_;
    std::vector<const schedule::Action*> no_room;
    for (const auto* a : delayed) {
      AdvanceTo(std::min(step_start + a->delay_us(), step_start + c));
      std::uint32_t t = a->tensor();
      if (t < n_ && where_[t] == Where::kHost && alive_[t] && occupancy_ + size(t) > budget_) {
        no_room.push_back(a);  // compute does not wait for it: it goes when the step ends
        continue;
      }
      DoAction(*a, i);
    }
    AdvanceTo(step_start + c);
    for (const auto* a : no_room) DoAction(*a, i);
    for (auto t : needs) last_access_[t] = now_;
    for (auto u : updates_at(i)) {
      dirty_[u] = true;
      if (stays_[u]) updated_during_out_[u] = true;
    }
    // Dead tensors go.
    for (auto t : needs) {
      if (lt_.persistent(t) || lt_.last_touch(t) != i || !alive_[t]) continue;
      alive_[t] = false;
      if (where_[t] == Where::kHbm) {
        Release(t);
      } else if (where_[t] == Where::kHost) {
        host_bytes_ -= size(t);
      }
      where_[t] = Where::kHost;
      dirty_[t] = false;
    }
    if (o_.policy == Policy::kPlanned) {
      for (const auto* a : actions_after_[i]) DoAction(*a, i);
    }
  }

  const std::vector<std::uint32_t>& updates_at(std::uint32_t i) {
    if (updates_.empty()) {
      updates_.resize(lt_.steps());
      for (const auto& t : s_.tensors()) {
        for (auto u : t.update_steps()) updates_[u].push_back(t.id());
      }
    }
    return updates_[i];
  }

  void DoAction(const schedule::Action& a, std::uint32_t step) {
    std::uint32_t t = a.tensor();
    switch (a.kind()) {
      case schedule::PREFETCH:
        if (!Alive(t, "prefetch", step)) return;
        if (where_[t] == Where::kOut) {
          // Still being copied out, so its bytes are still in hbm: keep them there, and let the
          // copy finish (the host then holds a current copy too).
          where_[t] = Where::kHbm;
          stays_[t] = true;
          return;
        }
        if (where_[t] == Where::kHost) Fetch(t, {});
        return;
      case schedule::OFFLOAD:
      case schedule::FREE:
        if (!Alive(t, a.kind() == schedule::FREE ? "free" : "offload", step)) return;
        if (where_[t] == Where::kIn) {
          WaitUntil([&] { return where_[t] != Where::kIn; }, "stall: transfer order");
        }
        if (stays_[t]) {  // its earlier copy-out is still running: transfers run in order
          WaitUntil([&] { return !stays_[t]; }, "stall: transfer order");
        }
        if (where_[t] != Where::kHbm) return;  // already out: nothing to do
        if (dirty_[t]) {
          if (a.kind() == schedule::FREE) {
            Problem(&r_.bad_actions, "free of " + name(t) + " at step " + std::to_string(step) +
                                         " would lose its only current copy");
            return;
          }
          where_[t] = Where::kOut;
          StartTransfer(t, false);
        } else {
          ToHost(t);
          if (measuring_) ++r_.actions;
        }
        return;
      default:
        Problem(&r_.bad_actions, "unknown action kind");
    }
  }

  const Schedule& s_;
  const Lifetimes& lt_;
  const DeviceProfile& d_;
  const ReplayOptions& o_;
  const std::uint32_t n_;
  std::uint64_t budget_;
  std::vector<Where> where_;
  std::vector<bool> dirty_, alive_;
  std::vector<bool> stays_, updated_during_out_;  // copy-out under way for a tensor kept in hbm
  std::vector<double> last_access_;
  std::deque<Transfer> links_[2];
  double rate_[2];
  double now_ = 0;
  std::uint64_t occupancy_ = 0;
  std::uint64_t host_bytes_ = 0;
  bool measuring_ = false;
  std::map<std::uint32_t, std::vector<const schedule::Action*>> actions_before_, actions_after_;
  std::vector<std::vector<std::uint32_t>> updates_;
  ReplayReport r_;
};

}  // namespace

Result<ReplayReport> Replay(const Schedule& s, const Lifetimes& lt, const DeviceProfile& d,
                            const ReplayOptions& options) {
  if (options.policy != Policy::kNone && options.hbm_budget == 0) {
    return Status::InvalidArgument("policy " + PolicyName(options.policy) + " needs an hbm budget");
  }
  if (options.policy == Policy::kPlanned && options.plan == nullptr) {
    return Status::InvalidArgument("the planned policy needs a plan");
  }
  if (options.plan != nullptr) {
    for (const auto& a : options.plan->actions()) {
      if (a.step() >= lt.steps() || a.tensor() >= static_cast<std::uint32_t>(s.tensors_size())) {
        return Status::InvalidArgument("plan action names a step or tensor outside the schedule");
      }
    }
  }
  Simulation sim(s, lt, d, options);
  return sim.Run();
}

}  // namespace tierpool::prefetch
