// A mutex for critical sections of a few dozen nanoseconds: the object index's shards (names,
// objects, its books), which puts and gets from several threads take under the store's shared
// lock.
//
// Why not std::mutex: glibc's puts a thread that finds it held to sleep in the kernel at once
// (a system call each way, microseconds) against sections far shorter than that. Here a waiter
// spins briefly first and sleeps on a futex (std::atomic::wait) only after that; unlock makes a
// system call only when someone sleeps (the state says so: 2).
//
// Meets the Lockable requirements (std::lock_guard, std::unique_lock). Not recursive. Clang's
// thread-safety analysis knows it (GUARDED_BY a SpinMutex) when it is held through SpinLock.
#pragma once

#include <atomic>
#include <cstdint>

#include "common/thread_annotations.h"

namespace tierpool {

class CAPABILITY("mutex") SpinMutex {
 public:
  SpinMutex() = default;
  SpinMutex(const SpinMutex&) = delete;
  SpinMutex& operator=(const SpinMutex&) = delete;

  void lock() ACQUIRE() {
    std::uint32_t free = kFree;
    if (state_.compare_exchange_strong(free, kHeld, std::memory_order_acquire,
                                       std::memory_order_relaxed)) {
      return;
    }
    for (int spins = 0; spins < kSpins; ++spins) {
      __builtin_ia32_pause();
      free = kFree;
      if (state_.load(std::memory_order_relaxed) == kFree &&
          state_.compare_exchange_weak(free, kHeld, std::memory_order_acquire,
                                       std::memory_order_relaxed)) {
        return;
      }
    }
    // Asleep until it is let go; whoever takes it this way marks it as having sleepers, since
    // others may still sleep behind it.
    while (state_.exchange(kSleepers, std::memory_order_acquire) != kFree) {
      state_.wait(kSleepers, std::memory_order_relaxed);
    }
  }
  bool try_lock() TRY_ACQUIRE(true) {
    std::uint32_t free = kFree;
    return state_.compare_exchange_strong(free, kHeld, std::memory_order_acquire,
                                          std::memory_order_relaxed);
  }
  void unlock() RELEASE() {
    if (state_.exchange(kFree, std::memory_order_release) == kSleepers) state_.notify_one();
  }

 private:
  static constexpr std::uint32_t kFree = 0, kHeld = 1, kSleepers = 2;
  static constexpr int kSpins = 128;
  std::atomic<std::uint32_t> state_{kFree};
};

// Holds a SpinMutex for its scope (std::lock_guard, known to the analysis).
class SCOPED_CAPABILITY SpinLock {
 public:
  explicit SpinLock(SpinMutex& mu) ACQUIRE(mu) : mu_(mu) { mu_.lock(); }
  ~SpinLock() RELEASE() { mu_.unlock(); }
  SpinLock(const SpinLock&) = delete;
  SpinLock& operator=(const SpinLock&) = delete;

 private:
  SpinMutex& mu_;
};

}  // namespace tierpool
