#include "client/tool/measure.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>

namespace tierpool::tool {

namespace {

using Clock = std::chrono::steady_clock;

// Runs op until both limits are met, appending each operation's time to s.
Status RunUntil(double budget_s, std::size_t min_iters, const std::function<Status()>& op,
                Sample& s) {
  const auto start = Clock::now();
  for (std::size_t i = 0;; ++i) {
    const auto t0 = Clock::now();
    TIERPOOL_RETURN_IF_ERROR(op());
    const auto t1 = Clock::now();
    const double micros = std::chrono::duration<double, std::micro>(t1 - t0).count();
    s.micros.push_back(micros);
    s.total_seconds += micros / 1e6;
    if (i + 1 >= min_iters && std::chrono::duration<double>(t1 - start).count() >= budget_s) {
      return Status::Ok();
    }
  }
}

}  // namespace

Result<Sample> MeasureFor(double budget_s, const std::function<Status()>& op) {
  Sample s;
  TIERPOOL_RETURN_IF_ERROR(RunUntil(budget_s, 1, op, s));
  return s;
}

Result<Sample> MeasureParallel(int threads, double budget_s, const std::function<Status(int)>& op) {
  const auto n = static_cast<std::size_t>(std::max(threads, 1));
  std::vector<std::vector<double>> micros(n);
  std::vector<Status> failed(n);
  std::atomic<std::size_t> ready{0};
  std::atomic<bool> go{false};
  std::vector<std::thread> pool;
  for (std::size_t t = 0; t < n; ++t) {
    pool.emplace_back([&, t] {
      ready.fetch_add(1);
      while (!go.load()) std::this_thread::yield();
      const auto start = Clock::now();
      for (;;) {
        const auto t0 = Clock::now();
        if (Status s = op(static_cast<int>(t)); !s.ok()) {
          failed[t] = s;
          return;
        }
        const auto t1 = Clock::now();
        micros[t].push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
        if (std::chrono::duration<double>(t1 - start).count() >= budget_s) return;
      }
    });
  }
  while (ready.load() < n) std::this_thread::yield();
  const auto start = Clock::now();
  go = true;
  for (auto& th : pool) th.join();
  Sample s;
  s.total_seconds = std::chrono::duration<double>(Clock::now() - start).count();
  for (std::size_t t = 0; t < n; ++t) {
    TIERPOOL_RETURN_IF_ERROR(failed[t]);
    s.micros.insert(s.micros.end(), micros[t].begin(), micros[t].end());
  }
  return s;
}

Result<std::vector<Sample>> MeasureInTurns(double budget_s, double turn_s, int min_iters,
                                           const std::vector<Turn>& cases) {
  for (const Turn& turn : cases) {
    auto warm = turn(0.0);  // one operation each (a parallel case: one per thread)
    if (!warm.ok()) return warm.status();
  }
  std::vector<Sample> samples(cases.size());
  const auto enough = [&](const Sample& s) {
    return s.total_seconds >= budget_s && s.micros.size() >= static_cast<std::size_t>(min_iters);
  };
  for (std::size_t round = 0;; ++round) {
    bool all_done = true;
    for (std::size_t k = 0; k < cases.size(); ++k) {
      // A case that has had enough still runs while another has not: each round is every case
      // once, so that all of them see the same stretch of time; every other round backwards,
      // so that none always follows the same one (whose traces in the caches it would meet).
      const std::size_t i = round % 2 == 0 ? k : cases.size() - 1 - k;
      auto piece = cases[i](turn_s);
      if (!piece.ok()) return piece.status();
      Sample& s = samples[i];
      s.micros.insert(s.micros.end(), piece->micros.begin(), piece->micros.end());
      s.total_seconds += piece->total_seconds;
      all_done = all_done && enough(s);
    }
    if (all_done) return samples;
  }
}

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  auto idx = static_cast<std::size_t>(p * static_cast<double>(v.size() - 1) + 0.5);
  return v[std::min(idx, v.size() - 1)];
}

double Rate(const Sample& s) { return static_cast<double>(s.micros.size()) / s.total_seconds; }

double Gbps(const Sample& s, std::uint64_t bytes_per_op) {
  return Rate(s) * static_cast<double>(bytes_per_op) / 1e9;
}

}  // namespace tierpool::tool
