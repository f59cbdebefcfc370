#include "prefetch/report.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>
#include <utility>

#include "common/units.h"

namespace tierpool::prefetch {

using nlohmann::json;

namespace {
json StallCausesJson(const ReplayReport& r) {
  json out = json::array();
  for (const auto& c : r.stall_causes) {
    out.push_back({{"why", c.why},
                   {"tensor", c.tensor},
                   {"bytes", c.bytes},
                   {"step", c.step},
                   {"step_name", c.step_name},
                   {"us", c.us}});
  }
  return out;
}

json ReportObject(const ReplayReport& r) {
  json j = {{"policy", r.policy},
            {"hbm_budget_bytes", r.budget},
            {"peak_hbm_bytes", r.peak_hbm},
            {"time_us", r.time_us},
            {"compute_us", r.compute_us},
            {"stall_us", r.stall_us},
            {"stall_lower_bound_us", r.stall_lower_bound_us},
            {"bytes_h2d", r.h2d_bytes},
            {"bytes_d2h", r.d2h_bytes},
            {"actions", r.actions},
            {"missing_at_use", r.missing_at_use},
            {"budget_violations", r.budget_violations},
            {"bad_actions", r.bad_actions}};
  if (r.recomputed > 0) {
    j["recomputed"] = r.recomputed;
    j["recomputed_bytes"] = r.recomputed_bytes;
    j["recompute_us"] = r.recompute_us;
  }
  if (!r.stall_causes.empty()) j["stall_causes"] = StallCausesJson(r);
  if (!r.problems.empty()) j["problems"] = r.problems;
  return j;
}
}  // namespace

std::string StallCausesText(const ReplayReport& r, const std::string& lead) {
  std::string out;
  char buf[512];
  for (const auto& c : r.stall_causes) {
    const std::string what =
        c.tensor.empty() ? "" : " for " + c.tensor + " (" + FormatBytes(c.bytes) + ")";
    const std::string why = c.why.starts_with("stall: ") ? c.why.substr(7) : c.why;
    const std::string link = c.link.empty() ? "" : " on the " + c.link + " link";
    std::snprintf(buf, sizeof(buf), "%s%.3f ms waiting: %s%s%s, from step %u (%s)\n", lead.c_str(),
                  c.us / 1000, why.c_str(), what.c_str(), link.c_str(), c.step,
                  c.step_name.c_str());
    out += buf;
  }
  return out;
}

std::string ReportJson(const ReplayReport& r, const Schedule& s) {
  json j = ReportObject(r);
  j["schedule"] = s.name();
  j["device"] = s.device();
  j["steps"] = s.steps_size();
  j["tensors"] = s.tensors_size();
  return j.dump(2);
}

std::string ChromeTraceJson(const ReplayReport& r) {
  json events = json::array();
  events.push_back({{"name", "thread_name"},
                    {"ph", "M"},
                    {"pid", 1},
                    {"tid", 1},
                    {"args", {{"name", "compute"}}}});
  events.push_back({{"name", "thread_name"},
                    {"ph", "M"},
                    {"pid", 1},
                    {"tid", 2},
                    {"args", {{"name", "host->hbm"}}}});
  events.push_back({{"name", "thread_name"},
                    {"ph", "M"},
                    {"pid", 1},
                    {"tid", 3},
                    {"args", {{"name", "hbm->host"}}}});
  for (const auto& e : r.timeline) {
    switch (e.kind) {
      case TimelineEvent::Kind::kCompute:
      case TimelineEvent::Kind::kStall:
        events.push_back({{"name", e.name},
                          {"cat", e.kind == TimelineEvent::Kind::kStall ? "stall" : "compute"},
                          {"ph", "X"},
                          {"ts", e.start_us},
                          {"dur", e.dur_us},
                          {"pid", 1},
                          {"tid", 1}});
        break;
      case TimelineEvent::Kind::kH2D:
      case TimelineEvent::Kind::kD2H:
        events.push_back({{"name", e.name},
                          {"cat", "transfer"},
                          {"ph", "X"},
                          {"ts", e.start_us},
                          {"dur", e.dur_us},
                          {"pid", 1},
                          {"tid", e.kind == TimelineEvent::Kind::kH2D ? 2 : 3}});
        break;
      case TimelineEvent::Kind::kHbmBytes:
      case TimelineEvent::Kind::kHostBytes:
        events.push_back(
            {{"name", e.kind == TimelineEvent::Kind::kHbmBytes ? "hbm bytes" : "host bytes"},
             {"ph", "C"},
             {"ts", e.start_us},
             {"pid", 1},
             {"args", {{"bytes", e.value}}}});
        break;
    }
  }
  json doc = {{"traceEvents", events}, {"displayTimeUnit", "ms"}, {"otherData", ReportObject(r)}};
  return doc.dump();
}

namespace {

// Where a report's measured iteration starts: its first compute or counter (transfers issued
// in the warm-up iteration may start before it), and where its timeline ends.
std::pair<double, double> Span(const ReplayReport& r) {
  double t0 = std::numeric_limits<double>::infinity(), t1 = 0;
  for (const auto& e : r.timeline) {
    if (e.kind != TimelineEvent::Kind::kH2D && e.kind != TimelineEvent::Kind::kD2H) {
      t0 = std::min(t0, e.start_us);
    }
    t1 = std::max(t1, e.start_us + e.dur_us);
  }
  if (!std::isfinite(t0)) t0 = 0;
  return {t0, std::max(t1, t0 + 1)};
}

}  // namespace

std::string MemorySvg(const ReplayReport& r, const std::string& title,
                      const std::vector<const ReplayReport*>& others) {
  const double w = 960, h = 480, left = 80, right = 30, top = 100, bottom = 60;
  // One time axis for every run, from each one's own start: the longest sets its length.
  double span = 1, ymax = 1;
  std::vector<const ReplayReport*> all = {&r};
  all.insert(all.end(), others.begin(), others.end());
  for (const ReplayReport* x : all) {
    const auto [t0, t1] = Span(*x);
    span = std::max(span, t1 - t0);
    for (const auto& e : x->timeline) {
      if (e.kind == TimelineEvent::Kind::kHbmBytes || e.kind == TimelineEvent::Kind::kHostBytes) {
        ymax = std::max(ymax, e.value);
      }
    }
  }
  if (r.budget > 0) ymax = std::max(ymax, static_cast<double>(r.budget));
  auto x = [&](double t) { return left + std::clamp(t / span, 0.0, 1.0) * (w - left - right); };
  auto y = [&](double v) { return top + (1 - v / (ymax * 1.05)) * (h - top - bottom); };
  std::ostringstream out;
  out << "<svg xmlns='http://www.w3.org/2000/svg' width='" << w << "' height='" << h
      << "' font-family='sans-serif' font-size='12'>\n<rect width='100%' height='100%' "
         "fill='white'/>\n"
      << "<text x='" << left << "' y='20' font-size='14'>" << title << " — " << r.policy
      << "</text>\n";
  int row = 0;
  auto series = [&](const ReplayReport& rep, TimelineEvent::Kind kind, const char* color,
                    const std::string& label, const char* dash) {
    const double t0 = Span(rep).first, t1 = Span(rep).second;
    std::ostringstream pts;
    double last = 0;
    bool first = true;
    for (const auto& e : rep.timeline) {
      if (e.kind != kind) continue;
      if (!first) pts << x(e.start_us - t0) << "," << y(last) << " ";
      pts << x(e.start_us - t0) << "," << y(e.value) << " ";
      last = e.value;
      first = false;
    }
    pts << x(t1 - t0) << "," << y(last);
    out << "<polyline fill='none' stroke='" << color << "' stroke-width='1.5' "
        << (*dash ? std::string("stroke-dasharray='") + dash + "' " : std::string()) << "points='"
        << pts.str() << "'/>\n<text x='" << w - 360 << "' y='" << 16 + 14 * row << "' fill='"
        << color << "'>" << label << "</text>\n";
    ++row;
  };
  auto ms = [](double us) {
    char buf[32];
    std::snprintf(buf, sizeof(buf), "%.1f ms", us / 1000);
    return std::string(buf);
  };
  series(r, TimelineEvent::Kind::kHostBytes, "#2a7", "host (pooled dram) bytes, " + r.policy, "");
  series(r, TimelineEvent::Kind::kHbmBytes, "#c33",
         "hbm bytes, " + r.policy + " (" + ms(r.time_us) + ", stall " + ms(r.stall_us) + ")", "");
  const char* colors[] = {"#888", "#e90", "#36c"};
  for (std::size_t i = 0; i < others.size(); ++i) {
    const ReplayReport& o = *others[i];
    const std::string what =
        o.policy == "none"
            ? "hbm bytes without offload (" + ms(o.time_us) + ")"
            : "hbm bytes, " + o.policy + " (" + ms(o.time_us) + ", stall " + ms(o.stall_us) + ")";
    series(o, TimelineEvent::Kind::kHbmBytes, colors[i % 3], what,
           o.policy == "none" ? "2,3" : "6,3");
  }
  // Where compute waited, and for what: red marks under the axis, the step in their title.
  const double t0 = Span(r).first;
  for (const auto& e : r.timeline) {
    if (e.kind != TimelineEvent::Kind::kStall || e.dur_us <= 0) continue;
    out << "<rect x='" << x(e.start_us - t0) << "' y='" << h - bottom + 2 << "' width='"
        << std::max(1.0, x(e.start_us - t0 + e.dur_us) - x(e.start_us - t0))
        << "' height='6' fill='#c00'><title>" << e.name << ": " << ms(e.dur_us)
        << "</title></rect>\n";
  }
  if (r.stall_us > 0) {
    out << "<text x='" << w - 360 << "' y='" << 16 + 14 * row << "' fill='#c00'>"
        << "marks under the axis: " << r.policy << " waiting for its tensors</text>\n";
  }
  if (r.budget > 0) {
    out << "<line x1='" << left << "' x2='" << w - right << "' y1='"
        << y(static_cast<double>(r.budget)) << "' y2='" << y(static_cast<double>(r.budget))
        << "' stroke='#888' stroke-dasharray='6,4'/>\n<text x='" << left + 4 << "' y='"
        << y(static_cast<double>(r.budget)) - 4 << "' fill='#666'>hbm budget "
        << FormatBytes(r.budget) << "</text>\n";
  }
  // Axes.
  out << "<line x1='" << left << "' y1='" << h - bottom << "' x2='" << w - right << "' y2='"
      << h - bottom << "' stroke='black'/>\n<line x1='" << left << "' y1='" << top << "' x2='"
      << left << "' y2='" << h - bottom << "' stroke='black'/>\n";
  for (int i = 0; i <= 4; ++i) {
    double v = ymax * 1.05 * i / 4, t = span * i / 4;
    out << "<text x='" << left - 6 << "' y='" << y(v) + 4 << "' text-anchor='end'>"
        << FormatBytes(static_cast<std::uint64_t>(v)) << "</text>\n";
    out << "<text x='" << x(t) << "' y='" << h - bottom + 22 << "' text-anchor='"
        << (i == 4 ? "end" : "middle") << "'>" << ms(t) << "</text>\n";
  }
  out << "<text x='" << (w + left) / 2 << "' y='" << h - 12
      << "' text-anchor='middle'>time (one iteration)</text>\n</svg>\n";
  return out.str();
}

Status SweepOptions::validate() const {
  if (!(step > 0 && step < 1) || !(lowest > 0 && lowest <= 1)) {
    return Status::InvalidArgument("sweep step and lowest fraction must be in (0, 1)");
  }
  if (!(max_overhead >= 0)) return Status::InvalidArgument("sweep overhead must be >= 0");
  if (jobs < 1 || jobs > 256) return Status::InvalidArgument("sweep jobs must be in [1, 256]");
  return lp_bound ? lp.validate() : Status::Ok();
}

Result<SweepResult> Sweep(const Schedule& s, const Lifetimes& lt, const DeviceProfile& d,
                          const SweepOptions& options) {
  if (Status st = options.validate(); !st.ok()) return st;
  const double max_overhead = options.max_overhead;
  SweepResult out;
  out.max_overhead = max_overhead;
  auto none = Replay(s, lt, d, {.policy = Policy::kNone});
  if (!none.ok()) return none.status();
  out.none = std::move(none).value();
  out.step_floor_bytes = lt.step_floor_bytes();
  out.step_floor_step = lt.step_floor_step();
  const double base_time = out.none.time_us;
  // The budgets: fractions of the peak in steps, and the step floor itself where it falls
  // between two of them above the lowest (the one below it is infeasible for every policy, so
  // the floor is the lowest budget any plan can keep).
  struct Budget {
    double fraction;
    std::uint64_t bytes;
    bool at_floor = false;
  };
  const auto peak = static_cast<double>(out.none.peak_hbm);
  std::vector<Budget> budgets;
  for (double f = 1.0; f >= options.lowest - 1e-9; f -= options.step) {
    budgets.push_back({f, static_cast<std::uint64_t>(peak * f)});
  }
  const std::uint64_t floor = out.step_floor_bytes;
  for (std::size_t i = 1; i < budgets.size(); ++i) {
    if (budgets[i - 1].bytes > floor && floor > budgets[i].bytes) {
      budgets.insert(budgets.begin() + static_cast<std::ptrdiff_t>(i),
                     {static_cast<double>(floor) / peak, floor, true});
      break;
    }
  }

  // One budget's row; budgets share nothing but the (read-only) schedule and profile.
  struct Worked {
    Result<SweepRow> row = Status::Internal("not worked on");
    double planning_ms = 0, guided_planning_ms = 0;
  };
  auto work = [&](const Budget& b) {
    Worked w;
    SweepRow row;
    row.fraction = b.fraction;
    row.budget = b.bytes;
    row.at_step_floor = b.at_floor;
    auto reactive = Replay(s, lt, d, {.policy = Policy::kReactiveLru, .hbm_budget = row.budget});
    if (reactive.ok()) row.reactive = std::move(reactive).value();
    const PlannerConfig config{.hbm_budget = row.budget,
                               .prefetch_margin = options.prefetch_margin,
                               .early_loads = options.early_loads,
                               .recompute_share = options.recompute_share};
    auto t0 = std::chrono::steady_clock::now();
    auto plan = BuildPlan(s, lt, d, config);
    w.planning_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (plan.ok()) {
      auto planned =
          Replay(s, lt, d, {.policy = Policy::kPlanned, .hbm_budget = row.budget, .plan = &*plan});
      if (!planned.ok()) {
        w.row = planned.status();
        return w;
      }
      row.planned = std::move(planned).value();
      row.planned_ok = true;
    } else {
      row.planned_error = plan.status().message();
    }
    if (options.lp_bound) {
      // The bound, and the plan it guides where the plain one stalls, from one solve.
      auto g = GuideByLp(s, lt, d, config, options.lp, row.planned_ok ? &row.planned : nullptr);
      if (!g.ok()) {
        w.row = g.status();
        return w;
      }
      row.lp = std::move(g->lp);
      row.guided = std::move(g->replay);
      w.guided_planning_ms = g->planning_ms;
    }
    w.row = std::move(row);
    return w;
  };
  std::vector<Worked> worked(budgets.size());
  std::atomic<std::size_t> next{0};
  auto worker = [&] {
    for (std::size_t i = next++; i < budgets.size(); i = next++) worked[i] = work(budgets[i]);
  };
  {
    std::vector<std::jthread> helpers;
    const std::size_t extra = std::min<std::size_t>(options.jobs, budgets.size()) - 1;
    for (std::size_t j = 0; j < extra; ++j) helpers.emplace_back(worker);
    worker();
  }  // the helpers are joined here

  for (auto& w : worked) {
    if (!w.row.ok()) return w.row.status();
    SweepRow row = std::move(w.row).value();
    out.planning_ms_max = std::max(out.planning_ms_max, w.planning_ms);
    out.guided_planning_ms_max = std::max(out.guided_planning_ms_max, w.guided_planning_ms);
    if (row.planned_ok) {
      auto within = [&](const ReplayReport& r) {
        return r.time_us / base_time - 1 <= max_overhead + 1e-12;
      };
      if (within(row.planned)) out.smallest_within = out.rows.size();
      if (within(row.better_plan())) out.smallest_within_guided = out.rows.size();
    }
    out.rows.push_back(std::move(row));
  }
  return out;
}

namespace {

// A row's budget as a share of the peak: a round percentage for the sweep's own steps, one
// decimal for the step floor's row, which is not one of them.
std::string BudgetShare(const SweepRow& row) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), row.at_step_floor ? "%.1f%%" : "%.0f%%", 100 * row.fraction);
  return buf;
}

}  // namespace

