#include "prefetch/plan_pass.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <span>
#include <tuple>
#include <utility>

#include "common/units.h"
#include "prefetch/link_calendar.h"
#include "prefetch/periodic_copies.h"
#include "prefetch/tensors_by_window.h"
#include "prefetch/waiting_loads.h"

namespace tierpool::prefetch {
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

  // As constructed, keeping the lists' memory.
  void Reset() {
    occ.clear();
    next = 0;
    resident = dirty = false;
    last_touch = resident_since = -1;
    intervals.clear();
  }
};

// Tensors listed by step, in the order they were added: one array for all steps instead of a
// vector per step (a pass over the planned iterations of a large graph allocated ~100,000).
class StepLists {
 public:
  void Add(std::int64_t step, std::uint32_t tensor) { added_.emplace_back(step, tensor); }
  // Sorts what was added by step (stably); call once, before At.
  void Build(std::int64_t steps) {
    offset_.assign(static_cast<std::size_t>(steps) + 1, 0);
    for (const auto& [step, t] : added_) ++offset_[static_cast<std::size_t>(step) + 1];
    for (std::size_t i = 1; i < offset_.size(); ++i) offset_[i] += offset_[i - 1];
    items_.resize(added_.size());
    std::vector<std::uint32_t> fill(offset_.begin(), offset_.end() - 1);
    for (const auto& [step, t] : added_) items_[fill[static_cast<std::size_t>(step)]++] = t;
    added_.clear();
    added_.shrink_to_fit();
  }
  std::span<const std::uint32_t> At(std::int64_t step) const {
    const auto i = static_cast<std::size_t>(step);
    return {items_.data() + offset_[i], items_.data() + offset_[i + 1]};
  }

 private:
  std::vector<std::pair<std::int64_t, std::uint32_t>> added_;
  std::vector<std::uint32_t> offset_;
  std::vector<std::uint32_t> items_;
};

}  // namespace

struct PassBuffers::Impl {
  std::vector<TensorState> ts;
  TensorsByWindow by_next{0};
  TensorsByWindow absent{0};
};
PassBuffers::PassBuffers() : impl_(std::make_unique<Impl>()) {}
PassBuffers::~PassBuffers() = default;

int PlannedIterations(const Schedule& s) { return s.repeats() ? 5 : 1; }

std::vector<double> StepStarts(const Schedule& s, std::int64_t n, std::int64_t total,
                               const ReplayReport* replayed) {
  std::vector<double> dur(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) {
    dur[static_cast<std::size_t>(i)] = s.steps(static_cast<int>(i)).compute_us();
  }
  if (replayed != nullptr && replayed->compute_start_us.size() == static_cast<std::size_t>(n)) {
    const auto& cs = replayed->compute_start_us;
    for (std::size_t i = 0; i + 1 < cs.size(); ++i) dur[i] = cs[i + 1] - cs[i];
    dur.back() = replayed->time_us - cs.back() + cs.front();
  }
  std::vector<double> start(static_cast<std::size_t>(total) + 1, 0.0);
  for (std::int64_t g = 0; g < total; ++g) {
    start[static_cast<std::size_t>(g + 1)] =
        start[static_cast<std::size_t>(g)] + dur[static_cast<std::size_t>(g % n)];
  }
  return start;
}

std::int64_t StepAt(const std::vector<double>& start, std::int64_t limit, double t) {
  auto it = std::upper_bound(start.begin(), start.begin() + limit + 1, t);
  return std::max<std::int64_t>(0, static_cast<std::int64_t>(it - start.begin()) - 1);
}

namespace {
// Which of the planned iterations the plan is made from (0 for a schedule that runs once).
int KeptIteration(const Schedule& s) { return PlannedIterations(s) / 2; }

bool LayoutOrder(const Reload& a, const Reload& b) {
  return a.use != b.use ? a.use > b.use : a.tensor < b.tensor;
}
bool SameReload(const Reload& a, const Reload& b) { return a.use == b.use && a.tensor == b.tensor; }
}  // namespace

void SortUnique(std::vector<Reload>* r) {
  std::sort(r->begin(), r->end(), LayoutOrder);
  r->erase(std::unique(r->begin(), r->end(), SameReload), r->end());
}

void MergeUnique(std::vector<Reload>* sorted, std::vector<Reload>* more) {
  SortUnique(more);
  const auto middle = static_cast<std::ptrdiff_t>(sorted->size());
  sorted->insert(sorted->end(), more->begin(), more->end());
  std::inplace_merge(sorted->begin(), sorted->begin() + middle, sorted->end(), LayoutOrder);
  sorted->erase(std::unique(sorted->begin(), sorted->end(), SameReload), sorted->end());
}

