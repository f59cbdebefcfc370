#include "client/tool/bench.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "client/tool/redis_peer.h"

namespace tierpool::tool {

namespace {

using Clock = std::chrono::steady_clock;

// Buffers that start on a cache line, as PyTorch's CPU allocator places tensors. Where source and
// destination start relative to each other decides how fast glibc's memcpy copies on some CPUs
// (common/copy.h: 2-28x slower a few bytes apart modulo 4 KiB), so neither the memcpy
// references nor tierpool's rows may depend on where malloc happened to put the buffers.
template <class T>
struct LineAligned {
  using value_type = T;
  static constexpr std::align_val_t kAlign{64};
  LineAligned() = default;
  template <class U>
  explicit LineAligned(const LineAligned<U>&) {}
  T* allocate(std::size_t n) { return static_cast<T*>(::operator new(n * sizeof(T), kAlign)); }
  void deallocate(T* p, std::size_t) { ::operator delete(p, kAlign); }
  bool operator==(const LineAligned&) const = default;
};
using Bytes = std::vector<std::byte, LineAligned<std::byte>>;

struct Sample {
  std::vector<double> micros;  // one entry per operation (or per batch)
  double total_seconds = 0;    // wall time of the measured loop (all threads together)
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

// `threads` threads each run op(thread) for the budget, started together; the rate is all their
// operations over the wall time from the start to the last one's end.
Result<Sample> MeasureParallel(int threads, double budget_s, const std::function<Status(int)>& op) {
  for (int t = 0; t < threads; ++t) TIERPOOL_RETURN_IF_ERROR(op(t));  // warm-up
  std::vector<std::vector<double>> micros(static_cast<std::size_t>(threads));
  std::vector<Status> failed(static_cast<std::size_t>(threads));
  std::atomic<int> ready{0};
  std::atomic<bool> go{false};
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      ready.fetch_add(1);
      while (!go.load()) std::this_thread::yield();
      const auto start = Clock::now();
      for (;;) {
        auto t0 = Clock::now();
        if (Status s = op(t); !s.ok()) {
          failed[static_cast<std::size_t>(t)] = s;
          return;
        }
        auto t1 = Clock::now();
        micros[static_cast<std::size_t>(t)].push_back(
            std::chrono::duration<double, std::micro>(t1 - t0).count());
        if (std::chrono::duration<double>(t1 - start).count() >= budget_s) return;
      }
    });
  }
  while (ready.load() < threads) std::this_thread::yield();
  const auto start = Clock::now();
  go = true;
  for (auto& th : pool) th.join();
  Sample s;
  s.total_seconds = std::chrono::duration<double>(Clock::now() - start).count();
  for (int t = 0; t < threads; ++t) {
    TIERPOOL_RETURN_IF_ERROR(failed[static_cast<std::size_t>(t)]);
    s.micros.insert(s.micros.end(), micros[static_cast<std::size_t>(t)].begin(),
                    micros[static_cast<std::size_t>(t)].end());
  }
  return s;
}

double Percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  auto idx = static_cast<std::size_t>(p * static_cast<double>(v.size() - 1) + 0.5);
  return v[std::min(idx, v.size() - 1)];
}

double Gbps(const Sample& s, std::uint64_t bytes_per_op) {
  return static_cast<double>(s.micros.size()) * static_cast<double>(bytes_per_op) /
         s.total_seconds / 1e9;
}

nlohmann::json Row(std::uint64_t size, const char* op, const char* path, const Sample& s,
                   std::uint64_t objects_per_op, int threads = 1) {
  const double ops = static_cast<double>(s.micros.size());
  return {{"size", size},
          {"op", op},
          {"path", path},
          {"objects_per_op", objects_per_op},
          {"threads", threads},
          {"iterations", s.micros.size()},
          {"gbps", Gbps(s, size * objects_per_op)},
          {"objects_per_s", ops * static_cast<double>(objects_per_op) / s.total_seconds},
          {"p50_us", Percentile(s.micros, 0.50)},
          {"p99_us", Percentile(s.micros, 0.99)}};
}

// From this size up, copies are compared with memcpy into fresh memory (where the targets are
// set), and tierpool's puts and gets go round several keys to meet fresh memory too.
constexpr std::uint64_t kFreshFrom = 256u << 10;

