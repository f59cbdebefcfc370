#include "prefetch/simulator.h"

#include <algorithm>
#include <deque>
#include <limits>
#include <map>
#include <tuple>

#include "common/units.h"
#include "prefetch/recompute.h"

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
    queued_.assign(n_, false);
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
        iter_start = iter_start_ = now_;
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
    if (o_.policy != Policy::kNone && o_.lower_bound) {
      r_.stall_lower_bound_us = StallLowerBound(s_, lt_, d_, budget_);
    }
    NameStallCauses();
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
    IssueWaiting();
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

  // What a stall waits for (the timeline's name for it), and the link it waits on, if one.
  struct Wait {
    const char* why;
    const char* link;
  };
  static constexpr Wait kRoom{"stall: room", ""};
  static constexpr Wait kEvicting{"stall: evicting", "hbm->host"};
  static constexpr Wait kRoomOffloading{"stall: room (offloads in flight)", "hbm->host"};
  static constexpr Wait kPrefetchLate{"stall: prefetch late", "host->hbm"};
  static constexpr Wait kOffloadOfNeeded{"stall: offload of a needed tensor", "hbm->host"};
  static constexpr Wait kFetchOnDemand{"stall: fetch on demand", "host->hbm"};
  static constexpr Wait kTransferOrder{"stall: transfer order", ""};

  // Advances to completions until pred holds; the wait is stall. False if nothing can change.
  // `tensor`: the one waited for, where there is one (the stall's cause is then named by it).
  template <typename Pred>
  bool WaitUntil(Pred pred, const Wait& why, std::uint32_t tensor = kNoTensor) {
    double t0 = now_;
    while (!pred()) {
      double next = NextCompletion();
      if (next == std::numeric_limits<double>::infinity()) break;
      AdvanceTo(next);
    }
    Stall(t0, why, tensor);
    return pred();
  }
  void Stall(double t0, const Wait& why, std::uint32_t tensor) {
    if (now_ <= t0 || !measuring_) return;
    r_.stall_us += now_ - t0;
    if (o_.name_stall_causes) {
      auto& cause = causes_[{&why, tensor}];
      if (cause.us == 0) cause.step = step_;
      cause.us += now_ - t0;
    }
    if (o_.record_timeline)
      r_.timeline.push_back({TimelineEvent::Kind::kStall, t0, now_ - t0, why.why});
  }
  static constexpr std::uint32_t kNoTensor = std::numeric_limits<std::uint32_t>::max();
  struct CauseTotal {
    double us = 0;
    std::uint32_t step = 0;  // where it first stalled
  };
  std::map<std::pair<const Wait*, std::uint32_t>, CauseTotal> causes_;
  std::uint32_t step_ = 0;  // the step running (or about to)

  // The largest causes of the measured iteration's stall, into the report.
  void NameStallCauses() {
    std::vector<StallCause> all;
    for (const auto& [key, total] : causes_) {
      StallCause c;
      c.why = key.first->why;
      c.link = key.first->link;
      c.tensor = key.second == kNoTensor ? "" : name(key.second);
      if (key.second != kNoTensor) c.bytes = s_.tensors(static_cast<int>(key.second)).size_bytes();
      c.step = total.step;
      c.step_name = s_.steps(static_cast<int>(total.step)).name();
      c.us = total.us;
      all.push_back(std::move(c));
    }
    // Largest first; ties in the order they began (the map's order is of addresses).
    std::sort(all.begin(), all.end(), [](const auto& a, const auto& b) {
      return std::tie(b.us, a.step, a.why, a.tensor) < std::tie(a.us, b.step, b.why, b.tensor);
    });
    if (all.size() > kStallCauses) all.resize(kStallCauses);
    r_.stall_causes = std::move(all);
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
          if (!WaitUntil([&] { return occupancy_ + bytes <= budget_; }, kRoom)) return;
          continue;
        }
        if (dirty_[victim]) {
          where_[victim] = Where::kOut;
          StartTransfer(victim, false);
          WaitUntil([&] { return where_[victim] == Where::kHost; }, kEvicting, victim);
        } else {
          ToHost(victim);
          if (measuring_) ++r_.actions;
        }
      }
      return;
    }
    // The compute stream's need comes first: queued prefetches wait until it is met.
    reserved_ = bytes;
    WaitUntil([&] { return occupancy_ + bytes <= budget_; }, kRoomOffloading);
    reserved_ = 0;
  }

  // Planned prefetches that found no room wait here, in plan order, and go as soon as room
  // comes free (a copy-out finishing, a dead tensor freed); compute does not wait for them
  // unless a step needs one.
  void IssueWaiting() {
    while (!waiting_.empty()) {
      std::uint32_t t = waiting_.front();
      if (occupancy_ + reserved_ + size(t) > budget_) return;
      waiting_.pop_front();
      queued_[t] = false;
      if (where_[t] == Where::kHost && alive_[t]) Fetch(t, {});
    }
  }
  void Unqueue(std::uint32_t t) {
    if (!queued_[t]) return;
    queued_[t] = false;
    waiting_.erase(std::find(waiting_.begin(), waiting_.end(), t));
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
    step_ = i;
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
      if (queued_[t]) {  // its prefetch is still waiting for room: it goes now, first
        Unqueue(t);
        Fetch(t, needs);
      }
      if (where_[t] == Where::kIn) {
        WaitUntil([&] { return where_[t] != Where::kIn; }, kPrefetchLate, t);
      }
      if (where_[t] == Where::kOut) {
        if (o_.policy == Policy::kPlanned) {
          Problem(&r_.missing_at_use,
                  name(t) + " is being offloaded when step " + std::to_string(i) + " needs it");
        }
        WaitUntil([&] { return where_[t] != Where::kOut; }, kOffloadOfNeeded, t);
      }
      if (where_[t] == Where::kHost) {
        if (o_.policy == Policy::kPlanned) {
          Problem(&r_.missing_at_use, name(t) + " is not in hbm when step " + std::to_string(i) +
                                          " (" + s_.steps(static_cast<int>(i)).name() +
                                          ") needs it");
        }
        Fetch(t, needs);
        WaitUntil([&] { return where_[t] == Where::kHbm; }, kFetchOnDemand, t);
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
    if (measuring_) r_.compute_start_us.push_back(now_ - iter_start_);
    for (const auto* a : delayed) {
      AdvanceTo(std::min(step_start + a->delay_us(), step_start + c));
      DoAction(*a, i);
    }
    AdvanceTo(step_start + c);
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
        if (where_[t] == Where::kHost && !queued_[t]) {
          if (waiting_.empty() && occupancy_ + reserved_ + size(t) <= budget_) {
            Fetch(t, {});
          } else {
            waiting_.push_back(t);
            queued_[t] = true;
          }
        }
        return;
      case schedule::OFFLOAD:
      case schedule::FREE:
        if (!Alive(t, a.kind() == schedule::FREE ? "free" : "offload", step)) return;
        Unqueue(t);  // a prefetch still waiting for room is simply not made
        if (where_[t] == Where::kIn) {
          WaitUntil([&] { return where_[t] != Where::kIn; }, kTransferOrder, t);
        }
        if (stays_[t]) {  // its earlier copy-out is still running: transfers run in order
          WaitUntil([&] { return !stays_[t]; }, kTransferOrder, t);
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
  std::deque<std::uint32_t> waiting_;  // planned prefetches waiting for room, in plan order
  std::vector<bool> queued_;
  std::uint64_t reserved_ = 0;  // room the compute stream is waiting for
  double iter_start_ = 0;
  std::map<std::uint32_t, std::vector<const schedule::Action*>> actions_before_, actions_after_;
  std::vector<std::vector<std::uint32_t>> updates_;
  ReplayReport r_;
};

}  // namespace

double StallLowerBound(const Schedule& s, const Lifetimes& lt, const DeviceProfile& d,
                       std::uint64_t budget) {
  const std::uint32_t n = lt.steps();
  const auto& curve = lt.memory_curve();
  const std::vector<double> cstart = ComputeStarts(s);
  const double period = cstart[n];
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<std::uint32_t> over;
  for (std::uint32_t p = 0; p < n; ++p) {
    if (curve[p] > budget) over.push_back(p);
  }
  std::sort(over.begin(), over.end(), [&](auto a, auto b) { return curve[a] > curve[b]; });
  if (over.size() > 16) over.resize(16);  // the bound holds at every step: a few suffice
  double best = 0;
  const double h2d = d.h2d_gbps * 1e3, d2h = d.d2h_gbps * 1e3;  // bytes per microsecond
  for (std::uint32_t p : over) {
    const double excess = static_cast<double>(curve[p] - budget);
    // Candidates: live across p and not touched by it; (last write, next use, bytes).
    struct Live {
      double written, next_use, bytes;
    };
    std::vector<Live> live;
    for (std::uint32_t t = 0; t < static_cast<std::uint32_t>(s.tensors_size()); ++t) {
      bool persistent = lt.persistent(t);
      if (!persistent && (lt.def(t) >= static_cast<int>(p) || lt.last_touch(t) <= p)) continue;
      const auto& uses = lt.uses(t);
      if (std::binary_search(uses.begin(), uses.end(), p)) continue;
      double written = persistent ? -inf : cstart[static_cast<std::uint32_t>(lt.def(t)) + 1];
      for (auto u : s.tensors(static_cast<int>(t)).update_steps()) {
        if (u < p) written = std::max(written, cstart[u + 1]);
      }
      std::uint32_t next = lt.NextUse(t, p);
      double next_use = next != kNoUse                               ? cstart[next]
                        : persistent && s.repeats() && !uses.empty() ? period + cstart[uses.front()]
                                                                     : inf;
      live.push_back(
          {written, next_use, static_cast<double>(s.tensors(static_cast<int>(t)).size_bytes())});
    }
    // Out before p: the earliest-written go first; by each moment y, what is written after y
    // must cross the link between y and p's start.
    std::sort(live.begin(), live.end(),
              [](const Live& a, const Live& b) { return a.written < b.written; });
    double before = 0, out_stall = 0, out_from = cstart[p];
    for (std::size_t i = 0; i < live.size(); ++i) {
      if (live[i].written > -inf) {
        double need = excess - before;  // bytes of the out-set written at or after this moment
        double stall = need / d2h - (cstart[p] - live[i].written);
        if (need > 0 && stall > out_stall) {
          out_stall = stall;
          out_from = live[i].written;
        }
      }
      before += live[i].bytes;
    }
    // Back after p: the latest-needed stay out; by each next use x, what is needed by x must
    // cross the link between p's start and x.
    std::sort(live.begin(), live.end(),
              [](const Live& a, const Live& b) { return a.next_use > b.next_use; });
    double later = 0, in_stall = 0, in_to = cstart[p];
    for (std::size_t i = 0; i < live.size(); ++i) {
      if (live[i].next_use < inf) {
        double need = excess - later;  // bytes of the out-set needed by this use
        double stall = need / h2d - (live[i].next_use - cstart[p]);
        if (need > 0 && stall > in_stall) {
          in_stall = stall;
          in_to = live[i].next_use;
        }
      }
      later += live[i].bytes;
    }
    // The two stretches add up only when they fit in one iteration (the report is per
    // iteration); otherwise the larger alone.
    best = std::max(
        best, in_to - out_from <= period ? out_stall + in_stall : std::max(out_stall, in_stall));
  }
  return best;
}

Result<ReplayReport> Replay(const Schedule& s, const Lifetimes& lt, const DeviceProfile& d,
                            const ReplayOptions& options) {
  if (options.policy != Policy::kNone && options.hbm_budget == 0) {
    return Status::InvalidArgument("policy " + PolicyName(options.policy) + " needs an hbm budget");
  }
  if (options.policy == Policy::kPlanned && options.plan == nullptr) {
    return Status::InvalidArgument("the planned policy needs a plan");
  }
  if (options.plan != nullptr) TIERPOOL_RETURN_IF_ERROR(ValidatePlan(*options.plan, s));
  if (options.plan != nullptr && !options.plan->recomputes().empty()) {
    Schedule rewritten;
    auto applied = ScheduleForPlan(s, *options.plan, &rewritten);
    if (!applied.ok()) return applied.status();
    const Lifetimes rewritten_lt(rewritten);
    Simulation sim(rewritten, rewritten_lt, d, options);
    ReplayReport r = sim.Run();
    r.recomputed = static_cast<std::uint32_t>(options.plan->recomputes_size());
    r.recomputed_bytes = RecomputeBytes(s, *options.plan);
    r.recompute_us = RecomputeUs(s, *options.plan);
    return r;
  }
  Simulation sim(s, lt, d, options);
  return sim.Run();
}

}  // namespace tierpool::prefetch