namespace {

// One pass: the planned timeline laid out (Pass), then walked step by step (Walk), then the kept
// iteration's actions, residents and peak written into the plan (Finish). Its fields keep the
// names the walk has always used, without a trailing underscore: they are the walk's state, read
// by every step, and a class-wide rename would only make the history harder to follow.
class Pass {
 public:
  Pass(const Schedule& s, const Lifetimes& lt, const DeviceProfile& d, const PlannerConfig& config,
       const std::vector<double>& start, const WindowOverrides& overrides,
       const PassOptions& options, std::vector<Reload>* reloads, std::vector<TensorState>& ts,
       TensorsByWindow& by_next, TensorsByWindow& absent);

  Result<schedule::Plan> Run();

 private:
  // Resident tensors' order by next use (the last resort's heap): (use, -window, -tensor).
  using UseKey = std::tuple<std::int64_t, std::int64_t, std::int64_t>;
  // An action, before the kept iteration's are chosen. Actions belong to the kept iteration when
  // the use they serve (prefetch) or the point they take effect (offload, free) falls in it; a
  // prefetch whose window opens in the previous iteration is issued at that step of every
  // iteration, for the next one's use.
  struct Pending {
    schedule::ActionKind kind;
    std::uint32_t tensor;
    std::int64_t at;   // the step it is issued at (global)
    std::int64_t use;  // prefetch: the use it serves; else == at
    double delay_us = 0;
    bool after = false;  // issued when step `at` ends instead of when it starts
  };
  // What MakeRoom chose for a step.
  struct Room {
    WaitingLoads::Iterator issue_end;  // the loads from here wait for a later step
  };

  // Layout (before the walk).
  std::uint64_t size_of(std::uint32_t t) const { return bytes[t]; }
  std::int64_t WindowFor(std::uint32_t t, std::int64_t use, std::int64_t prev) const;
  void LayOutBurstWindows();
  const std::int64_t* BurstWindowOf(std::uint32_t t, std::int64_t use) const;
  void LayOutOccurrences();

  // The resident set, by next window (by_next) and, for the last resort, by next use (by_use).
  std::int64_t Key(std::uint32_t t) const;
  UseKey UseKeyOf(std::uint32_t t) const;
  bool Current(const UseKey& k) const;
  void List(std::uint32_t t);
  void Unlist(std::uint32_t t) { by_next.Erase(Key(t), t); }
  // The tensors out of hbm whose next use has a window before it (early loads walk them).
  void UnmarkAbsent(std::uint32_t t);
  void MarkAbsent(std::uint32_t t);
  void MakeResident(std::uint32_t t, std::int64_t g, bool dirty);
  void Drop(std::uint32_t t, std::int64_t after_step);

  // The links' calendars.
  bool ReloadOnTime(std::uint32_t t, std::int64_t window);
  double OutFrom(std::uint32_t t, std::int64_t after);
  void SendOut(std::uint32_t t, std::int64_t after, std::int64_t g);
  bool TakeBack(std::uint32_t t);

  // Loads.
  std::int64_t UseOf(std::uint32_t t) const { return ts[t].occ[ts[t].next].step; }
  void WaitFor(std::uint32_t t);
  void IssueEarly(std::int64_t g, std::uint64_t defining);

  // The walk, one step at a time.
  Status Walk();
  void OpenWindows(std::int64_t g);
  Result<Room> MakeRoom(std::int64_t g, std::uint64_t defining);
  // The last resort of MakeRoom: a resident tensor in its window but not used by step g goes out
  // and comes back later. False when there is none.
  bool EvictLate(std::int64_t g);
  std::uint32_t ChooseVictim(std::int64_t g);
  void Evict(std::uint32_t victim, std::int64_t g);
  void IssueLoads(std::int64_t g, WaitingLoads::Iterator issue_end);
  void RunStep(std::int64_t g);

  // The plan, from what the walk decided.
  void Finish(schedule::Plan* plan);
  void AddKeptActions(schedule::Plan* plan);
  void AddResidentsAndPeak(schedule::Plan* plan);

  const Schedule& s;
  const Lifetimes& lt;
  const DeviceProfile& d;
  const PlannerConfig& config;
  const std::vector<double>& start;
  const WindowOverrides& overrides;
  const PassOptions& options;
  const EarlyLoads& early;
  std::vector<Reload>* reloads;
  const std::size_t reloads_before;

  const std::int64_t n;
  const int iterations;
  const std::int64_t total;
  const std::size_t nt;
  const std::int64_t keep_from, keep_to;
  // The walk ends with the iteration after the kept one (plan_pass.h: PlannedIterations).
  const std::int64_t walk_to;

