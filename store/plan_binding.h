// Binds the executor (prefetch/executor.h) to the store: StoreTierControl is the TierControl
// the executor drives, and PlanRegistry is what the service calls for RegisterPlan, Progress
// and UnregisterPlan. A registered namespace's hbm placement is the plan's: the store's policy
// leaves its hbm copies alone while the plan is registered.
//
// Locking: none of its own; the executor and the store guard themselves. Lock order: the
// executor's mutex, then the store's (the executor calls the store with its lock held; the
// store calls the executor, through the use observer and move callbacks, with no lock held).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "prefetch/executor.h"
#include "store/object_store.h"

namespace tierpool {

namespace wire {
class RegisterPlanRequest;
}

class StoreTierControl final : public prefetch::TierControl {
 public:
  explicit StoreTierControl(ObjectStore* store) : store_(store) {}
  prefetch::TensorPlacement Placement(const std::string& ns, const std::string& key) override;
  std::uint64_t HbmBytes(const std::string& ns) override { return store_->HbmBytesOf(ns); }
  Status Prefetch(const std::string& ns, const std::string& key, std::uint64_t deadline_us,
                  Done done) override {
    return store_->StartPrefetch(ns, key, deadline_us, std::move(done));
  }
  Status Offload(const std::string& ns, const std::string& key, Done done) override {
    return store_->StartOffload(ns, key, std::move(done));
  }
  Status Drop(const std::string& ns, const std::string& key) override {
    return store_->DropHbmCopy(ns, key);
  }
  const Clock* clock() const override { return store_->clock(); }

 private:
  ObjectStore* store_;
};

class PlanRegistry {
 public:
  // hbm_capacity: the hbm tier's size (budgets above it are refused).
  PlanRegistry(ObjectStore* store, std::uint64_t hbm_capacity);
  ~PlanRegistry();
  void Start() { executor_.Start(); }
  void Stop() { executor_.Stop(); }

  // Checks and registers a plan for `session`'s job.
  Result<std::uint64_t> Register(const wire::RegisterPlanRequest& request, std::uint64_t session);
  Status Progress(std::uint64_t job, std::uint64_t session, std::uint64_t iteration,
                  std::uint32_t step);
  Status Unregister(std::uint64_t job, std::uint64_t session);
  void OnDisconnect(std::uint64_t session);
  bool HasJobs(std::uint64_t session) const { return executor_.HasJobs(session); }
  std::vector<prefetch::JobStatus> Jobs() const { return executor_.Jobs(); }

 private:
  ObjectStore* store_;
  StoreTierControl control_;
  prefetch::Executor executor_;
};

// Each job counter by name, for stat and metrics (one visitor, one set of names).
void VisitJobCounters(const prefetch::JobCounters& c,
                      const std::function<void(const char* name, std::uint64_t value)>& visit);

}  // namespace tierpool
