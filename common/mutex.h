// The mutex and its holders that clang's thread-safety analysis checks (common/
// thread_annotations.h): fields say GUARDED_BY(mu_), and taking or letting go of mu_ anywhere
// but through these is a build error in the `thread-safety` preset.
//
//   Mutex mu_;
//   int n_ GUARDED_BY(mu_);
//   { MutexLock lock(mu_); ++n_; }                       // std::lock_guard
//   { UniqueMutexLock lock(mu_);                          // std::unique_lock, for waits
//     cv_.wait(lock.native(), [&]() REQUIRES(mu_) { return n_ > 0; }); }
//
// Each is a std::mutex underneath, with nothing added at run time.
#pragma once

#include <mutex>

#include "common/thread_annotations.h"

namespace tierpool {

class CAPABILITY("mutex") Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void lock() ACQUIRE() { mu_.lock(); }
  void unlock() RELEASE() { mu_.unlock(); }
  bool try_lock() TRY_ACQUIRE(true) { return mu_.try_lock(); }
  // For UniqueMutexLock: a std::condition_variable waits on a std::unique_lock<std::mutex>.
  std::mutex& native() { return mu_; }

 private:
  std::mutex mu_;
};

// Holds a Mutex for its scope.
class SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex& mu) ACQUIRE(mu) : mu_(mu) { mu_.lock(); }
  // Takes over a Mutex this thread already holds (a lock() or a try_lock() that succeeded).
  MutexLock(Mutex& mu, std::adopt_lock_t) REQUIRES(mu) : mu_(mu) {}
  ~MutexLock() RELEASE() { mu_.unlock(); }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

 private:
  Mutex& mu_;
};

// Holds a Mutex for its scope, lets a std::condition_variable wait on it (native()), and may let
// it go and take it again before the scope ends.
class SCOPED_CAPABILITY UniqueMutexLock {
 public:
  explicit UniqueMutexLock(Mutex& mu) ACQUIRE(mu) : lock_(mu.native()) {}
  ~UniqueMutexLock() RELEASE() {}
  UniqueMutexLock(const UniqueMutexLock&) = delete;
  UniqueMutexLock& operator=(const UniqueMutexLock&) = delete;

  void Unlock() RELEASE() { lock_.unlock(); }
  void Lock() ACQUIRE() { lock_.lock(); }
  // A condition variable's wait releases and retakes it; the analysis holds it throughout.
  std::unique_lock<std::mutex>& native() { return lock_; }

 private:
  std::unique_lock<std::mutex> lock_;
};

}  // namespace tierpool