// The memcpy references of one size: into the same, cache-warm destination again and again,
// and into fresh destinations (a pool of pre-faulted memory several times the last-level cache,
// cycled through), which is what a put's copy into the arena meets above the cache.
struct MemcpyReference {
  double in_cache_gbps = 0;
  double fresh_gbps = 0;
  // The one a row's ratio_to_memcpy is against.
  static const char* reference_name(std::uint64_t size) {
    return size >= kFreshFrom ? "fresh" : "in_cache";
  }
  double reference_gbps(std::uint64_t size) const {
    return size >= kFreshFrom ? fresh_gbps : in_cache_gbps;
  }
};

std::uint64_t LastLevelCacheBytes() {
  long l3 = ::sysconf(_SC_LEVEL3_CACHE_SIZE);
  return l3 > 0 ? static_cast<std::uint64_t>(l3) : 32ull << 20;
}

Result<MemcpyReference> MeasureMemcpy(std::uint64_t size, const Bytes& src, double budget,
                                      int min_iters, nlohmann::json& rows) {
  MemcpyReference ref;
  Bytes dst(size);
  std::memset(dst.data(), 0, size);
  auto warm = Measure(budget, min_iters, [&] {
    std::memcpy(dst.data(), src.data(), size);
    asm volatile("" : : "r"(dst.data()) : "memory");
    return Status::Ok();
  });
  if (!warm.ok()) return warm.status();
  ref.in_cache_gbps = Gbps(*warm, size);
  rows.push_back(Row(size, "memcpy", "in_cache", *warm, 1));

  const std::uint64_t pool_bytes =
      std::min<std::uint64_t>(std::max(4 * LastLevelCacheBytes(), 4 * size), 1ull << 30);
  const std::uint64_t slots = std::max<std::uint64_t>(pool_bytes / size, 2);
  Bytes pool(slots * size);
  std::memset(pool.data(), 1, pool.size());  // pre-faulted, as the server's arenas are
  std::uint64_t next = 0;
  auto fresh = Measure(budget, min_iters, [&] {
    std::byte* to = pool.data() + (next++ % slots) * size;
    std::memcpy(to, src.data(), size);
    asm volatile("" : : "r"(to) : "memory");
    return Status::Ok();
  });
  if (!fresh.ok()) return fresh.status();
  ref.fresh_gbps = Gbps(*fresh, size);
  rows.push_back(Row(size, "memcpy", "fresh", *fresh, 1));
  return ref;
}

void AddMemcpyRatios(nlohmann::json& row, std::uint64_t size, const MemcpyReference& ref) {
  const double gbps = row["gbps"].get<double>();
  row["memcpy_reference"] = MemcpyReference::reference_name(size);
  row["ratio_to_memcpy"] = gbps / ref.reference_gbps(size);
  row["ratio_to_memcpy_in_cache"] = gbps / ref.in_cache_gbps;
}

// Each row `is_subject` picks gets row[name]: its rate over that of the row `is_reference_for`
// finds (objects per second for batches, GB/s otherwise).
void AddRatios(nlohmann::json& rows, const char* name,
               const std::function<bool(const nlohmann::json&)>& is_subject,
               const std::function<bool(const nlohmann::json& reference,
                                        const nlohmann::json& row)>& is_reference_for) {
  for (auto& row : rows) {
    if (!is_subject(row)) continue;
    for (const auto& reference : rows) {
      if (!is_reference_for(reference, row)) continue;
      const char* field = row["objects_per_op"].get<std::uint64_t>() > 1 ? "objects_per_s" : "gbps";
      row[name] = row[field].get<double>() / reference[field].get<double>();
    }
  }
}

Bytes Pattern(std::uint64_t size, unsigned seed) {
  Bytes v(size);
  for (std::size_t i = 0; i < size; ++i) v[i] = static_cast<std::byte>(i * 131 + seed);
  return v;
}

}  // namespace