  // Sizes and transfer times by tensor, read for every candidate of every eviction (through the
  // schedule's messages they missed the cache).
  std::vector<std::uint64_t> bytes;
  std::vector<double> in_us, out_us;
  // Optimizer states' windows, laid out back to back on one link: (tensor, global use, window),
  // sorted.
  std::vector<std::tuple<std::uint32_t, std::int64_t, std::int64_t>> burst_window;

  std::vector<TensorState>& ts;
  // Windows opening at each step; a window the last resort moves (always to the next step) goes
  // to `moved_windows` and is taken after the step's own.
  StepLists windows_at, defs_at, touch_at, update_at;
  std::vector<std::uint32_t> moved_windows, moving_windows;
  std::vector<Pending> pending;

  // Resident tensors keyed by the start of their next window: the largest is the eviction victim.
  TensorsByWindow& by_next;
  // The same tensors by their next use, as a max-heap (ties to the smallest window, then
  // tensor): the last resort takes the resident tensor used latest without scanning every
  // resident one. Lazy: built at the first last resort (many plans never need one), then
  // listing pushes an entry, and entries whose tensor has left or moved on are dropped when they
  // reach the top (cheaper than a second ordered set on every touch).
  std::vector<UseKey> by_use;
  bool by_use_built = false;
  // With early loads: the tensors out of hbm and not waiting whose next occurrence is a use with
  // a window before it, by (window, tensor), the order the window lists give; each tensor's key
  // while it is there. Early loads walk it from the next step on.
  TensorsByWindow& absent;
  std::vector<std::int64_t> absent_key;
  std::uint64_t occupancy = 0;

  LinkCalendar d2h;
  // With reload-aware evictions (PassOptions): the host->hbm link's calendar of the loads
  // issued and of the reloads of the tensors evicted (reserved at eviction, so that the next
  // eviction sees them; such a reload is not reserved again when it is issued).
  LinkCalendar h2d;
  std::vector<char> reload_reserved;

