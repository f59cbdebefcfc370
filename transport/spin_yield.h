// Busy-polling that gives its core away when it has polled for a while.
//
// A client waiting for a reply and an I/O thread waiting for a request poll instead of
// sleeping, because a wakeup costs more than a small request's round trip. On a machine with
// fewer cores than busy threads (the 2-vCPU development VM with two client threads and the
// server; a node whose trainer keeps every core busy), a poller holds its core until its
// window ends while a thread with work waits for one. So after polling for kPollAloneFor, each
// turn of a poll loop yields: alone on its core the poller comes straight back, and otherwise
// the thread with work runs. Measured on the development VM (docs/benchmarks/redis.md, "Pollers
// give way"): two client threads' 64 x 4 KiB get batches went from 0.99-1.00x to 1.28-1.29x one
// thread's. A small request's reply comes within kPollAloneFor, so its latency is untouched;
// yielding from the first turn cost 4 KiB requests 0.1-0.3 µs each there (a syscall per turn).
//
// Stateless and thread-safe.
#pragma once

#include <sched.h>

#include <chrono>

namespace tierpool::transport {

inline constexpr std::chrono::microseconds kPollAloneFor{8};

// One turn of a poll loop that has polled for `polled` so far.
inline void GiveWayAfter(std::chrono::nanoseconds polled) {
  if (polled >= kPollAloneFor) ::sched_yield();
}

}  // namespace tierpool::transport
