// A byte budget that refills at a fixed rate (a token bucket), for background work that must
// leave a link's bandwidth to clients: copies rebuilt after a peer is lost. Work larger than the
// burst starts once the budget is full and is paid back before the next (it is never starved),
// so over any long stretch the bytes started stay within the rate plus one burst.
//
// Thread safety: none; its owner's lock guards it.
#pragma once

#include <algorithm>
#include <cstdint>

#include "common/clock.h"

namespace tierpool {

class ByteRateLimiter {
 public:
  // bytes_per_sec 0: no bound. burst_bytes: what may start at once after a quiet spell.
  ByteRateLimiter(std::uint64_t bytes_per_sec, std::uint64_t burst_bytes, const Clock* clock)
      : rate_(bytes_per_sec),
        burst_(std::max<std::uint64_t>(burst_bytes, 1)),
        clock_(clock),
        budget_(static_cast<double>(burst_)),
        last_us_(clock->NowMicros()) {}

  // Whether work of `bytes` may start now; if so, it is charged.
  bool TryTake(std::uint64_t bytes) {
    if (rate_ == 0) return true;
    Refill();
    const double need = static_cast<double>(std::min(bytes, burst_));
    if (budget_ < need) return false;
    budget_ -= static_cast<double>(bytes);  // below zero for work past the burst: a debt
    return true;
  }

 private:
  void Refill() {
    const std::uint64_t now = clock_->NowMicros();
    if (now <= last_us_) return;
    budget_ =
        std::min(static_cast<double>(burst_),
                 budget_ + static_cast<double>(rate_) * static_cast<double>(now - last_us_) / 1e6);
    last_us_ = now;
  }

  const std::uint64_t rate_;
  const std::uint64_t burst_;
  const Clock* clock_;
  double budget_;
  std::uint64_t last_us_;
};

}  // namespace tierpool