  // Loads whose window has opened, by the use they serve: a load that finds no room waits here
  // from step to step.
  WaitingLoads waiting;
  // Where each tensor's last look in the overrides ended: a tensor's loads are issued for uses
  // that never go back, so the next look starts there (a search each cost 6% of a pass).
  std::vector<std::uint32_t> override_pos;
  // Early loads (EarlyLoads): queued as if their windows opened now, so they are issued with
  // this step's own loads. (Taken from `absent` once the walk is over: queueing one takes it out.)
  std::vector<std::uint32_t> early_loads;
};

Pass::Pass(const Schedule& s, const Lifetimes& lt, const DeviceProfile& d,
           const PlannerConfig& config, const std::vector<double>& start,
           const WindowOverrides& overrides, const PassOptions& options,
           std::vector<Reload>* reloads, std::vector<TensorState>& ts, TensorsByWindow& by_next,
           TensorsByWindow& absent)
    : s(s),
      lt(lt),
      d(d),
      config(config),
      start(start),
      overrides(overrides),
      options(options),
      early(options.early),
      reloads(reloads),
      reloads_before(reloads->size()),
      n(lt.steps()),
      iterations(PlannedIterations(s)),
      total(n * iterations),
      nt(static_cast<std::size_t>(s.tensors_size())),
      keep_from(KeptIteration(s) * n),
      keep_to(keep_from + n),
      walk_to(std::min(total, keep_to + n)),
      bytes(nt),
      in_us(nt),
      out_us(nt),
      ts(ts),
      by_next(by_next),
      absent(absent),
      absent_key(options.early.steps > 0 ? nt : 0, -1),
      reload_reserved(options.reload_aware ? nt : 0, 0),
      waiting(total, nt),
      override_pos(nt, 0) {
  for (std::size_t t = 0; t < nt; ++t) {
    bytes[t] = s.tensors(static_cast<int>(t)).size_bytes();
    in_us[t] = d.InUs(bytes[t]);
    out_us[t] = d.OutUs(bytes[t]);
  }
}

std::int64_t Pass::WindowFor(std::uint32_t t, std::int64_t use, std::int64_t prev) const {
  double need = in_us[t] * config.prefetch_margin;
  // Latest step w with start[use] - start[w] >= need.
  std::int64_t w = StepAt(start, use, start[static_cast<std::size_t>(use)] - need);
  return std::max<std::int64_t>(w, prev + 1);
}

void Pass::LayOutBurstWindows() {
  // Optimizer states are read in a burst of short update steps: if each got a window sized for
  // its own transfer, all would start together and arrive late. Their windows are instead laid
  // out on one link, back to back, as late as possible, walking back from the last update.
  std::vector<std::pair<std::int64_t, std::uint32_t>> uses;  // (global use, tensor)
  for (std::size_t t = 0; t < nt; ++t) {
    if (s.tensors(static_cast<int>(t)).kind() != schedule::OPTIMIZER_STATE) continue;
    for (int k = 0; k < iterations; ++k) {
      for (auto u : lt.uses(static_cast<std::uint32_t>(t))) {
        uses.emplace_back(static_cast<std::int64_t>(k) * n + u, static_cast<std::uint32_t>(t));
      }
    }
  }
  std::sort(uses.rbegin(), uses.rend());
  double link_free = std::numeric_limits<double>::infinity();
  for (auto [use, t] : uses) {
    double xfer = in_us[t];
    double end = std::min(start[static_cast<std::size_t>(use)], link_free);
    link_free = end - xfer;
    burst_window.emplace_back(t, use, StepAt(start, use, link_free));
  }
  std::sort(burst_window.begin(), burst_window.end());
}

const std::int64_t* Pass::BurstWindowOf(std::uint32_t t, std::int64_t use) const {
  auto it = std::lower_bound(burst_window.begin(), burst_window.end(),
                             std::make_tuple(t, use, std::numeric_limits<std::int64_t>::min()));
  if (it == burst_window.end() || std::get<0>(*it) != t || std::get<1>(*it) != use) {
    return nullptr;
  }
  return &std::get<2>(*it);
}

void Pass::LayOutOccurrences() {
  ts.resize(nt);
  for (auto& st : ts) st.Reset();
  for (std::size_t t = 0; t < nt; ++t) {
    const auto& tensor = s.tensors(static_cast<int>(t));
    auto& st = ts[t];
    std::int64_t prev = -1;
    for (int k = 0; k < iterations; ++k) {
      std::int64_t base = static_cast<std::int64_t>(k) * n;
      if (!lt.persistent(static_cast<std::uint32_t>(t))) {
        std::int64_t def = base + lt.def(static_cast<std::uint32_t>(t));
        st.occ.push_back({def, def});
        defs_at.Add(def, static_cast<std::uint32_t>(t));
        prev = def;
      }
      for (auto u : lt.uses(static_cast<std::uint32_t>(t))) {
        std::int64_t g = base + u;
        std::int64_t w = WindowFor(static_cast<std::uint32_t>(t), g, prev);
        if (const auto* b = BurstWindowOf(static_cast<std::uint32_t>(t), g)) {
          w = std::max<std::int64_t>(std::min(w, *b), prev + 1);
        }
        if (const auto* o = overrides.Find(static_cast<std::uint32_t>(t), g)) {
          w = std::max<std::int64_t>(o->step, prev + 1);
        }
        st.occ.push_back({w, g});
        prev = g;
      }
      if (!lt.persistent(static_cast<std::uint32_t>(t))) prev = -1;  // a fresh instance
    }
    for (const auto& o : st.occ) {
      if (o.window != o.step || lt.persistent(static_cast<std::uint32_t>(t))) {
        windows_at.Add(o.window, static_cast<std::uint32_t>(t));
      }
      touch_at.Add(o.step, static_cast<std::uint32_t>(t));
    }
    for (auto u : tensor.update_steps()) update_at.Add(u, static_cast<std::uint32_t>(t));
  }
  windows_at.Build(total);
  defs_at.Build(total);
  touch_at.Build(total);
  update_at.Build(n);
}

std::int64_t Pass::Key(std::uint32_t t) const {
  const auto& st = ts[t];
  return st.next < st.occ.size() ? st.occ[st.next].window : kNever;
}

Pass::UseKey Pass::UseKeyOf(std::uint32_t t) const {
  const auto& st = ts[t];
  return UseKey(st.occ[st.next].step, -st.occ[st.next].window, -static_cast<std::int64_t>(t));
}

bool Pass::Current(const UseKey& k) const {
  const auto t = static_cast<std::uint32_t>(-std::get<2>(k));
  return ts[t].resident && ts[t].next < ts[t].occ.size() && UseKeyOf(t) == k;
}

void Pass::List(std::uint32_t t) {
  by_next.Insert(Key(t), t);
  if (!by_use_built || ts[t].next >= ts[t].occ.size()) return;
  if (by_use.size() > 4 * nt + 1024) {  // mostly stale: keep only the current entries
    by_use.erase(
        std::remove_if(by_use.begin(), by_use.end(), [&](const UseKey& k) { return !Current(k); }),
        by_use.end());
    std::make_heap(by_use.begin(), by_use.end());
  }
  by_use.push_back(UseKeyOf(t));
  std::push_heap(by_use.begin(), by_use.end());
}

void Pass::UnmarkAbsent(std::uint32_t t) {
  if (early.steps <= 0 || absent_key[t] < 0) return;
  absent.Erase(absent_key[t], t);
  absent_key[t] = -1;
}

void Pass::MarkAbsent(std::uint32_t t) {
  if (early.steps <= 0) return;
  UnmarkAbsent(t);
  const auto& st = ts[t];
  if (st.resident || st.next >= st.occ.size()) return;
  const auto& o = st.occ[st.next];
  if (o.window >= o.step) return;  // a definition's, or no time to load ahead
  absent.Insert(o.window, t);
  absent_key[t] = o.window;
}

void Pass::MakeResident(std::uint32_t t, std::int64_t g, bool dirty) {
  auto& st = ts[t];
  UnmarkAbsent(t);
  st.resident = true;
  st.dirty = dirty;
  st.resident_since = g;
  occupancy += size_of(t);
  List(t);
}

void Pass::Drop(std::uint32_t t, std::int64_t after_step) {
  auto& st = ts[t];
  Unlist(t);
  st.resident = false;
  occupancy -= size_of(t);
  st.intervals.emplace_back(st.resident_since, after_step);
  MarkAbsent(t);
}

bool Pass::ReloadOnTime(std::uint32_t t, std::int64_t window) {
  // Whether a candidate's reload, placed from its next window on, would end before that use.
  const auto& st = ts[t];
  if (window >= total || st.next >= st.occ.size()) return true;
  const double from = h2d.Place(start[static_cast<std::size_t>(window)], in_us[t]);
  return from + in_us[t] <= start[static_cast<std::size_t>(st.occ[st.next].step)] + 1e-6;
}

double Pass::OutFrom(std::uint32_t t, std::int64_t after) {
  // Where a dirty tensor last touched at step `after` would start its copy-out if placed now.
  return d2h.Place(start[static_cast<std::size_t>(after + 1)], out_us[t]);
}

void Pass::SendOut(std::uint32_t t, std::int64_t after, std::int64_t g) {
  // Copies out (or drops, if clean) a victim last touched at step `after`, whose room step g
  // needs.
  if (!ts[t].dirty) {
    pending.push_back({schedule::FREE, t, after, after, 0, true});
    return;
  }
  double from = OutFrom(t, after);
  d2h.Reserve(from, from + out_us[t]);
  // Issued at its place on the calendar: a step and a delay into it. One that cannot start
  // before step g (the link is busy until then) is issued as g starts, so that the room g
  // waits for is on its way.
  std::int64_t at = std::clamp<std::int64_t>(StepAt(start, g, from), after + 1, g);
  double delay = at == g ? 0.0 : std::max(0.0, from - start[static_cast<std::size_t>(at)]);
  pending.push_back({schedule::OFFLOAD, t, at, at, delay, false});
}

bool Pass::TakeBack(std::uint32_t t) {
  // A tensor loaded and not used since: its load is taken back instead of a drop (false when it
  // was used, or written, since it came in).
  auto& st = ts[t];
  if (st.resident_since <= st.last_touch || st.dirty) return false;
  for (auto it = pending.rbegin(); it != pending.rend(); ++it) {
    if (it->tensor == t && it->kind == schedule::PREFETCH && it->at == st.resident_since) {
      pending.erase(std::next(it).base());
      break;
    }
  }
  Unlist(t);
  st.resident = false;
  occupancy -= size_of(t);
  MarkAbsent(t);
  return true;
}

void Pass::WaitFor(std::uint32_t t) {
  UnmarkAbsent(t);
  waiting.Add(t, UseOf(t), size_of(t));
}

void Pass::IssueEarly(std::int64_t g, std::uint64_t defining) {
  const std::int64_t last = std::min(total - 1, g + early.steps);
  std::int64_t room = static_cast<std::int64_t>(config.hbm_budget) -
                      static_cast<std::int64_t>(occupancy + waiting.bytes() + defining);
  for (std::int64_t h = g + 1; h <= std::min(last, g + early.defs_ahead); ++h) {
    for (auto t : defs_at.At(h)) room -= static_cast<std::int64_t>(size_of(t));
  }
  early_loads.clear();
  for (auto it = absent.From(g + 1); !it.done() && it.window() <= last && room > 0; it.Next()) {
    const std::uint32_t t = it.tensor();
    if (static_cast<std::int64_t>(size_of(t)) > room) break;  // it waits for a later step
    room -= static_cast<std::int64_t>(size_of(t));
    early_loads.push_back(t);
  }
  for (auto t : early_loads) {
    if (early.holds_room) ts[t].occ[ts[t].next].window = g;
    WaitFor(t);
  }
}

Result<schedule::Plan> Pass::Run() {
  LayOutBurstWindows();
  LayOutOccurrences();
  by_next.Reset(total);
  absent.Reset(early.steps > 0 ? total : 0);
  TIERPOOL_RETURN_IF_ERROR(Walk());
  schedule::Plan plan;
  plan.set_format_version(1);
  plan.set_schedule(s.name());
  plan.set_hbm_budget_bytes(config.hbm_budget);
  plan.set_device(d.name);
  Finish(&plan);
  return plan;
}

Status Pass::Walk() {
  for (std::size_t t = 0; t < nt; ++t) MarkAbsent(static_cast<std::uint32_t>(t));
  for (std::int64_t g = 0; g < walk_to; ++g) {
    // 1. What must be resident from this step on: windows opening, tensors defined.
    OpenWindows(g);
    std::uint64_t defining = 0;
    for (auto t : defs_at.At(g)) defining += size_of(t);
    if (early.steps > 0) IssueEarly(g, defining);
    // 2. Make room: evict what is needed farthest in the future (MakeRoom), then issue the loads
    // that fit.
    auto room = MakeRoom(g, defining);
    if (!room.ok()) return room.status();
    IssueLoads(g, room->issue_end);
    for (auto t : defs_at.At(g)) MakeResident(t, g, true);
    std::swap(moved_windows, moving_windows);  // for step g + 1
    // 3. and 4. The step runs, and its dead tensors are freed.
    RunStep(g);
  }
  for (const auto& [use, t] : waiting) ts[t].occ[ts[t].next].window = total;  // never issued
  return Status::Ok();
}

void Pass::OpenWindows(std::int64_t g) {
  for (auto t : windows_at.At(g)) {
    if (!ts[t].resident) WaitFor(t);
  }
  for (auto t : moved_windows) {
    if (!ts[t].resident) WaitFor(t);
  }
  moved_windows.clear();
}

Result<Pass::Room> Pass::MakeRoom(std::int64_t g, std::uint64_t defining) {
  // When nothing can go, the loads for the latest uses wait a step (their prefetches start
  // later, and may stall) until the rest fit; only what this step itself needs cannot wait. The
  // loads from `issue_end` wait.
  std::uint64_t adding = waiting.bytes() + defining;
  auto issue_end = waiting.end();
  bool cut = false;
  while (occupancy + adding > config.hbm_budget) {
    if (by_next.empty() || by_next.Latest().window() <= g) {
      if (!cut) {
        cut = true;
        const auto room = static_cast<std::int64_t>(config.hbm_budget) -
                          static_cast<std::int64_t>(occupancy + defining);
        issue_end = waiting.Cut(room, g);
        adding = waiting.BytesBefore(issue_end) + defining;
        continue;
      }
      if (EvictLate(g)) continue;
      return Status::FailedPrecondition("hbm budget " + FormatBytes(config.hbm_budget) +
                                        " is below what step " + std::to_string(g % n) + " (" +
                                        s.steps(static_cast<int>(g % n)).name() +
                                        ") needs at once: " + FormatBytes(occupancy + adding));
    }
    const std::uint32_t victim = ChooseVictim(g);
    if (options.reload_aware && Key(victim) < total) {  // its reload, on the calendar
      const double from = h2d.Place(start[static_cast<std::size_t>(Key(victim))], in_us[victim]);
      h2d.Reserve(from, from + in_us[victim]);
      reload_reserved[victim] = 1;
    }
    Evict(victim, g);
  }
  return Room{issue_end};
}

bool Pass::EvictLate(std::int64_t g) {
  // A resident tensor already in its prefetch window but not used by this step goes out and
  // comes back later (its window reopens next step; it may stall).
  if (!by_use_built) {
    by_next.ForEach([&](std::int64_t, std::uint32_t t) {
      if (ts[t].next < ts[t].occ.size()) by_use.push_back(UseKeyOf(t));
    });
    std::make_heap(by_use.begin(), by_use.end());
    by_use_built = true;
  }
  while (!by_use.empty() && !Current(by_use.front())) {
    std::pop_heap(by_use.begin(), by_use.end());
    by_use.pop_back();
  }
  if (by_use.empty() || std::get<0>(by_use.front()) <= g) return false;
  const auto late = static_cast<std::uint32_t>(-std::get<2>(by_use.front()));
  auto& ls = ts[late];
  if (!TakeBack(late)) {
    std::int64_t after = std::max<std::int64_t>(ls.last_touch, ls.resident_since);
    if (after < 0) after = g - 1;
    if (after >= 0) SendOut(late, after, g);
    ls.dirty = false;
    Drop(late, after);
  }
  ls.occ[ls.next].window = g + 1;
  MarkAbsent(late);  // keyed by its new window
  moving_windows.push_back(late);
  return true;
}

std::uint32_t Pass::ChooseVictim(std::int64_t g) {
  // Among the farthest-needed candidates, the one freeing the most bytes for the longest
  // (size x time until its window: GreedyDual-Size's rule; many small transfers cost a link
  // latency each and crowd the big ones), preferring a cheap one: its room is free by the
  // time this step starts, because it is clean or its copy-out fits in a gap of the link
  // since its last touch. When none is, the one whose room comes free soonest (the step
  // waits for it).
  std::uint32_t victim = by_next.Latest().tensor();
  double best = -1;
  bool best_cheap = false;
  double best_free = std::numeric_limits<double>::infinity();
  int looked = 0;
  const double now_start = start[static_cast<std::size_t>(g)];
  // With a guide every candidate is looked at: the ones it has out may be needed sooner.
  const int look_limit = config.guide != nullptr ? std::numeric_limits<int>::max() : 64;
  double best_out = -1;
  bool best_on_time = false;
  for (auto it = by_next.Latest(); !it.done() && it.window() > g && looked < look_limit;
       it.Next(), ++looked) {
    const std::int64_t window = it.window();
    double until = window >= total ? start.back() - now_start + 1e6
                                   : start[static_cast<std::size_t>(window)] - now_start;
    const std::uint32_t t = it.tensor();
    const auto& c = ts[t];
    if (config.guide != nullptr) {
      // The guide's least share in hbm until the candidate's next window, in quarters: one
      // it has (more) out goes before one it keeps, whatever the rules below say. (Exact
      // shares let the relaxation's noise decide; quarters measured as good as eighths and
      // better than halves or whole tensors on ResNet-50.)
      const double out = std::floor(4 * (1.0 - config.guide->LeastInHbm(t, g, window, n)) + 0.5);
      if (out < best_out) continue;
      if (out > best_out) {  // a better class: the rules below start over within it
        best_out = out;
        best = -1;
        best_cheap = false;
        best_free = std::numeric_limits<double>::infinity();
        best_on_time = false;
      }
    }
    // With reload-aware evictions, one whose reload would be on time goes before any that
    // would be late. Once one is found, a candidate's reload is looked at only when it
    // would win otherwise (each look is a search of the calendar).
    bool must_be_on_time = false;
    if (options.reload_aware) {
      if (best_on_time) {
        must_be_on_time = true;
      } else if (ReloadOnTime(t, window)) {
        best_on_time = true;
        best = -1;
        best_cheap = false;
        best_free = std::numeric_limits<double>::infinity();
      }
    }
    std::int64_t after = std::max<std::int64_t>(c.last_touch, c.resident_since);
    double score = static_cast<double>(size_of(t)) * std::max(until, 1.0);
    bool dirty = c.dirty && after >= 0;
    if (dirty && best_cheap && score <= best) continue;  // cannot win: skip the calendar
    double free_at = dirty ? OutFrom(t, after) + out_us[t] : now_start;
    bool cheap = free_at <= now_start + 1e-6;
    bool better = cheap != best_cheap ? cheap
                  : cheap             ? score > best
                          : free_at < best_free || (free_at == best_free && score > best);
    if (better && must_be_on_time && !ReloadOnTime(t, window)) continue;
    if (better) {
      best = score;
      best_cheap = cheap;
      best_free = free_at;
      victim = t;
    }
  }
  return victim;
}

void Pass::Evict(std::uint32_t victim, std::int64_t g) {
  // One loaded ahead of its window (EarlyLoads) and not used yet: its load is taken back.
  // (Dropping it after the step it came in at could fall in an earlier iteration than the
  // use it came for, and so out of the plan.)
  if (TakeBack(victim)) return;
  auto& vs = ts[victim];
  std::int64_t after = std::max<std::int64_t>(vs.last_touch, vs.resident_since);
  if (after < 0) after = g - 1;  // resident before anything touched it: drop now
  if (after >= 0) SendOut(victim, after, g);
  vs.dirty = false;  // the host holds a current copy now
  Drop(victim, after);
}

void Pass::IssueLoads(std::int64_t g, WaitingLoads::Iterator issue_end) {
  for (auto it = waiting.begin(); it != issue_end;) {
    const std::uint32_t t = it->second;
    it = waiting.Erase(it);
    auto& next = ts[t].occ[ts[t].next];
    const std::int64_t use = next.step;
    // Its window is where it is issued: later than it opened when it waited.
    next.window = std::max(next.window, g);
    double delay = 0;
    if (const auto* o = overrides.FindAfter(t, use, &override_pos[t]);
        o != nullptr && o->step == g) {
      delay = o->delay_us;  // issued where the link timeline put it, not at step start
    }
    pending.push_back({schedule::PREFETCH, t, g, use, delay});
    if (options.reload_aware && !std::exchange(reload_reserved[t], 0)) {
      const double from = h2d.Place(start[static_cast<std::size_t>(g)] + delay, in_us[t]);
      h2d.Reserve(from, from + in_us[t]);
    }
    reloads->push_back({t, use});
    MakeResident(t, g, false);
  }
}

void Pass::RunStep(std::int64_t g) {
  // 3. The step runs; touched tensors move on to their next occurrence.
  for (auto t : touch_at.At(g)) {
    auto& st = ts[t];
    if (st.resident) Unlist(t);
    while (st.next < st.occ.size() && st.occ[st.next].step <= g) ++st.next;
    st.last_touch = g;
    if (st.resident) {
      List(t);
    } else {
      MarkAbsent(t);
    }
  }
  for (auto t : update_at.At(g % n)) ts[t].dirty = true;
  // 4. Dead tensors (last touch of this instance) are freed after the step.
  for (auto t : touch_at.At(g)) {
    auto& st = ts[t];
    if (lt.persistent(t) || !st.resident) continue;
    // Each iteration defines a fresh instance: this one is done when nothing of it is left in
    // this iteration.
    if (st.next >= st.occ.size() || st.occ[st.next].step / n != g / n) Drop(t, g);
  }
}

void Pass::Finish(schedule::Plan* plan) {
  // The iteration not walked reloads what the one before it did, an iteration later: its
  // reloads press on the link layout of the walked ones (the next pass's windows) as the
  // steady state's would.
  if (walk_to < total) {
    const std::size_t made = reloads->size();
    for (std::size_t i = reloads_before; i < made; ++i) {
      const Reload r = (*reloads)[i];
      if (r.use >= keep_to && r.use < walk_to) reloads->push_back({r.tensor, r.use + n});
    }
  }
  for (std::size_t t = 0; t < nt; ++t) {
    if (ts[t].resident) ts[t].intervals.emplace_back(ts[t].resident_since, total);
  }
  AddKeptActions(plan);
  AddResidentsAndPeak(plan);
}

void Pass::AddKeptActions(schedule::Plan* plan) {
  std::stable_sort(pending.begin(), pending.end(),
                   [](const Pending& a, const Pending& b) { return a.at < b.at; });
  for (const auto& pa : pending) {
    if (pa.use < keep_from || pa.use >= keep_to) continue;
    auto* a = plan->add_actions();
    a->set_kind(pa.kind);
    a->set_tensor(pa.tensor);
    a->set_step(static_cast<std::uint32_t>(pa.at % n));
    a->set_after(pa.after);
    if (pa.delay_us > 0) a->set_delay_us(pa.delay_us);
    if (pa.kind == schedule::PREFETCH) a->set_needed_by(static_cast<std::uint32_t>(pa.use % n));
  }
}

void Pass::AddResidentsAndPeak(schedule::Plan* plan) {
  // Occupancy over the kept iteration, and what is resident when it starts.
  std::vector<std::int64_t> delta(static_cast<std::size_t>(total) + 2, 0);
  for (std::size_t t = 0; t < nt; ++t) {
    for (auto [from, to] : ts[t].intervals) {
      auto sz = static_cast<std::int64_t>(size_of(static_cast<std::uint32_t>(t)));
      delta[static_cast<std::size_t>(from)] += sz;
      delta[static_cast<std::size_t>(to) + 1] -= sz;
      if (from < keep_from && to >= keep_from) {
        plan->add_resident_at_start(static_cast<std::uint32_t>(t));
      }
    }
  }
  if (s.repeats()) {
    // Where the window of a persistent tensor's first use in the kept iteration opens.
    auto first_window = [&](std::uint32_t t) {
      const std::int64_t first_use = keep_from + lt.uses(t).front();
      std::int64_t w = 0;
      for (const auto& o : ts[t].occ) {
        if (o.step == first_use) w = std::max<std::int64_t>(o.window, keep_from);
      }
      return static_cast<std::uint32_t>(w % n);
    };
    MakePeriodic(s, lt, first_window, plan);  // periodic_copies.h
  } else {
    std::stable_sort(plan->mutable_actions()->begin(), plan->mutable_actions()->end(),
                     ActionsByStep);
  }
  std::int64_t running = 0, peak = 0;
  for (std::int64_t g = 0; g < keep_to; ++g) {
    running += delta[static_cast<std::size_t>(g)];
    if (g >= keep_from) peak = std::max(peak, running);
  }
  plan->set_predicted_peak_bytes(static_cast<std::uint64_t>(peak));
}

}  // namespace

Result<schedule::Plan> PlanPass(const Schedule& s, const Lifetimes& lt, const DeviceProfile& d,
                                const PlannerConfig& config, const std::vector<double>& start,
                                const WindowOverrides& overrides, const PassOptions& options,
                                std::vector<Reload>* reloads, PassBuffers* buffers) {
  std::optional<PassBuffers> own;  // only where the caller gives none
  PassBuffers::Impl& reused = *(buffers != nullptr ? buffers : &own.emplace())->impl_;
  return Pass(s, lt, d, config, start, overrides, options, reloads, reused.ts, reused.by_next,
              reused.absent)
      .Run();
}

}  // namespace tierpool::prefetch
