#include "prefetch/planner.h"

#include <algorithm>
#include <cstdio>
#include <future>
#include <limits>

#include "common/posix.h"
#include "common/units.h"
#include "prefetch/plan_pass.h"
#include "prefetch/recompute.h"
#include "prefetch/simulator.h"
#include "prefetch/streamed_tensors.h"

namespace tierpool::prefetch {

Result<std::uint64_t> ParseHbmBudget(const std::string& text, std::uint64_t peak) {
  if (!text.empty() && text.back() == '%') {
    try {
      double pct = std::stod(text.substr(0, text.size() - 1));
      if (!(pct > 0 && pct <= 1000)) throw std::out_of_range("pct");
      return static_cast<std::uint64_t>(static_cast<double>(peak) * pct / 100);
    } catch (const std::exception&) {
      return Status::InvalidArgument("bad --hbm percentage '" + text + "'");
    }
  }
  auto b = ParseByteSize(text);
  if (!b.ok()) return Status::InvalidArgument("--hbm: " + b.status().message());
  if (*b < 4096 && text.find_first_not_of("0123456789") == std::string::npos) {
    return Status::InvalidArgument("--hbm " + text + " is " + text +
                                   " bytes, less than one 4 KiB extent: a share of the "
                                   "no-offload peak is written " +
                                   text + "%, a size with its unit (" + text + "G)");
  }
  return b;
}

Status BelowStepFloor(std::uint64_t budget, const Schedule& s, const Lifetimes& lt) {
  const std::uint64_t floor = lt.step_floor_bytes();
  if (budget >= floor) return Status::Ok();
  const std::uint32_t at = lt.step_floor_step();
  const double peak = static_cast<double>(std::max<std::uint64_t>(lt.peak_bytes(), 1));
  char share[64];
  std::snprintf(share, sizeof(share), "%.1f%% of the no-offload peak of ",
                100.0 * static_cast<double>(floor) / peak);
  return Status::FailedPrecondition(
      "hbm budget " + FormatBytes(budget) + " is below this schedule's floor of " +
      FormatBytes(floor) + " (" + share + FormatBytes(lt.peak_bytes()) + "): step " +
      std::to_string(at) + " (" + s.steps(static_cast<int>(at)).name() +
      ") holds that much at once, and no plan keeps a budget below it");
}

Status PlannerConfig::validate() const {
  if (hbm_budget == 0) return Status::InvalidArgument("hbm budget must be > 0");
  if (!(prefetch_margin >= 1.0 && prefetch_margin <= 100)) {
    return Status::InvalidArgument("prefetch margin must be in [1, 100]");
  }
  if (!(recompute_share >= 0 && recompute_share <= 1)) {
    return Status::InvalidArgument("the recompute share must be in [0, 1] of the compute");
  }
  return Status::Ok();
}

// A plan and what its replay showed (time infinite when the replay found a breach).
struct Candidate {
  schedule::Plan plan;
  double time_us = std::numeric_limits<double>::infinity();
  ReplayReport replay;
};

void Evaluate(const Schedule& s, const Lifetimes& lt, const DeviceProfile& d, std::uint64_t budget,
              Candidate* c) {
  auto r = Replay(s, lt, d,
                  {.policy = Policy::kPlanned,
                   .hbm_budget = budget,
                   .plan = &c->plan,
                   .lower_bound = false,
                   .name_stall_causes = false});
  if (!r.ok() || r->breaches() > 0) return;
  c->time_us = r->time_us;
  c->replay = std::move(r).value();
}

// One round of planning on a given clock. Pass 1 finds which uses need a reload, giving each
// prefetch a window as if it had the link to itself. Later passes lay the reloads out on the
// link back to back, as late as possible, walking back from the last use, issue each at its
// laid-out time, and plan again, until the set of reloads stops growing. Every plan that fits
// is replayed and the fastest kept (with replay off, the last that fits); the latest wins a tie.
// Plans are made for config's budget and replayed under `budget` (which may be larger).
Result<Candidate> PlanRound(const Schedule& s, const Lifetimes& lt, const DeviceProfile& d,
                            const PlannerConfig& config, std::uint64_t budget,
                            const std::vector<double>& start, int layout_passes,
                            const PassOptions& options = {}) {
  std::vector<Reload> all;
  PassBuffers buffers;
  auto first = PlanPass(s, lt, d, config, start, {}, options, &all, &buffers);
  if (!first.ok()) return first.status();
  SortUnique(&all);
  Candidate best{.plan = std::move(first).value()};
  if (config.choose_by_replay) Evaluate(s, lt, d, budget, &best);
  // Lays the reloads (sorted, unique) out on the link, back to back, as late as possible.
  auto layout = [&](const std::vector<Reload>& sorted) {
    WindowOverrides overrides(static_cast<std::size_t>(s.tensors_size()));
    double link_free = std::numeric_limits<double>::infinity();
    for (const Reload& r : sorted) {
      double xfer = d.InUs(s.tensors(static_cast<int>(r.tensor)).size_bytes());
      link_free = std::min(start[static_cast<std::size_t>(r.use)], link_free) - xfer;
      std::int64_t w = StepAt(start, r.use, link_free);
      overrides.Set(r.tensor, r.use,
                    {w, std::max(0.0, link_free - start[static_cast<std::size_t>(w)])});
    }
    return overrides;
  };
  for (int pass = 0; pass < layout_passes; ++pass) {
    std::vector<Reload> made;
    auto next = PlanPass(s, lt, d, config, start, layout(all), options, &made, &buffers);
    if (!next.ok()) break;
    Candidate c{.plan = std::move(next).value()};
    if (!config.choose_by_replay) {
      best = std::move(c);
    } else if (Evaluate(s, lt, d, budget, &c); c.time_us <= best.time_us) {
      best = std::move(c);
    }
    std::size_t before = all.size();
    MergeUnique(&all, &made);
    if (all.size() - before <= before / 100) break;  // (nearly) nothing new to lay out
  }
  return best;
}

// The compute of one iteration, stalls apart.
double ComputeUs(const Schedule& s) {
  double us = 0;
  for (const auto& st : s.steps()) us += st.compute_us();
  return us;
}

// Whether a candidate's replay stalls more than 1% of the compute: where the planner tries more.
bool Stalls(const Candidate& c, double compute_us) {
  return c.time_us - compute_us > 0.01 * compute_us;
}

// The planner's rounds for one setting of its passes (PassOptions): a first round on the
// compute clock, rounds for a little less room (plain passes only), rounds on the clock the
// best plan replayed to; the fastest replay wins.
Result<Candidate> PlanRounds(const Schedule& s, const Lifetimes& lt, const DeviceProfile& d,
                             const PlannerConfig& config, const PassOptions& options) {
  const std::int64_t n = lt.steps();
  const std::int64_t total = n * PlannedIterations(s);
  const std::uint64_t budget = config.hbm_budget;
  auto best = PlanRound(s, lt, d, config, budget, StepStarts(s, n, total), 6, options);
  if (!best.ok() || !config.choose_by_replay) return best;
  // Where the link cannot keep up, the plan stalls, and every step after a stall starts later
  // than the compute estimates say: windows and link placements made on that clock are wrong.
  // Plan again on the clock the best plan replayed to (stalls included), a few rounds, keeping
  // whichever replays fastest.
  const double compute = ComputeUs(s);
  auto stalls = [&] { return Stalls(*best, compute); };
  // Planning for a little less than the budget leaves room for prefetches to land early and
  // copy-outs to finish late; the plan still holds the real budget. Two headrooms are tried in
  // turn, the second only while the plan still stalls; it rarely stops after the first, so with
  // a second core both are planned at once (independent rounds; the same plan either way).
  auto headroom_round = [&](double headroom) {
    PlannerConfig tighter = config;
    tighter.hbm_budget = static_cast<std::uint64_t>(static_cast<double>(budget) * headroom);
    return PlanRound(s, lt, d, tighter, budget, StepStarts(s, n, total), 3, options);
  };
  auto with_headrooms = [&](double first, double second) {
    if (!stalls()) return;
    std::future<Result<Candidate>> later;
    if (UsableCores() > 1) {
      later = std::async(std::launch::async, headroom_round, second);
    }
    auto next = headroom_round(first);
    if (next.ok() && next->time_us < best->time_us) best = std::move(next);
    if (!stalls()) return;  // `later`'s destructor waits for it; its plan is not needed
    next = later.valid() ? later.get() : headroom_round(second);
    if (next.ok() && next->time_us < best->time_us) best = std::move(next);
  };
  // (Rounds with early loads skip the headrooms: on 53 corpus plans they stalled 0.9% more in
  // total with them, and they are half of the rounds.)
  const bool headrooms = options.plain();
  if (headrooms) with_headrooms(0.97, 0.94);
  for (int round = 0; round < 3 && stalls(); ++round) {
    auto next =
        PlanRound(s, lt, d, config, budget, StepStarts(s, n, total, &best->replay), 2, options);
    if (!next.ok() || next->time_us >= best->time_us) break;
    best = std::move(next);
  }
  // Near the smallest budget that keeps within 1%, where the stall is a few percent, planning
  // for 10-15% less room sometimes finds the plan that does (less room is not always worse:
  // ConvNeXt-T on gh200 stalled 1.8% at 70% and 0 at 65%). Tried last, and kept only when it
  // replays faster, so that no plan gets worse for it; deeper in, where nothing hides the
  // link, it is not tried.
  if (headrooms && best->time_us - compute <= 0.05 * compute) with_headrooms(0.90, 0.85);
  return best;
}

// Where the best plan still stalls on a loop that reads persistent tensors it never writes, the
// plans that stream an evenly spread share of them through a ring (streamed_tensors.h), for the
// largest few sizes the ring may hold and a few ring depths, each replayed; kept where one
// stalls less. A dozen replays at most, and none where no such tensors can make the room.
void TryStreamedTensors(const Schedule& s, const Lifetimes& lt, const DeviceProfile& d,
                        std::uint64_t budget, Candidate* best) {
  if (!s.repeats()) return;
  std::vector<std::uint64_t> sizes;
  for (int i = 0; i < s.tensors_size(); ++i) {
    if (Streamable(s, lt, static_cast<std::uint32_t>(i)))
      sizes.push_back(s.tensors(i).size_bytes());
  }
  std::sort(sizes.rbegin(), sizes.rend());
  sizes.erase(std::unique(sizes.begin(), sizes.end()), sizes.end());
  if (sizes.size() > 3) sizes.resize(3);
  for (std::uint64_t largest : sizes) {
    for (int depth = 1; depth <= 4; ++depth) {
      auto plan =
          StreamedTensorsPlan(s, lt, d, {.budget = budget, .depth = depth, .largest = largest});
      if (!plan) break;  // a deeper ring needs more room still
      Candidate c{.plan = std::move(*plan)};
      Evaluate(s, lt, d, budget, &c);
      if (c.time_us < best->time_us) *best = std::move(c);
    }
  }
}

// Loads ahead of their windows into room nothing needs yet (plan_pass.h, EarlyLoads): a pass
// that evicts only on demand leaves the host->hbm link idle where room is free, and issuing the
// next loads into that room fills it. How far ahead suits a schedule varies (room taken early
// can force an eviction later), so where the plan stalls the rounds run again with two reaches,
// and with the first of them and reload-aware evictions (PassOptions), each on a core of its own
// where there is one; the fastest replay wins. (Of four reaches tried on 53 corpus plans, these
// two came within 0.2% of the best of all four in total stall; the third setting is for loops
// that stream: docs/schedules.md.)
void TryEarlyLoads(const Schedule& s, const Lifetimes& lt, const DeviceProfile& d,
                   const PlannerConfig& config, Candidate* best) {
  const std::int64_t n = lt.steps();
  const std::int64_t third = std::max<std::int64_t>(1, n / 3);
  const PassOptions variants[] = {
      {.early = {.steps = third, .holds_room = true}},
      {.early = {.steps = std::max<std::int64_t>(1, n / 12), .holds_room = false}},
      {.early = {.steps = third, .holds_room = true}, .reload_aware = true},
  };
  std::vector<std::future<Result<Candidate>>> runs;
  for (const auto& v : variants) {
    runs.push_back(std::async(UsableCores() > 1 ? std::launch::async : std::launch::deferred,
                              [&, v] { return PlanRounds(s, lt, d, config, v); }));
  }
  for (auto& r : runs) {
    auto next = r.get();
    if (next.ok() && next->time_us < best->time_us) *best = std::move(next).value();
  }
}

// The plan that moves tensors (no recompute): the rounds, then where it stalls early loads and
// streamed tensors.
Result<Candidate> PlanMoves(const Schedule& s, const Lifetimes& lt, const DeviceProfile& d,
                            const PlannerConfig& config) {
  auto best = PlanRounds(s, lt, d, config, {});
  if (!best.ok()) return best;
  const double compute = ComputeUs(s);
  if (!config.choose_by_replay || !Stalls(*best, compute)) return best;
  if (config.early_loads) TryEarlyLoads(s, lt, d, config, &*best);
  if (Stalls(*best, compute)) TryStreamedTensors(s, lt, d, config.hbm_budget, &*best);
  return best;
}

// Where the plan that moves tensors stalls: the plans for the schedule with recomputes
// (recompute.h), the candidates that free the most bytes for their compute taken greedily up to
// a sixteenth, an eighth, a quarter, a half and all of the compute the config allows, each
// planned and replayed (on a core of their own where there are), then the midpoints beside the
// fastest; kept where one runs faster than the plan that moves tensors only, its added compute
// included. (Too few recomputes leave the link behind; too many cost more than the stall they
// save; between the two the replay decides.)
void TryRecomputes(const Schedule& s, const Lifetimes& lt, const DeviceProfile& d,
                   const PlannerConfig& config, Candidate* best) {
  // A recompute's step may touch up to the budget: the rewritten schedule's floor stays within it.
  const auto candidates = RecomputeCandidates(s, lt, kRecomputeMinBytes, config.hbm_budget);
  if (candidates.empty()) return;
  const double cap = config.recompute_share * ComputeUs(s);
  PlannerConfig moves_only = config;
  moves_only.recompute_share = 0;
  std::vector<std::size_t> tried_sizes;  // a set is known by its size (greedy: prefixes differ)
  struct Tried {
    double part;
    double time_us;
  };
  std::vector<Tried> tried;
  auto plan_parts = [&](const std::vector<double>& parts) {
    std::vector<std::pair<double, std::future<Result<Candidate>>>> runs;
    for (double part : parts) {
      auto set = ChooseRecomputes(s, lt, candidates, part * cap, config.hbm_budget);
      if (set.empty() ||
          std::find(tried_sizes.begin(), tried_sizes.end(), set.size()) != tried_sizes.end()) {
        continue;
      }
      tried_sizes.push_back(set.size());
      auto plan_with = [&, set = std::move(set)]() -> Result<Candidate> {
        google::protobuf::RepeatedPtrField<schedule::Recompute> field(set.begin(), set.end());
        auto rewritten = ApplyRecomputes(s, field);
        if (!rewritten.ok()) return rewritten.status();
        const Lifetimes rewritten_lt(*rewritten);
        auto c = PlanMoves(*rewritten, rewritten_lt, d, moves_only);
        if (c.ok()) *c->plan.mutable_recomputes() = std::move(field);
        return c;
      };
      runs.emplace_back(part,
                        std::async(UsableCores() > 1 ? std::launch::async : std::launch::deferred,
                                   std::move(plan_with)));
    }
    for (auto& [part, run] : runs) {
      auto next = run.get();
      if (!next.ok()) continue;
      tried.push_back({part, next->time_us});
      if (next->time_us < best->time_us) *best = std::move(next).value();
    }
  };
  plan_parts({1.0 / 16, 1.0 / 8, 1.0 / 4, 1.0 / 2, 1.0});
  if (tried.empty()) return;
  std::sort(tried.begin(), tried.end(), [](auto a, auto b) { return a.part < b.part; });
  const auto fastest = std::min_element(tried.begin(), tried.end(),
                                        [](auto a, auto b) { return a.time_us < b.time_us; });
  std::vector<double> midpoints;
  if (fastest != tried.begin()) midpoints.push_back((fastest->part + (fastest - 1)->part) / 2);
  if (fastest + 1 != tried.end()) midpoints.push_back((fastest->part + (fastest + 1)->part) / 2);
  plan_parts(midpoints);
}

Result<schedule::Plan> BuildPlan(const Schedule& s, const Lifetimes& lt, const DeviceProfile& d,
                                 const PlannerConfig& config) {
  TIERPOOL_RETURN_IF_ERROR(config.validate());
  // The floor named at the first refusal, not the first step the walk finds short of room.
  TIERPOOL_RETURN_IF_ERROR(BelowStepFloor(config.hbm_budget, s, lt));
  auto best = PlanMoves(s, lt, d, config);
  if (!best.ok()) return best.status();
  if (config.recompute_share > 0 && config.choose_by_replay && Stalls(*best, ComputeUs(s))) {
    TryRecomputes(s, lt, d, config, &*best);
  }
  return std::move(best->plan);
}

}  // namespace tierpool::prefetch