std::string SweepTable(const SweepResult& r, const Schedule& s, const DeviceProfile& d) {
  std::ostringstream o;
  char buf[256];
  double base = r.none.time_us;
  std::snprintf(buf, sizeof(buf), "%s on %s: no-offload peak %s, iteration %.2f ms\n",
                s.name().c_str(), d.name.c_str(), FormatBytes(r.none.peak_hbm).c_str(),
                base / 1000);
  o << buf;
  std::snprintf(buf, sizeof(buf), "%7s %12s | %12s %9s %10s | %12s %9s %10s | %10s | %9s %9s\n",
                "budget", "bytes", "planned peak", "overhead", "stall ms", "reactive pk",
                "overhead", "stall ms", "guided ms", "bound ms", "LP ms");
  o << buf;
  for (const auto& row : r.rows) {
    std::string p_peak = "infeasible", p_over = "-", p_stall = "-";
    if (row.planned_ok) {
      p_peak = FormatBytes(row.planned.peak_hbm);
      std::snprintf(buf, sizeof(buf), "%+.2f%%", 100 * (row.planned.time_us / base - 1));
      p_over = buf;
      std::snprintf(buf, sizeof(buf), "%.3f", row.planned.stall_us / 1000);
      p_stall = buf;
    }
    char r_over[32], r_stall[32];
    std::snprintf(r_over, sizeof(r_over), "%+.2f%%", 100 * (row.reactive.time_us / base - 1));
    std::snprintf(r_stall, sizeof(r_stall), "%.3f", row.reactive.stall_us / 1000);
    std::string lp = "-";
    if (row.lp && !row.lp->feasible) {
      lp = "infeasible";
    } else if (row.lp) {
      std::snprintf(buf, sizeof(buf), "%.3f%s", row.lp->stall_us / 1000, row.lp->proven ? "" : "?");
      lp = buf;
    }
    std::string guided = "-";  // the LP-guided plan's stall, where one was made
    if (row.guided) {
      std::snprintf(buf, sizeof(buf), "%.3f", row.guided->stall_us / 1000);
      guided = buf;
    }
    std::snprintf(buf, sizeof(buf), "%7s %12s | %12s %9s %10s | %12s %9s %10s | %10s | %9.3f %9s\n",
                  BudgetShare(row).c_str(), FormatBytes(row.budget).c_str(), p_peak.c_str(),
                  p_over.c_str(), p_stall.c_str(), FormatBytes(row.reactive.peak_hbm).c_str(),
                  r_over, r_stall, guided.c_str(), row.reactive.stall_lower_bound_us / 1000,
                  lp.c_str());
    o << buf;
  }
  if (r.smallest_within) {
    const auto& row = r.rows[*r.smallest_within];
    std::snprintf(
        buf, sizeof(buf),
        "smallest budget within %.1f%% overhead: %s (%s of the no-offload peak%s %.1f%% lower "
        "peak)\n",
        100 * r.max_overhead, FormatBytes(row.budget).c_str(), BudgetShare(row).c_str(),
        row.at_step_floor ? ": the step floor, no policy lower;" : ",",
        100 *
            (1 - static_cast<double>(row.planned.peak_hbm) / static_cast<double>(r.none.peak_hbm)));
    o << buf;
  } else {
    o << "no budget in the sweep stays within the overhead\n";
  }
  if (r.smallest_within_guided && r.smallest_within_guided != r.smallest_within) {
    const auto& row = r.rows[*r.smallest_within_guided];
    std::snprintf(buf, sizeof(buf), "...with the LP-guided plan where it is faster: %s (%s)\n",
                  FormatBytes(row.budget).c_str(), BudgetShare(row).c_str());
    o << buf;
  }
  bool recomputes = false;
  for (const auto& row : r.rows) {
    if (!row.planned_ok || row.planned.recomputed == 0) continue;
    if (!recomputes)
      o << "planned with recomputes (in its overhead; the bounds are for plans that only move):";
    recomputes = true;
    std::snprintf(buf, sizeof(buf), " %s: %u (%s, %.3f ms);", BudgetShare(row).c_str(),
                  row.planned.recomputed, FormatBytes(row.planned.recomputed_bytes).c_str(),
                  row.planned.recompute_us / 1000);
    o << buf;
  }
  if (recomputes) o << "\n";
  if (r.none.peak_hbm > 0 && s.steps_size() > 0) {
    std::snprintf(buf, sizeof(buf), "no policy keeps a budget below %s (%.1f%% of the peak): ",
                  FormatBytes(r.step_floor_bytes).c_str(), 100 * r.step_floor_fraction());
    o << buf << "step " << r.step_floor_step << " ("
      << s.steps(static_cast<int>(r.step_floor_step)).name() << ") touches that much at once\n";
  }
  std::uint64_t breaches = 0, worse_half = 0, unreachable = 0, guided_faster = 0, guided_made = 0;
  double worst_gap = 0;       // planned stall over the best bound, where the bound is above 0
  double worst_best_gap = 0;  // the better of planned and guided over the bound
  std::size_t worst_gap_row = 0, worst_best_gap_row = 0;
  for (std::size_t i = 0; i < r.rows.size(); ++i) {
    const auto& row = r.rows[i];
    if (!row.planned_ok) continue;
    breaches += row.planned.breaches();
    if (row.planned.stall_us > 0.5 * row.reactive.stall_us + 1e-9) {
      ++worse_half;
      if (0.5 * row.reactive.stall_us < row.stall_bound_us()) ++unreachable;
    }
    if (row.stall_bound_us() > 0 && row.planned.stall_us / row.stall_bound_us() > worst_gap) {
      worst_gap = row.planned.stall_us / row.stall_bound_us();
      worst_gap_row = i;
    }
    if (row.guided) {
      ++guided_made;
      if (row.guided->stall_us < row.planned.stall_us) ++guided_faster;
    }
    const double best_stall = row.better_plan().stall_us;
    if (row.stall_bound_us() > 0 && best_stall / row.stall_bound_us() > worst_best_gap) {
      worst_best_gap = best_stall / row.stall_bound_us();
      worst_best_gap_row = i;
    }
  }
  std::snprintf(buf, sizeof(buf),
                "slowest plan: %.1f ms; invariant breaches in planned replays: %llu\n"
                "planned stall above half of reactive-lru's at %llu of %zu budgets (at %llu of "
                "them, half is below the lower bound: no policy gets there)\n",
                r.planning_ms_max, static_cast<unsigned long long>(breaches),
                static_cast<unsigned long long>(worse_half), r.rows.size(),
                static_cast<unsigned long long>(unreachable));
  o << buf;
  if (worst_gap > 0) {
    std::snprintf(buf, sizeof(buf),
                  "planned stall over the best lower bound: at most %.2fx (at %.0f%%)\n", worst_gap,
                  100 * r.rows[worst_gap_row].fraction);
    o << buf;
    // Where the plan is farthest from the bound, what it waits for.
    if (worst_gap > 1.25) o << StallCausesText(r.rows[worst_gap_row].planned, "  its stall: ");
  }
  if (guided_made > 0) {
    std::snprintf(buf, sizeof(buf),
                  "LP-guided plans: less stall at %llu of %llu budgets; slowest %.1f ms (the LP's "
                  "solve apart)\n",
                  static_cast<unsigned long long>(guided_faster),
                  static_cast<unsigned long long>(guided_made), r.guided_planning_ms_max);
    o << buf;
    if (worst_best_gap > 0) {
      std::snprintf(
          buf, sizeof(buf),
          "the better plan's stall over the best lower bound: at most %.2fx (at %.0f%%)\n",
          worst_best_gap, 100 * r.rows[worst_best_gap_row].fraction);
      o << buf;
    }
  }
  return o.str();
}