Result<nlohmann::json> RunBench(Client& client, const BenchOptions& options) {
  std::unique_ptr<RedisPeer> redis;
  if (options.compare == "redis") {
    auto started = RedisPeer::Start(options.redis_server);
    if (!started.ok()) return started.status();
    redis = std::move(started).value();
  } else if (!options.compare.empty()) {
    return Status::InvalidArgument("bench can compare with redis only, not '" + options.compare +
                                   "'");
  }
  nlohmann::json rows = nlohmann::json::array();
  // The keys a size goes round take up to 4x the last-level cache, within a quarter of dram.
  std::uint64_t fresh_pool_bytes = 4 * LastLevelCacheBytes();
  if (auto stats = client.ServerStat(); stats.ok()) {
    for (const auto& t : stats->tiers) {
      if (t.tier == TierKind::kDram) fresh_pool_bytes = std::min(fresh_pool_bytes, t.capacity / 4);
    }
  }
  const std::uint64_t sizes[] = {4096,        64 * 1024,       256 * 1024,
                                 1024 * 1024, 4 * 1024 * 1024, 64 * 1024 * 1024};
  const double budget = options.seconds_per_case;
  for (std::uint64_t size : sizes) {
    // Pre-faulted buffers, so neither side pays page faults inside the timed loop.
    const Bytes src = Pattern(size, 7);
    Bytes dst(size);
    std::memset(dst.data(), 0, size);
    const int min_iters = size >= (64u << 20) ? 10 : 50;
    auto ref = MeasureMemcpy(size, src, budget, min_iters, rows);
    if (!ref.ok()) return ref.status();
    auto add = [&](const char* op, const char* path, const Sample& s) {
      rows.push_back(Row(size, op, path, s, 1));
      AddMemcpyRatios(rows.back(), size, *ref);
    };

    // From 256 KiB up, puts and gets go round several keys, so that their copies meet memory
    // out of cache as the fresh reference does (a real offload writes new tensors, not one
    // key over and over into the same two extents).
    const std::uint64_t rounds =
        size >= kFreshFrom ? std::max<std::uint64_t>(1, fresh_pool_bytes / size) : 1;
    std::vector<std::string> keys;
    for (std::uint64_t i = 0; i < rounds; ++i) {
      keys.push_back("bench-" + std::to_string(size) + "-" + std::to_string(i));
    }
    std::uint64_t turn = 0;
    auto next_key = [&]() -> const std::string& { return keys[turn++ % keys.size()]; };
    PutOptions po;
    po.durability = Durability::kCache;
    // One untimed round first: the client faults an arena's pages in as its calls first meet
    // them (client/arena_mappings.h), once per page for its lifetime, so the timed rounds see
    // what a trainer's puts see after its first steps, not that one-time cost.
    if (rounds > 1) {
      for (const auto& k : keys) TIERPOOL_RETURN_IF_ERROR(client.Put(k, src.data(), size, po));
    }
    auto put =
        Measure(budget, min_iters, [&] { return client.Put(next_key(), src.data(), size, po); });
    if (!put.ok()) return put.status();
    add("put", "copy", *put);
    // The gets read every key: write the ones the timed loop did not reach.
    for (std::uint64_t i = turn; i < keys.size(); ++i) {
      TIERPOOL_RETURN_IF_ERROR(client.Put(keys[i], src.data(), size, po));
    }

    turn = 0;
    auto get = Measure(budget, min_iters, [&] {
      auto r = client.Get(next_key(), dst.data(), size);
      return r.ok() ? Status::Ok() : r.status();
    });
    if (!get.ok()) return get.status();
    add("get", "copy", *get);
    if (std::memcmp(src.data(), dst.data(), size) != 0) {
      return Status::DataLoss("bench: bytes read back differ from those written");
    }

    // Zero copy: the producer writes in place and the consumer reads in place, so what is timed
    // is tierpool's own cost: reserve + checksum + commit, and pin + map + release.
    turn = 0;
    auto zput = Measure(budget, min_iters, [&] {
      auto r = client.Reserve(next_key(), size, po);
      if (!r.ok()) return r.status();
      return r->Commit();
    });
    if (!zput.ok()) return zput.status();
    add("put", "zero_copy", *zput);

    turn = 0;
    auto zget = Measure(budget, min_iters, [&] {
      auto v = client.GetView(next_key());
      return v.ok() ? Status::Ok() : v.status();
    });
    if (!zget.ok()) return zget.status();
    add("get", "zero_copy", *zget);
    (void)client.DeleteBatch(keys);
    const std::string& key = keys.front();

    if (redis) {
      auto rput = Measure(budget, min_iters, [&] { return redis->Set(key, src.data(), size); });
      if (!rput.ok()) return rput.status();
      add("put", "redis", *rput);
      std::memset(dst.data(), 0, size);
      auto rget = Measure(budget, min_iters, [&] { return redis->Get(key, dst.data(), size); });
      if (!rget.ok()) return rget.status();
      add("get", "redis", *rget);
      if (std::memcmp(src.data(), dst.data(), size) != 0) {
        return Status::DataLoss("bench: redis returned other bytes than those written");
      }
      (void)redis->Delete({key});
    }
  }

  // Batches of 64 x 4 KiB, as a KV-cache offload would send them: one thread, then several,
  // each thread with keys of its own.
  constexpr int kBatch = 64;
  constexpr std::uint64_t kSize = 4096;
  const int max_threads = std::max(1, options.threads);
  struct Batch {
    Bytes src, dst;
    std::vector<std::string> keys;
    std::vector<PutItem> puts;
    std::vector<GetItem> gets;
  };
  std::vector<Batch> batches(static_cast<std::size_t>(max_threads));
  PutOptions bo;
  bo.kind = ObjectKind::kKvBlock;
  bo.durability = Durability::kCache;
  for (int t = 0; t < max_threads; ++t) {
    Batch& b = batches[static_cast<std::size_t>(t)];
    b.src = Pattern(kBatch * kSize, 1 + static_cast<unsigned>(t));
    b.dst.assign(kBatch * kSize, std::byte{0});
    for (int i = 0; i < kBatch; ++i) {
      b.keys.push_back("bench-batch-" + std::to_string(t) + "-" + std::to_string(i));
    }
    for (int i = 0; i < kBatch; ++i) {
      b.puts.push_back({b.keys[i], b.src.data() + i * kSize, kSize, bo});
      b.gets.push_back({b.keys[i], b.dst.data() + i * kSize, kSize});
    }
  }
  auto put_batch = [&](int t) {
    for (auto& s : client.PutBatch(batches[static_cast<std::size_t>(t)].puts)) {
      TIERPOOL_RETURN_IF_ERROR(s);
    }
    return Status::Ok();
  };
  auto get_batch = [&](int t) {
    for (auto& r : client.GetBatch(batches[static_cast<std::size_t>(t)].gets)) {
      TIERPOOL_RETURN_IF_ERROR(r.status());
    }
    return Status::Ok();
  };
  std::vector<int> thread_counts = {1};
  if (max_threads > 1) thread_counts.push_back(max_threads);
  for (int threads : thread_counts) {
    auto bput = MeasureParallel(threads, budget, put_batch);
    if (!bput.ok()) return bput.status();
    rows.push_back(Row(kSize, "put_batch", "copy", *bput, kBatch, threads));
    auto bget = MeasureParallel(threads, budget, get_batch);
    if (!bget.ok()) return bget.status();
    rows.push_back(Row(kSize, "get_batch", "copy", *bget, kBatch, threads));
  }
  for (const Batch& b : batches) {
    if (std::memcmp(b.src.data(), b.dst.data(), b.src.size()) != 0) {
      return Status::DataLoss("bench: batch bytes read back differ from those written");
    }
    (void)client.DeleteBatch(b.keys);
  }
  if (redis) {
    Batch& b = batches[0];
    std::fill(b.dst.begin(), b.dst.end(), std::byte{0});
    auto rput =
        Measure(budget, 50, [&] { return redis->SetPipelined(b.keys, b.src.data(), kSize); });
    if (!rput.ok()) return rput.status();
    rows.push_back(Row(kSize, "put_batch", "redis", *rput, kBatch));
    auto rget =
        Measure(budget, 50, [&] { return redis->GetPipelined(b.keys, b.dst.data(), kSize); });
    if (!rget.ok()) return rget.status();
    rows.push_back(Row(kSize, "get_batch", "redis", *rget, kBatch));
    if (std::memcmp(b.src.data(), b.dst.data(), b.src.size()) != 0) {
      return Status::DataLoss("bench: redis batch bytes differ from those written");
    }
    (void)redis->Delete(b.keys);
    // Each tierpool row against the redis row of the same size and operation.
    auto tierpool_row = [](const nlohmann::json& row) {
      return row["path"] == "copy" || row["path"] == "zero_copy";
    };
    auto redis_row_for = [](const nlohmann::json& ref, const nlohmann::json& row) {
      return ref["path"] == "redis" && ref["size"] == row["size"] && ref["op"] == row["op"];
    };
    AddRatios(rows, "ratio_to_redis", tierpool_row, redis_row_for);
    // The same at the median (Redis's p50 time per operation over tierpool's): a mean is pulled
    // about by a shared machine's millisecond stalls, which hit either side in turn. One-thread
    // rows, where an operation's time is the rate's inverse.
    for (auto& row : rows) {
      if (!tierpool_row(row) || row["threads"] != 1) continue;
      for (const auto& ref : rows) {
        if (redis_row_for(ref, row)) {
          row["ratio_to_redis_p50"] = ref["p50_us"].get<double>() / row["p50_us"].get<double>();
        }
      }
    }
  }
  // Several threads against one: the scaling figure.
  AddRatios(
      rows, "ratio_to_one_thread", [](const nlohmann::json& row) { return row["threads"] > 1; },
      [](const nlohmann::json& ref, const nlohmann::json& row) {
        return ref["threads"] == 1 && ref["op"] == row["op"] && ref["path"] == row["path"] &&
               ref["size"] == row["size"];
      });
  return rows;
}

}  // namespace tierpool::tool
