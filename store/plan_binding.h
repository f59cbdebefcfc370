// Binds the executor (prefetch/executor.h) to the store: StoreTierControl is the TierControl
// the executor drives, and PlanRegistry is what the service calls for RegisterPlan, Progress
// and UnregisterPlan. A registered namespace's hbm placement is the plan's: the store's policy
// leaves its hbm copies alone while the plan is registered.
//
// Locking: owned_mu_ guards the jobs' owned prefixes; the executor and the store guard
// themselves. Lock order: owned_mu_, then the executor's mutex, then the store's (the executor
// calls the store with its lock held; the store calls the executor, through the use observer
// and move callbacks, with no lock held).
//
// A plan registered with an owned prefix takes its job's objects with it: when it is
// unregistered or its connection closes, every object of its namespace under the prefix is
// deleted.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
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
  std::uint64_t HbmPeak(const std::string& ns) override { return store_->HbmPeakOf(ns); }
  void ResetHbmPeak(const std::string& ns) override { store_->ResetHbmPeak(ns); }
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
                  std::uint32_t step, std::uint64_t outside_bytes);
  // The same, carried out by the executor's thread, the job's latest report only (for the I/O
  // thread: a flood of reports costs it a map update each).
  Status PostProgress(std::uint64_t job, std::uint64_t session, std::uint64_t iteration,
                      std::uint32_t step, std::uint64_t outside_bytes) {
    return executor_.PostProgress(job, session, iteration, step, outside_bytes);
  }
  std::uint64_t reports_coalesced() const { return executor_.reports_coalesced(); }
  Status Unregister(std::uint64_t job, std::uint64_t session);
  void OnDisconnect(std::uint64_t session);
  bool HasJobs(std::uint64_t session) const { return executor_.HasJobs(session); }
  std::vector<prefetch::JobStatus> Jobs() const { return executor_.Jobs(); }

 private:
  // Plan `job`'s (namespace, owned prefix), taken out of owned_ (requires owned_mu_).
  std::optional<std::pair<std::string, std::string>> TakeOwnedLocked(std::uint64_t job);
  // A plan is gone: its job's objects go with it.
  void DeleteOwned(const std::pair<std::string, std::string>& owned);

  ObjectStore* store_;
  StoreTierControl control_;
  prefetch::Executor executor_;
  std::mutex owned_mu_;
  // guarded by owned_mu_: job id -> (namespace, prefix of its objects)
  std::unordered_map<std::uint64_t, std::pair<std::string, std::string>> owned_;
};

// Each job counter by name, for stat and metrics (one visitor, one set of names).
void VisitJobCounters(const prefetch::JobCounters& c,
                      const std::function<void(const char* name, std::uint64_t value)>& visit);

}  // namespace tierpool