std::string SweepJson(const SweepResult& r, const Schedule& s, const DeviceProfile& d) {
  json rows = json::array();
  for (const auto& row : r.rows) {
    json j = {{"fraction", row.fraction},
              {"budget_bytes", row.budget},
              {"reactive", ReportObject(row.reactive)}};
    if (row.at_step_floor) j["at_step_floor"] = true;
    if (row.lp) {
      j["lp_bound"] = {{"stall_us", row.lp->feasible ? row.lp->stall_us : -1.0},
                       {"feasible", row.lp->feasible},
                       {"proven", row.lp->proven},
                       {"windows", row.lp->windows},
                       {"tensor_groups", row.lp->tensor_groups},
                       {"columns", row.lp->columns},
                       {"rows", row.lp->rows},
                       {"solve_ms", row.lp->solve_ms}};
    }
    if (row.guided) j["guided"] = ReportObject(*row.guided);
    if (row.planned_ok) {
      j["planned"] = ReportObject(row.planned);
    } else {
      j["planned_error"] = row.planned_error;
    }
    rows.push_back(j);
  }
  json out = {{"schedule", s.name()},
              {"device", d.name},
              {"max_overhead", r.max_overhead},
              {"none", ReportObject(r.none)},
              {"rows", rows},
              {"step_floor",
               {{"bytes", r.step_floor_bytes},
                {"fraction", r.step_floor_fraction()},
                {"step", r.step_floor_step}}},
              {"planning_ms_max", r.planning_ms_max},
              {"guided_planning_ms_max", r.guided_planning_ms_max}};
  if (r.smallest_within) {
    const auto& row = r.rows[*r.smallest_within];
    out["smallest_budget_within_overhead"] = {
        {"budget_bytes", row.budget},
        {"fraction", row.fraction},
        {"peak_reduction",
         1 - static_cast<double>(row.planned.peak_hbm) / static_cast<double>(r.none.peak_hbm)}};
  }
  if (r.smallest_within_guided) {
    const auto& row = r.rows[*r.smallest_within_guided];
    out["smallest_budget_within_overhead_guided"] = {{"budget_bytes", row.budget},
                                                     {"fraction", row.fraction}};
  }
  return out.dump(2);
}

}  // namespace tierpool::prefetch
