#include "common/job_pool.h"

#include <algorithm>

namespace tierpool {

JobPool::JobPool(int threads) {
  for (int i = 0; i < std::max(1, threads); ++i) threads_.emplace_back([this] { Run(); });
}

JobPool::~JobPool() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  ready_.notify_all();
  for (auto& t : threads_) t.join();
}

void JobPool::Post(std::function<void()> job) {
  bool wake;
  {
    std::lock_guard lock(mu_);
    jobs_.push_back(std::move(job));
    wake = jobs_.size() > awake_;
    wakes_ += wake ? 1 : 0;
  }
  if (wake) ready_.notify_one();
}

std::uint64_t JobPool::wakes() const {
  std::lock_guard lock(mu_);
  return wakes_;
}

std::size_t JobPool::awake_threads() const {
  std::lock_guard lock(mu_);
  return awake_;
}

void JobPool::Run() {
  std::unique_lock lock(mu_);
  ++awake_;
  for (;;) {
    while (jobs_.empty() && !stopping_) {
      --awake_;
      ready_.wait(lock);
      ++awake_;
    }
    if (jobs_.empty()) return;  // stopping, and every job has run
    std::function<void()> job = std::move(jobs_.front());
    jobs_.pop_front();
    lock.unlock();
    job();
    job = nullptr;  // what the job holds goes before the lock is taken again
    lock.lock();
  }
}

}  // namespace tierpool
