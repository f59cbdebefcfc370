// Latency histograms with fixed buckets, for /metrics: how long puts, gets and moves take, by
// size class. Recording is a few relaxed atomic adds (no lock, safe from any thread); a
// snapshot is a consistent-enough copy for monitoring (counts read one by one).
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>

namespace tierpool {

// Bucket upper bounds in microseconds (Prometheus "le"); the last bucket is +Inf.
inline constexpr std::array<std::uint64_t, 16> kLatencyBoundsUs = {
    5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 25000, 100000, 500000, 1000000, 5000000};

// Size classes by upper bound in bytes; the last is "larger".
inline constexpr std::array<std::uint64_t, 4> kSizeClassBounds = {4096, 65536, 1 << 20, 16 << 20};
inline constexpr std::size_t kSizeClasses = kSizeClassBounds.size() + 1;

inline std::size_t LatencyBucketOf(std::uint64_t us) {
  std::size_t i = 0;
  while (i < kLatencyBoundsUs.size() && us > kLatencyBoundsUs[i]) ++i;
  return i;
}

inline std::size_t SizeClassOf(std::uint64_t bytes) {
  std::size_t i = 0;
  while (i < kSizeClassBounds.size() && bytes > kSizeClassBounds[i]) ++i;
  return i;
}

struct LatencySnapshot {
  std::array<std::uint64_t, kLatencyBoundsUs.size() + 1> counts{};  // per bucket, not cumulative
  std::uint64_t sum_us = 0;
  std::uint64_t count = 0;

  void Record(std::uint64_t us) {  // for copies kept under a lock (the mover's link stats)
    ++counts[LatencyBucketOf(us)];
    sum_us += us;
    ++count;
  }
};

class LatencyHistogram {
 public:
  void Record(std::uint64_t us) {
    counts_[LatencyBucketOf(us)].fetch_add(1, std::memory_order_relaxed);
    sum_us_.fetch_add(us, std::memory_order_relaxed);
    count_.fetch_add(1, std::memory_order_relaxed);
  }
  LatencySnapshot Read() const {
    LatencySnapshot s;
    for (std::size_t i = 0; i < counts_.size(); ++i) {
      s.counts[i] = counts_[i].load(std::memory_order_relaxed);
    }
    s.sum_us = sum_us_.load(std::memory_order_relaxed);
    s.count = count_.load(std::memory_order_relaxed);
    return s;
  }

 private:
  std::array<std::atomic<std::uint64_t>, kLatencyBoundsUs.size() + 1> counts_{};
  std::atomic<std::uint64_t> sum_us_{0};
  std::atomic<std::uint64_t> count_{0};
};

}  // namespace tierpool
