#include "prefetch/guided_plan.h"

#include <chrono>
#include <utility>

namespace tierpool::prefetch {

Result<LpGuidance> GuideByLp(const Schedule& s, const Lifetimes& lt, const DeviceProfile& d,
                             const PlannerConfig& config, const TransferLpOptions& lp,
                             const ReplayReport* plain) {
  TransferLpOptions with_residency = lp;
  with_residency.residency = true;
  auto bound = TransferLpStallBound(s, lt, d, config.hbm_budget, with_residency);
  if (!bound.ok()) return bound.status();
  LpGuidance out{.lp = std::move(bound).value()};
  const ResidencyGuide guide = std::move(out.lp.residency);
  out.lp.residency = {};
  // Nothing to guide: no plain plan, no stall to remove, or no solved LP.
  if (plain == nullptr || plain->stall_us <= 0 || guide.empty()) return out;

  PlannerConfig guided_config = config;
  guided_config.guide = &guide;
  const auto t0 = std::chrono::steady_clock::now();
  auto guided = BuildPlan(s, lt, d, guided_config);
  out.planning_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  if (!guided.ok()) return out;  // the plain plan stands
  auto replay = Replay(
      s, lt, d, {.policy = Policy::kPlanned, .hbm_budget = config.hbm_budget, .plan = &*guided});
  if (!replay.ok()) return replay.status();
  out.plan = std::move(guided).value();
  out.replay = std::move(replay).value();
  return out;
}

Result<GuidedPlan> BuildLpGuidedPlan(const Schedule& s, const Lifetimes& lt, const DeviceProfile& d,
                                     const PlannerConfig& config, const TransferLpOptions& lp) {
  PlannerConfig plain_config = config;
  plain_config.guide = nullptr;
  auto plain = BuildPlan(s, lt, d, plain_config);
  if (!plain.ok()) return plain.status();
  auto plain_replay = Replay(
      s, lt, d, {.policy = Policy::kPlanned, .hbm_budget = config.hbm_budget, .plan = &*plain});
  if (!plain_replay.ok()) return plain_replay.status();
  GuidedPlan out{.plan = std::move(plain).value(), .plain_replay = std::move(plain_replay).value()};
  auto guidance = GuideByLp(s, lt, d, config, lp, &out.plain_replay);
  if (!guidance.ok()) return guidance.status();
  out.guidance = std::move(guidance).value();
  // Kept only when it keeps every invariant and is faster: a guide may make a plan worse, and
  // a breach is the planner's bug, which the plain plan's report shows where it has one.
  const auto& g = out.guidance;
  if (g.replay && g.replay->breaches() == 0 &&
      (out.plain_replay.breaches() > 0 || g.replay->time_us < out.plain_replay.time_us)) {
    out.plan = *std::move(out.guidance.plan);
    out.guided = true;
  }
  return out;
}

}  // namespace tierpool::prefetch
