#include "prefetch/guided_plan.h"

#include <chrono>
#include <optional>
#include <utility>

namespace tierpool::prefetch {

namespace {

// A plan's replay under the budget, and whether it kept every invariant.
Result<ReplayReport> ReplayPlan(const Schedule& s, const Lifetimes& lt, const DeviceProfile& d,
                                std::uint64_t budget, const schedule::Plan& plan) {
  return Replay(s, lt, d, {.policy = Policy::kPlanned, .hbm_budget = budget, .plan = &plan});
}
bool Clean(const ReplayReport& r) {
  return r.missing_at_use + r.budget_violations + r.bad_actions == 0;
}

double MsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

Result<GuidedPlan> BuildLpGuidedPlan(const Schedule& s, const Lifetimes& lt, const DeviceProfile& d,
                                     const PlannerConfig& config, const TransferLpOptions& lp) {
  TIERPOOL_RETURN_IF_ERROR(config.validate());
  PlannerConfig plain_config = config;
  plain_config.guide = nullptr;
  auto t0 = std::chrono::steady_clock::now();
  auto plain = BuildPlan(s, lt, d, plain_config);
  const double plain_ms = MsSince(t0);
  if (!plain.ok()) return plain.status();
  auto plain_replay = ReplayPlan(s, lt, d, config.hbm_budget, *plain);
  if (!plain_replay.ok()) return plain_replay.status();

  TransferLpOptions with_residency = lp;
  with_residency.residency = true;
  auto bound = TransferLpStallBound(s, lt, d, config.hbm_budget, with_residency);
  if (!bound.ok()) return bound.status();
  GuidedPlan out{.plan = std::move(plain).value(),
                 .plain_replay = std::move(plain_replay).value(),
                 .lp = std::move(bound).value(),
                 .plain_planning_ms = plain_ms};
  const ResidencyGuide guide = std::move(out.lp.residency);
  out.lp.residency = {};
  // No guide: the budget holds everything, the LP is unsolved, or the stall is 0 already.
  if (guide.empty() || out.plain_replay.stall_us <= 0) return out;

  PlannerConfig guided_config = config;
  guided_config.guide = &guide;
  t0 = std::chrono::steady_clock::now();
  auto guided = BuildPlan(s, lt, d, guided_config);
  out.guided_planning_ms = MsSince(t0);
  if (!guided.ok()) return out;  // the plain plan stands
  auto guided_replay = ReplayPlan(s, lt, d, config.hbm_budget, *guided);
  if (!guided_replay.ok()) return guided_replay.status();
  out.guided_replay = std::move(guided_replay).value();
  // Kept only when it keeps every invariant and is faster: a guide may make a plan worse, and
  // a breach is the planner's bug, which the plain plan's report shows where it has one.
  if (Clean(*out.guided_replay) &&
      (!Clean(out.plain_replay) || out.guided_replay->time_us < out.plain_replay.time_us)) {
    out.plan = std::move(guided).value();
    out.guided = true;
  }
  return out;
}

}  // namespace tierpool::prefetch
