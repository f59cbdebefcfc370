#include "client/tool/bench.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <functional>
#include <vector>

namespace tierpool::tool {

namespace {

using Clock = std::chrono::steady_clock;

struct Sample {
  std::vector<double> micros;  // one entry per operation (or per batch)
  double total_seconds = 0;
};

// Runs op until the time budget is spent (at least min_iters times, after one warm-up).
Result<Sample> Measure(double budget_s, int min_iters, const std::function<Status()>& op) {
  TIERPOOL_RETURN_IF_ERROR(op());  // warm-up
  Sample s;
  auto start = Clock::now();
  for (int i = 0;; ++i) {
    auto t0 = Clock::now();
    TIERPOOL_RETURN_IF_ERROR(op());
    auto t1 = Clock::now();
    s.micros.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
    double elapsed = std::chrono::duration<double>(t1 - start).count();
    if (i + 1 >= min_iters && elapsed >= budget_s) break;
  }
  for (double m : s.micros) s.total_seconds += m / 1e6;
  return s;
}

double Percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  auto idx = static_cast<std::size_t>(p * static_cast<double>(v.size() - 1) + 0.5);
  return v[std::min(idx, v.size() - 1)];
}

nlohmann::json Row(std::uint64_t size, const char* op, const char* path, const Sample& s,
                   std::uint64_t objects_per_op, double memcpy_gbps) {
  double ops = static_cast<double>(s.micros.size());
  double bytes = ops * static_cast<double>(size * objects_per_op);
  double gbps = bytes / s.total_seconds / 1e9;
  nlohmann::json row = {
      {"size", size},
      {"op", op},
      {"path", path},
      {"objects_per_op", objects_per_op},
      {"iterations", s.micros.size()},
      {"gbps", gbps},
      {"objects_per_s", ops * static_cast<double>(objects_per_op) / s.total_seconds},
      {"p50_us", Percentile(s.micros, 0.50)},
      {"p99_us", Percentile(s.micros, 0.99)},
      {"memcpy_gbps", memcpy_gbps}};
  if (memcpy_gbps > 0) row["ratio_to_memcpy"] = gbps / memcpy_gbps;
  return row;
}

}  // namespace

Result<nlohmann::json> RunBench(Client& client, const BenchOptions& options) {
  nlohmann::json rows = nlohmann::json::array();
  const std::uint64_t sizes[] = {4096, 256 * 1024, 4 * 1024 * 1024, 64 * 1024 * 1024};
  const double budget = options.seconds_per_case;
  for (std::uint64_t size : sizes) {
    // Pre-faulted buffers, so neither side pays page faults inside the timed loop.
    std::vector<std::byte> src(size), dst(size);
    for (std::size_t i = 0; i < size; ++i) src[i] = static_cast<std::byte>(i * 131 + 7);
    std::memset(dst.data(), 0, size);
    int min_iters = size >= (64u << 20) ? 10 : 50;

    auto mc = Measure(budget, min_iters, [&] {
      std::memcpy(dst.data(), src.data(), size);
      asm volatile("" : : "r"(dst.data()) : "memory");
      return Status::Ok();
    });
    if (!mc.ok()) return mc.status();
    double memcpy_gbps = static_cast<double>(mc->micros.size()) * static_cast<double>(size) /
                         mc->total_seconds / 1e9;
    rows.push_back(Row(size, "memcpy", "reference", *mc, 1, 0));

    const std::string key = "bench-" + std::to_string(size);
    PutOptions po;
    po.durability = Durability::kCache;
    auto put = Measure(budget, min_iters, [&] { return client.Put(key, src.data(), size, po); });
    if (!put.ok()) return put.status();
    rows.push_back(Row(size, "put", "copy", *put, 1, memcpy_gbps));

    auto get = Measure(budget, min_iters, [&] {
      auto r = client.Get(key, dst.data(), size);
      return r.ok() ? Status::Ok() : r.status();
    });
    if (!get.ok()) return get.status();
    rows.push_back(Row(size, "get", "copy", *get, 1, memcpy_gbps));
    if (std::memcmp(src.data(), dst.data(), size) != 0) {
      return Status::DataLoss("bench: bytes read back differ from those written");
    }

    // Zero copy: the producer writes in place and the consumer reads in place, so what is timed
    // is tierpool's own cost: reserve + checksum + commit, and pin + map + release.
    auto zput = Measure(budget, min_iters, [&] {
      auto r = client.Reserve(key, size, po);
      if (!r.ok()) return r.status();
      return r->Commit();
    });
    if (!zput.ok()) return zput.status();
    rows.push_back(Row(size, "put", "zero_copy", *zput, 1, memcpy_gbps));

    auto zget = Measure(budget, min_iters, [&] {
      auto v = client.GetView(key);
      return v.ok() ? Status::Ok() : v.status();
    });
    if (!zget.ok()) return zget.status();
    rows.push_back(Row(size, "get", "zero_copy", *zget, 1, memcpy_gbps));
    (void)client.Delete(key);
  }

  // Batches of 64 x 4 KiB, as a KV-cache offload would send them.
  constexpr int kBatch = 64;
  constexpr std::uint64_t kSize = 4096;
  std::vector<std::byte> src(kBatch * kSize), dst(kBatch * kSize);
  for (std::size_t i = 0; i < src.size(); ++i) src[i] = static_cast<std::byte>(i * 31 + 1);
  std::vector<PutItem> puts;
  std::vector<GetItem> gets;
  std::vector<std::string> keys;
  PutOptions po;
  po.kind = ObjectKind::kKvBlock;
  po.durability = Durability::kCache;
  for (int i = 0; i < kBatch; ++i) {
    keys.push_back("bench-batch-" + std::to_string(i));
    puts.push_back({keys.back(), src.data() + i * kSize, kSize, po});
    gets.push_back({keys.back(), dst.data() + i * kSize, kSize});
  }
  auto bput = Measure(budget, 50, [&] {
    for (auto& s : client.PutBatch(puts)) TIERPOOL_RETURN_IF_ERROR(s);
    return Status::Ok();
  });
  if (!bput.ok()) return bput.status();
  rows.push_back(Row(kSize, "put_batch", "copy", *bput, kBatch, 0));
  auto bget = Measure(budget, 50, [&] {
    for (auto& r : client.GetBatch(gets)) TIERPOOL_RETURN_IF_ERROR(r.status());
    return Status::Ok();
  });
  if (!bget.ok()) return bget.status();
  rows.push_back(Row(kSize, "get_batch", "copy", *bget, kBatch, 0));
  if (std::memcmp(src.data(), dst.data(), src.size()) != 0) {
    return Status::DataLoss("bench: batch bytes read back differ from those written");
  }
  (void)client.DeleteBatch(keys);
  return rows;
}

}  // namespace tierpool::tool
