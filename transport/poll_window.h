// How long an I/O thread busy-polls after a burst of work before it blocks in epoll.
//
// A thread that blocks pays a wakeup when the next request comes (20-45 µs on a virtual
// machine, more than a small request's whole round trip). A fixed window (busy_poll_us) covers
// the client's think time between small requests, but not a put's copy: a 1 MiB put copies for
// ~60 µs between the reply that hands it room and its commit, so with a 50 µs window every
// commit woke the thread. The window therefore follows the gaps this thread has seen between a
// burst's end and the next work: twice their running average, within [base, max]. Gaps shorter
// than half the base are a burst's own handlers, not a client's think time, and are ignored; a
// gap longer than max (the clients went quiet) puts the window back to base, so an idle server
// spins at most max once before it sleeps. max at or below base: the fixed window.
//
// Not thread-safe: each I/O thread keeps its own.
#pragma once

#include <algorithm>
#include <chrono>

namespace tierpool::transport {

class PollWindow {
 public:
  using Duration = std::chrono::nanoseconds;

  PollWindow(Duration base, Duration max) : base_(base), max_(std::max(base, max)) {}

  // How long to poll after the last work before blocking.
  Duration window() const { return std::clamp(2 * average_, base_, max_); }

  // Work came `gap` after the previous burst ended (found while polling, or after blocking).
  void OnWorkAfter(Duration gap) {
    if (gap > max_) {
      average_ = Duration::zero();
    } else if (2 * gap >= base_) {
      average_ = average_ == Duration::zero() ? gap : average_ + (gap - average_) / 4;
    }
  }

 private:
  const Duration base_;
  const Duration max_;
  Duration average_{0};  // running average of the think-time gaps (0: none since the last quiet)
};

}  // namespace tierpool::transport
