#include "compiler_hooks/tool/plan_replay.h"

#include <google/protobuf/util/json_util.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <optional>
#include <vector>

#include "common/units.h"
#include "compiler_hooks/tool/tool_common.h"
#include "prefetch/cost_model.h"
#include "prefetch/guided_plan.h"
#include "prefetch/report.h"
#include "prefetch/simulator.h"

namespace tierpool::tool {

using namespace tierpool::prefetch;

namespace {

// Boundaries of the LP that guides a single plan (plan|replay --lp-guided) unless asked.
constexpr unsigned kGuideWindows = 8;

void PrintRecomputes(const ReplayReport& r) {
  if (r.recomputed == 0) return;
  std::printf("recomputes %u activations (%s) instead of moving them, adding %.3f ms of compute\n",
              r.recomputed, FormatBytes(r.recomputed_bytes).c_str(), r.recompute_us / 1000);
}

// A share from the command line: "0.05" or "5%", in [0, 1]; empty is 0.
Result<double> ParseShare(const std::string& text, const std::string& flag) {
  if (text.empty()) return 0.0;
  const bool percent = text.back() == '%';
  try {
    std::size_t used = 0;
    const std::string number = percent ? text.substr(0, text.size() - 1) : text;
    double v = std::stod(number, &used);
    if (used != number.size()) throw std::invalid_argument(text);
    if (percent) v /= 100;
    if (!(v >= 0 && v <= 1)) throw std::out_of_range(text);
    return v;
  } catch (const std::exception&) {
    return Status::InvalidArgument(flag + " '" + text + "': a share of the compute, 0.05 or 5%");
  }
}

}  // namespace

int PlanOrReplay(const std::string& cmd, const std::string& path, const DeviceProfile& profile,
                 const PlanReplayFlags& f) {
  auto s = LoadSchedule(path);
  if (!s.ok()) return Fail(s.status());
  if (!f.split_updates.empty()) {
    auto r = SplitUpdates(*s, f.split_updates);
    if (!r.ok()) return Fail(r.status());
    *s = std::move(r->schedule);
  }
  ApplyCostModel(profile, &*s);
  Lifetimes lt(*s);
  auto recompute_share = ParseShare(f.recompute, "--recompute");
  if (!recompute_share.ok()) return Fail(recompute_share.status());
  if (cmd == "replay" && f.sweep) {
    auto r = Sweep(*s, lt, profile,
                   {.max_overhead = f.max_overhead,
                    .step = f.sweep_step,
                    .lowest = f.sweep_lowest,
                    .prefetch_margin = f.margin,
                    .early_loads = !f.no_early_loads,
                    .recompute_share = *recompute_share,
                    .lp_bound = f.lp_windows > 0,
                    .lp = {.max_windows = std::max(f.lp_windows, 2u)},
                    .jobs = f.sweep_jobs});
    if (!r.ok()) return Fail(r.status());
    std::cout << SweepTable(*r, *s, profile);
    if (!f.json.empty()) {
      Status st = WriteFile(f.json, SweepJson(*r, *s, profile));
      if (!st.ok()) return Fail(st);
    }
    return 0;
  }
  std::optional<schedule::Plan> plan;
  if (!f.plan_file.empty()) {
    if (cmd != "replay" || f.policy != "planned" || f.lp_guided) {
      return Fail(Status::InvalidArgument(
          "--plan replays a plan made earlier: `replay` with the planned policy only"));
    }
    auto loaded = LoadPlan(f.plan_file, *s);
    if (!loaded.ok()) return Fail(loaded.status());
    plan = std::move(loaded).value();
  }
  if (f.hbm.empty() && !(cmd == "replay" && f.policy == "none") && !plan) {
    return Fail(Status::InvalidArgument("give --hbm BUDGET (a size, or a % of the peak)"));
  }
  std::uint64_t budget = plan ? plan->hbm_budget_bytes() : 0;  // a plan's own, unless given
  if (!f.hbm.empty()) {
    auto b = ParseHbmBudget(f.hbm, lt.peak_bytes());
    if (!b.ok()) return Fail(b.status());
    budget = *b;
  }
  auto p = ParsePolicy(f.policy);
  if (!p.ok()) return Fail(p.status());
  if (!plan && (cmd == "plan" || *p == Policy::kPlanned)) {
    const PlannerConfig config{.hbm_budget = budget,
                               .prefetch_margin = f.margin,
                               .early_loads = !f.no_early_loads,
                               .recompute_share = *recompute_share};
    if (f.lp_guided) {
      // A guide needs few boundaries: at 8 the guided plans stalled about as little as at 64,
      // for a solve 5-40x shorter (docs/benchmarks/planning.md, "A coarse LP guides as well").
      // Asked for, --lp-windows gives more (a tighter bound to print beside the plan).
      const unsigned windows = !f.lp_windows_given ? kGuideWindows : f.lp_windows;
      auto built =
          BuildLpGuidedPlan(*s, lt, profile, config, {.max_windows = std::max(windows, 2u)});
      if (!built.ok()) return Fail(built.status());
      char guided[64] = "not made (nothing to guide)";
      const auto& g = built->guidance;
      if (g.replay) std::snprintf(guided, sizeof(guided), "%.3f ms", g.replay->stall_us / 1000);
      std::printf(
          "LP bound %.3f ms%s (%.1f s); stall of the plain plan %.3f ms, guided %s: "
          "kept the %s one\n",
          g.lp.stall_us / 1000, g.lp.proven ? "" : " (unproven)", g.lp.solve_ms / 1000,
          built->plain_replay.stall_us / 1000, guided, built->guided ? "guided" : "plain");
      plan = std::move(built->plan);
    } else {
      auto built = BuildPlan(*s, lt, profile, config);
      if (!built.ok()) return Fail(built.status());
      plan = std::move(built).value();
    }
  }
  if (cmd == "plan") {
    if (f.out.empty() && f.json.empty()) return Fail(Status::InvalidArgument("give -o PLAN.pb"));
    // What the plan does on the profile's clock, as `replay --policy planned` would show it.
    // A plan whose replay breaks the budget or loses a copy is the planner's bug: it is
    // reported and not written, so that no executor is handed it.
    auto check =
        Replay(*s, lt, profile, {.policy = Policy::kPlanned, .hbm_budget = budget, .plan = &*plan});
    if (!check.ok()) return Fail(check.status());
    if (check->breaches() > 0) {
      for (const auto& prob : check->problems) std::printf("  problem: %s\n", prob.c_str());
      return Fail(Status::Internal(
          "the plan breaks " + std::to_string(check->breaches()) +
          " invariant(s) in replay (a planner bug: please report it with the schedule); "
          "not written"));
    }
    if (!f.out.empty()) {
      std::ofstream file(f.out, std::ios::binary | std::ios::trunc);
      if (!plan->SerializeToOstream(&file)) return Fail(Status::IoError("cannot write " + f.out));
    }
    if (!f.json.empty()) {
      std::string text;
      google::protobuf::util::JsonPrintOptions jo;
      jo.add_whitespace = true;
      jo.preserve_proto_field_names = true;
      (void)google::protobuf::util::MessageToJsonString(*plan, &text, jo);
      Status st = WriteFile(f.json, text);
      if (!st.ok()) return Fail(st);
    }
    std::printf("plan for %s under %s on %s: %d actions, predicted peak %s\n", s->name().c_str(),
                FormatBytes(budget).c_str(), profile.name.c_str(), plan->actions_size(),
                FormatBytes(plan->predicted_peak_bytes()).c_str());
    std::printf(
        "replayed: iteration %.3f ms = compute %.3f ms + stall %.3f ms (%+.2f%%), "
        "peak hbm %s, h2d %s, d2h %s\n",
        check->time_us / 1000, check->compute_us / 1000, check->stall_us / 1000,
        check->compute_us > 0 ? 100 * check->stall_us / check->compute_us : 0.0,
        FormatBytes(check->peak_hbm).c_str(), FormatBytes(check->h2d_bytes).c_str(),
        FormatBytes(check->d2h_bytes).c_str());
    PrintRecomputes(*check);
    if (check->stall_us > 0.01 * check->compute_us) {
      std::cout << "where it stalls:\n" << StallCausesText(*check, "  ");
    }
    if (!f.lp_guided && check->stall_us > 0.01 * check->compute_us) {
      // Where plans stall, the guided planner stalled 36% less in total on 21 corpus budgets
      // (docs/benchmarks/planning.md, "A coarse LP guides as well"); it costs seconds, so it is
      // asked.
      std::printf("the plan stalls; --lp-guided may find one that stalls less (seconds more)\n");
    }
    return 0;
  }
  auto r = Replay(*s, lt, profile,
                  {.policy = *p,
                   .hbm_budget = budget,
                   .plan = plan ? &*plan : nullptr,
                   .record_timeline = !f.trace.empty() || !f.svg.empty()});
  if (!r.ok()) return Fail(r.status());
  std::printf(
      "%s, %s, budget %s: peak hbm %s, time %.3f ms (compute %.3f ms, stall %.3f ms, "
      "lower bound %.3f ms), h2d %s, d2h %s, %llu actions\n",
      s->name().c_str(), r->policy.c_str(), budget ? FormatBytes(budget).c_str() : "none",
      FormatBytes(r->peak_hbm).c_str(), r->time_us / 1000, r->compute_us / 1000, r->stall_us / 1000,
      r->stall_lower_bound_us / 1000, FormatBytes(r->h2d_bytes).c_str(),
      FormatBytes(r->d2h_bytes).c_str(), static_cast<unsigned long long>(r->actions));
  PrintRecomputes(*r);
  if (r->stall_us > 0.01 * r->compute_us) {
    std::cout << "where it stalls:\n" << StallCausesText(*r, "  ");
  }
  for (const auto& prob : r->problems) std::printf("  problem: %s\n", prob.c_str());
  if (!f.json.empty()) {
    Status st = WriteFile(f.json, ReportJson(*r, *s));
    if (!st.ok()) return Fail(st);
  }
  if (!f.trace.empty()) {
    Status st = WriteFile(f.trace, ChromeTraceJson(*r));
    if (!st.ok()) return Fail(st);
  }
  if (!f.svg.empty()) {
    // Beside the run: the schedule without offload, and under the other policy (planned
    // beside reactive-lru, or reactive-lru beside planned), so the picture shows why a run
    // is slower, not only that it kept the budget.
    std::vector<ReplayReport> beside;
    auto add = [&](Policy other, const schedule::Plan* other_plan) -> Status {
      auto o = Replay(*s, lt, profile,
                      {.policy = other,
                       .hbm_budget = other == Policy::kNone ? 0 : budget,
                       .plan = other_plan,
                       .record_timeline = true});
      if (!o.ok()) return o.status();
      beside.push_back(std::move(o).value());
      return Status::Ok();
    };
    std::optional<schedule::Plan> other_plan;
    if (*p != Policy::kNone) {
      if (Status e = add(Policy::kNone, nullptr); !e.ok()) return Fail(e);
      if (*p == Policy::kPlanned) {
        if (Status e = add(Policy::kReactiveLru, nullptr); !e.ok()) return Fail(e);
      } else {
        auto built = BuildPlan(*s, lt, profile, {.hbm_budget = budget});
        if (built.ok()) {
          other_plan = std::move(built).value();
          if (Status e = add(Policy::kPlanned, &*other_plan); !e.ok()) return Fail(e);
        }
      }
    }
    std::vector<const ReplayReport*> others;
    for (const auto& o : beside) others.push_back(&o);
    Status st = WriteFile(f.svg, MemorySvg(*r, s->name() + " on " + profile.name, others));
    if (!st.ok()) return Fail(st);
  }
  return r->breaches() == 0 ? 0 : 3;
}

}  // namespace tierpool::tool
