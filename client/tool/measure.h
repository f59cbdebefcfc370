// How `tierpool bench` times its cases: one operation over and over for a time budget, on one
// thread or several, and several cases in turns, so that a reference and the row compared with
// it meet the same machine.
//
// Why turns: on a shared virtual machine the speed of memory and of the scheduler drifts by tens
// of percent over seconds. Measured one after the other, a row and its reference met different
// machines: three consecutive runs gave 256 KiB copying gets 0.40, 0.74 and 0.80x memcpy, and a
// run whose whole first half was slow showed zero-copy gets at half the rate of the next run.
// Alternating short turns of each case until every one has had its budget puts the drift into
// both sides of each ratio alike.
//
// Thread-safe: no state; MeasureParallel runs op from `threads` threads at once.
#pragma once

#include <functional>
#include <vector>

#include "tierpool/status.h"

namespace tierpool::tool {

struct Sample {
  std::vector<double> micros;  // one entry per operation (or per batch)
  double total_seconds = 0;    // time the operations took (wall time of parallel turns)
};

// Runs op for budget_s, at least once, with no warm-up (a turn of MeasureInTurns).
Result<Sample> MeasureFor(double budget_s, const std::function<Status()>& op);

// `threads` threads each run op(thread) for the budget, started together, with no warm-up; the
// time is the wall time from the start to the last one's end.
Result<Sample> MeasureParallel(int threads, double budget_s, const std::function<Status(int)>& op);

// A case of MeasureInTurns: runs its operation for about the given seconds and returns what it
// measured (MeasureFor or MeasureParallel).
using Turn = std::function<Result<Sample>(double seconds)>;

// Each case once, unmeasured (a warm-up), then every case in turn for turn_s each, round after
// round (every other round in reverse order), until each has run at least budget_s in all and
// at least min_iters operations. Returns
// one Sample per case, the turns of each joined. A case's error ends the measurement.
Result<std::vector<Sample>> MeasureInTurns(double budget_s, double turn_s, int min_iters,
                                           const std::vector<Turn>& cases);

double Percentile(std::vector<double> v, double p);
// Operations per second.
double Rate(const Sample& s);
// Bytes moved per second, in GB/s, at bytes_per_op each.
double Gbps(const Sample& s, std::uint64_t bytes_per_op);

}  // namespace tierpool::tool
