// Plans for a loop that reads the same persistent tensors again and again and never writes them
// (a decoder's weights, token after token): most of them stay in hbm for good and an evenly
// spread share streams through a ring of a few slots. Each streamed tensor is dropped after its
// use, and its next load is issued when the streamed tensor `depth` places earlier is dropped,
// so loads queue in use order and each goes as soon as a slot is free (the replay's planned
// prefetches wait for room in plan order).
//
// Why beside the planner's passes: they evict on demand, by the next use (Belady), and on such a
// loop that frees room for the next load only as the tensor before it finishes: the link idles
// with hbm full while loads wait for room (docs/benchmarks/planning.md, "LLM decode"). A fixed
// resident set leaves the ring's room free ahead of time, and the tensors kept between two streamed
// ones give each load their compute to land in.
//
// Locking: none; a pure function of its inputs.
#pragma once

#include <cstdint>
#include <optional>

#include "prefetch/planner.h"
#include "prefetch/schedule.h"

namespace tierpool::prefetch {

struct StreamingOptions {
  std::uint64_t budget = 0;
  int depth = 2;  // ring slots: loads that may be in hbm ahead of their use
  // Only tensors of at most this size stream (the ring holds `depth` of the largest); 0: any.
  std::uint64_t largest = 0;
};

// Whether tensor t may stream: persistent, read in the iteration, never written (a dropped copy
// is then still the host's), and not empty.
bool Streamable(const Schedule& s, const Lifetimes& lt, std::uint32_t t);

// A plan for a repeating schedule's persistent, never-updated tensors under `budget`, or nothing
// when the schedule does not repeat or those tensors (of at most `largest` bytes) cannot make
// the room the budget needs. Which tensors stream: in order of first use, each as soon as the
// bytes streamed so far fall behind an even share of the bytes met so far, the share being what
// the budget needs plus the ring. The plan is the caller's to replay: it may still not fit
// where what is not persistent peaks.
std::optional<schedule::Plan> StreamedTensorsPlan(const Schedule& s, const Lifetimes& lt,
                                                  const DeviceProfile& d,
                                                  const StreamingOptions& options);

}  // namespace tierpool::prefetch
