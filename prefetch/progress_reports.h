// Progress reports waiting for the executor's thread (prefetch/executor.h): a job's reports
// arrive on the transport's I/O thread, one-way and as fast as its client sends them, and only
// the latest matters, so each job keeps one. Posting is a map update under a mutex of its own;
// carrying a report out (the plan's actions for the steps it advanced) happens later on the
// executor's thread, never on an I/O thread. A job's unsent report goes with the job.
//
// Thread safety: every method takes the table's mutex, a leaf lock.
#pragma once

#include <algorithm>
#include <cstdint>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "common/status.h"

namespace tierpool::prefetch {

class ProgressReports {
 public:
  struct Report {
    std::uint64_t job = 0;
    std::uint64_t owner = 0;
    std::uint64_t iteration = 0;
    std::uint32_t step = 0;
    std::uint64_t outside_bytes = 0;  // the largest of the reports it stands for
  };

  // A job may post from now on (by its owner), until Forget.
  void Allow(std::uint64_t job, std::uint64_t owner) {
    std::lock_guard lock(mu_);
    owners_[job] = owner;
  }
  void Forget(std::uint64_t job) {
    std::lock_guard lock(mu_);
    owners_.erase(job);
    pending_.erase(job);
  }
  // Keeps the report in place of the job's earlier one not yet taken. NOT_FOUND for a job that
  // is not registered, PERMISSION_DENIED for one of another connection. Returns whether the
  // job had none pending (the executor's thread needs a wake).
  Result<bool> Post(const Report& r) {
    std::lock_guard lock(mu_);
    auto owner = owners_.find(r.job);
    if (owner == owners_.end()) return Status::NotFound("no job " + std::to_string(r.job));
    if (owner->second != r.owner) {
      return Status::PermissionDenied("the job belongs to another connection");
    }
    auto [it, fresh] = pending_.try_emplace(r.job, r);
    if (!fresh) {
      const std::uint64_t outside = std::max(it->second.outside_bytes, r.outside_bytes);
      it->second = r;
      it->second.outside_bytes = outside;
      ++coalesced_;
    }
    return fresh;
  }
  bool Pending(std::uint64_t job) const {
    std::lock_guard lock(mu_);
    return pending_.count(job) != 0;
  }
  // Every pending report, taken.
  std::vector<Report> Take() {
    std::vector<Report> out;
    std::lock_guard lock(mu_);
    out.reserve(pending_.size());
    for (auto& [job, r] : pending_) out.push_back(r);
    pending_.clear();
    return out;
  }
  // Reports replaced by a later one before they were carried out.
  std::uint64_t coalesced() const {
    std::lock_guard lock(mu_);
    return coalesced_;
  }

 private:
  mutable std::mutex mu_;
  std::unordered_map<std::uint64_t, std::uint64_t> owners_;  // job -> owner; guarded by mu_
  std::unordered_map<std::uint64_t, Report> pending_;        // guarded by mu_
  std::uint64_t coalesced_ = 0;                              // guarded by mu_
};

}  // namespace tierpool::prefetch
