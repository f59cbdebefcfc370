// A fixed set of threads that run posted jobs, oldest first.
//
// A sleeping thread is woken only when the queue holds more jobs than there are awake threads:
// an awake thread takes the next job before it sleeps, so jobs posted faster than one thread
// runs them do not each pay a futex wake on the posting thread and a wakeup on the pool's. (The
// GPU copy engine's host checks: woken one per move, they held 256 KiB moves off an H200 to
// 0.76x of the engine's rate; docs/benchmarks/hbm.md, "Completion groups and fewer checksum
// wakes".) A burst still wakes as many threads as it needs, since a woken thread counts as
// awake only once it runs.
//
// A job must not wait for a job posted after it: its thread counts as awake while it waits, so
// the later job may find no thread woken for it.
//
// Thread safety: Post may be called from any thread, a job included. The destructor runs every
// job posted before it, then joins the threads; nothing may be posted once it has begun.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace tierpool {

class JobPool {
 public:
  // `threads` at least 1.
  explicit JobPool(int threads);
  ~JobPool();
  JobPool(const JobPool&) = delete;
  JobPool& operator=(const JobPool&) = delete;

  void Post(std::function<void()> job);
  // How many times Post woke a thread (notified one; a thread that was not asleep after all
  // takes the notice as a no-op), and how many threads are not waiting for a job now.
  std::uint64_t wakes() const;
  std::size_t awake_threads() const;

 private:
  void Run();

  mutable std::mutex mu_;
  std::condition_variable ready_;
  std::deque<std::function<void()>> jobs_;  // guarded by mu_
  std::size_t awake_ = 0;                   // threads not waiting for a job; guarded by mu_
  std::uint64_t wakes_ = 0;                 // guarded by mu_
  bool stopping_ = false;                   // guarded by mu_
  std::vector<std::thread> threads_;
};

}  // namespace tierpool
