// A counter that many threads add to without sharing a cache line: one slot per shard, each on
// its own line; readers sum the slots. For counts on paths that run in parallel (gets under a
// shared lock), where one atomic would bounce between cores on every add.
//
// Thread-safe. Adds are relaxed: a Sum taken while adds run may miss the latest of them.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>

namespace tierpool {

class ShardedCounter {
 public:
  static constexpr int kShards = 16;

  // hint picks the slot: callers pass something that differs between concurrent threads
  // (a connection id) so that they add to different lines.
  void Add(std::uint64_t hint, std::uint64_t n = 1) {
    slots_[hint % kShards].value.fetch_add(n, std::memory_order_relaxed);
  }
  // Takes back n that were added under the same hint (a count made too early).
  void Subtract(std::uint64_t hint, std::uint64_t n) {
    slots_[hint % kShards].value.fetch_sub(n, std::memory_order_relaxed);
  }
  std::uint64_t Sum() const {
    std::uint64_t total = 0;
    for (const auto& s : slots_) total += s.value.load(std::memory_order_relaxed);
    return total;
  }

 private:
  struct alignas(64) Slot {
    std::atomic<std::uint64_t> value{0};
  };
  std::array<Slot, kShards> slots_{};
};

}  // namespace tierpool
