// Live replay: plays a schedule as a job against a running tierpoold, with real bytes. Each step
// reports progress (under `planned`), gets its inputs as hbm views (the wait is stall), "computes"
// for its step time (writing its outputs into hbm meanwhile), releases its views and deletes the
// tensors that died. The server's executor carries the plan out (`planned`), the server swaps on
// demand (`reactive-lru`), or everything stays in hbm (`none`). docs/schedules.md, "Live replay".
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "prefetch/simulator.h"
#include "tierpool/client.h"

namespace tierpool::live {

struct LiveOptions {
  prefetch::Policy policy = prefetch::Policy::kNone;
  std::uint64_t budget = 0;                        // the job's hbm budget (planned)
  const tierpool::schedule::Plan* plan = nullptr;  // planned
  int iterations = 2;                              // repeating schedules: all but the last warm up
  bool verify_all = true;  // every byte read back is compared; else a stamp at each end
  bool record_timeline = false;
  // The server's hbm is a GPU's memory and this build can use it (-DTIERPOOL_CUDA=ON): tensors
  // put in hbm are written there in place (device reservations, filled by a kernel, as a job's
  // outputs are) and read as device views. Their bytes are checked by their checksum on the GPU
  // (verify_all) and by the stamps at each end.
  bool device = false;
};

struct LiveReport {
  prefetch::ReplayReport r;       // the simulated report's fields, measured
  std::uint64_t wrong_bytes = 0;  // gets whose bytes differed from what was written
  std::uint64_t get_errors = 0;   // gets that failed
  std::uint64_t not_in_hbm = 0;   // uses served from a lower tier (no room could be made)
  double overrun_us = 0;          // steps whose writes took longer than their compute window
  double room_wait_us = 0;        // writes waiting for room (not counted in overrun_us)
  // planned: from the server's job counters, over the measured iteration
  std::uint64_t hits = 0, late = 0, misses = 0;
  std::uint64_t actions_skipped = 0, waited_for_room = 0;
  // Why actions were skipped (the executor's counters over the run).
  std::uint64_t skipped_in_place = 0, skipped_dead = 0, skipped_absent = 0;
};

// The schedule's compute times are used as they are (the caller stretches them).
Result<LiveReport> RunLive(Client& client, const prefetch::Schedule& s,
                           const prefetch::Lifetimes& lt, const LiveOptions& options);

// Copy bandwidth of the server's hbm<->dram links (GB/s each way) and the fixed cost of one
// move (us), measured through the server with objects of `bytes`.
struct LinkCalibration {
  double h2d_gbps = 0;
  double d2h_gbps = 0;
  double latency_us = 0;
};
Result<LinkCalibration> CalibrateLinks(Client& client, std::uint64_t bytes);

}  // namespace tierpool::live
