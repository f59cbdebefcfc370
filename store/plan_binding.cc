#include "store/plan_binding.h"

#include "common/logging.h"
#include "proto/tierpool.pb.h"

namespace tierpool {

prefetch::TensorPlacement StoreTierControl::Placement(const std::string& ns,
                                                      const std::string& key) {
  ObjectPlacement p = store_->PlacementOf(ns, key);
  return {p.exists, p.in_hbm,      p.moving_to_hbm,    p.has_lower_copy,
          p.size,   p.leaving_hbm, p.moving_out_of_hbm};
}

PlanRegistry::PlanRegistry(ObjectStore* store, std::uint64_t hbm_capacity)
    : store_(store), control_(store), executor_(&control_, hbm_capacity) {
  store_->set_use_observer(
      [this](const std::string& ns, const std::string& key, HbmUse use, std::uint64_t wait_us) {
        prefetch::UseOutcome outcome = use == HbmUse::kHit    ? prefetch::UseOutcome::kHit
                                       : use == HbmUse::kLate ? prefetch::UseOutcome::kLate
                                                              : prefetch::UseOutcome::kMiss;
        executor_.NoteUse(ns, key, outcome, wait_us);
      });
}

PlanRegistry::~PlanRegistry() {
  store_->set_use_observer(nullptr);
  executor_.Stop();
}

Result<std::uint64_t> PlanRegistry::Register(const wire::RegisterPlanRequest& request,
                                             std::uint64_t session) {
  if (request.format_version() != 1) {
    return Status::InvalidArgument("plan registration format " +
                                   std::to_string(request.format_version()) +
                                   " is not known to this server (it reads 1)");
  }
  const StoreConfig& limits = store_->config();
  if (request.ns().size() > limits.max_namespace_bytes) {
    return Status::InvalidArgument("namespace too long");
  }
  prefetch::JobSpec spec;
  spec.ns = request.ns();
  spec.name = request.name().substr(0, 256);
  if (!spec.schedule.ParseFromString(request.schedule())) {
    return Status::InvalidArgument("the schedule is not a valid tierpool.schedule.Schedule");
  }
  if (!spec.plan.ParseFromString(request.plan())) {
    return Status::InvalidArgument("the plan is not a valid tierpool.schedule.Plan");
  }
  for (const auto& k : request.keys()) {
    if (k.empty() || k.size() > limits.max_key_bytes) {
      return Status::InvalidArgument("a tensor key is empty or longer than " +
                                     std::to_string(limits.max_key_bytes) + " bytes");
    }
    spec.keys.push_back(k);
  }
  if (spec.keys.empty()) {
    for (const auto& t : spec.schedule.tensors()) {
      if (t.name().empty() || t.name().size() > limits.max_key_bytes) {
        return Status::InvalidArgument("tensor " + std::to_string(t.id()) +
                                       " has no usable name for a key; pass keys");
      }
    }
  }
  if (request.owned_prefix().size() > limits.max_key_bytes) {
    return Status::InvalidArgument("the owned prefix is longer than " +
                                   std::to_string(limits.max_key_bytes) + " bytes");
  }
  spec.hbm_budget = request.hbm_budget_bytes();
  const std::string ns = spec.ns;
  const std::uint64_t budget =
      spec.hbm_budget != 0 ? spec.hbm_budget : spec.plan.hbm_budget_bytes();
  std::uint64_t job = 0;
  {
    // Held from the job's registration to its records: a disconnect that unregisters it in
    // between finds them once it can look, and its namespace is not left planned.
    std::lock_guard lock(owned_mu_);
    auto id = executor_.Register(std::move(spec), session);
    if (!id.ok()) return id.status();
    if (!request.owned_prefix().empty()) owned_[*id] = {ns, request.owned_prefix()};
    job = *id;
    store_->SetPlanned(ns, budget);
  }
  spdlog::info("session {} registered plan {} for namespace '{}'", session, job, ns);
  return job;
}

std::optional<std::pair<std::string, std::string>> PlanRegistry::TakeOwnedLocked(
    std::uint64_t job) {
  auto it = owned_.find(job);
  if (it == owned_.end()) return std::nullopt;
  auto owned = std::move(it->second);
  owned_.erase(it);
  return owned;
}

void PlanRegistry::DeleteOwned(const std::pair<std::string, std::string>& owned) {
  const auto& [ns, prefix] = owned;
  const std::uint64_t n = store_->DeletePrefix(ns, prefix);
  spdlog::info("the plan of namespace '{}' ended: deleted its {} objects under '{}'", ns, n,
               prefix);
}

Status PlanRegistry::Progress(std::uint64_t job, std::uint64_t session, std::uint64_t iteration,
                              std::uint32_t step, std::uint64_t outside_bytes) {
  return executor_.Progress(job, session, iteration, step, outside_bytes);
}

Status PlanRegistry::Unregister(std::uint64_t job, std::uint64_t session) {
  std::string ns;
  for (const auto& j : executor_.Jobs()) {
    if (j.id == job) ns = j.ns;
  }
  std::optional<std::pair<std::string, std::string>> owned;
  {
    std::lock_guard lock(owned_mu_);
    TIERPOOL_RETURN_IF_ERROR(executor_.Unregister(job, session));
    store_->SetPlanned(ns, 0);
    owned = TakeOwnedLocked(job);
  }
  if (owned) DeleteOwned(*owned);
  return Status::Ok();
}

void PlanRegistry::OnDisconnect(std::uint64_t session) {
  std::vector<std::pair<std::string, std::string>> gone;
  {
    std::lock_guard lock(owned_mu_);
    for (const auto& [job, ns] : executor_.UnregisterOwner(session)) {
      store_->SetPlanned(ns, 0);
      if (auto owned = TakeOwnedLocked(job)) gone.push_back(std::move(*owned));
    }
  }
  for (const auto& owned : gone) DeleteOwned(owned);
}

void VisitJobCounters(const prefetch::JobCounters& c,
                      const std::function<void(const char* name, std::uint64_t value)>& visit) {
  visit("hits", c.hits);
  visit("late", c.late);
  visit("late_wait_us", c.late_wait_us);
  visit("misses", c.misses);
  visit("bytes_in", c.bytes_in);
  visit("bytes_out", c.bytes_out);
  visit("actions_issued", c.issued);
  visit("dropped_clean", c.dropped_clean);
  visit("actions_skipped", c.skipped);
  visit("skipped_absent", c.skipped_absent);
  visit("skipped_in_place", c.skipped_in_place);
  visit("skipped_dead", c.skipped_dead);
  visit("actions_cancelled", c.cancelled);
  visit("waited_for_room", c.waited_for_room);
  visit("failed", c.failed);
  visit("budget_peak_bytes", c.budget_peak);
  visit("hbm_peak_bytes", c.hbm_peak);
  visit("outside_peak_bytes", c.outside_peak);
  visit("last_hbm_peak_bytes", c.last_hbm_peak);
  visit("last_outside_peak_bytes", c.last_outside_peak);
}

}  // namespace tierpool
