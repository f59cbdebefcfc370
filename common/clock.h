// The time seam: everything that reads the time or waits for it takes a Clock, so tests advance
// time instead of sleeping (LevelDB's Env, reduced to what tierpool needs).
//
// Thread safety: every method may be called from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>

namespace tierpool {

class Clock {
 public:
  virtual ~Clock() = default;
  // Microseconds on a monotonic clock; only differences mean anything.
  virtual std::uint64_t NowMicros() const = 0;
};

// The steady clock of the machine.
class SystemClock final : public Clock {
 public:
  std::uint64_t NowMicros() const override {
    return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(
                                          std::chrono::steady_clock::now().time_since_epoch())
                                          .count());
  }
  // One shared instance: the default wherever no clock is passed.
  static const Clock* Default() {
    static const SystemClock clock;
    return &clock;
  }
};

// A clock that moves only when told: for tests.
class ManualClock final : public Clock {
 public:
  explicit ManualClock(std::uint64_t start_us = 1'000'000) : now_us_(start_us) {}
  std::uint64_t NowMicros() const override { return now_us_.load(std::memory_order_acquire); }
  void Advance(std::uint64_t us) { now_us_.fetch_add(us, std::memory_order_acq_rel); }
  void Set(std::uint64_t us) { now_us_.store(us, std::memory_order_release); }

 private:
  std::atomic<std::uint64_t> now_us_;
};

}  // namespace tierpool
