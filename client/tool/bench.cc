#include "client/tool/bench.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <memory>
#include <vector>

#include "client/tool/measure.h"
#include "client/tool/redis_peer.h"

namespace tierpool::tool {

namespace {

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

nlohmann::json Row(std::uint64_t size, const char* op, const char* path, const Sample& s,
                   std::uint64_t objects_per_op, int threads = 1) {
  return {{"size", size},
          {"op", op},
          {"path", path},
          {"objects_per_op", objects_per_op},
          {"threads", threads},
          {"iterations", s.micros.size()},
          {"gbps", Gbps(s, size * objects_per_op)},
          {"objects_per_s", Rate(s) * static_cast<double>(objects_per_op)},
          {"p50_us", Percentile(s.micros, 0.50)},
          {"p99_us", Percentile(s.micros, 0.99)}};
}

// From this size up, copies are compared with memcpy into fresh memory (where the targets are
// set), and tierpool's puts and gets go round several keys to meet fresh memory too.
constexpr std::uint64_t kFreshFrom = 256u << 10;
const char* ReferenceName(std::uint64_t size) { return size >= kFreshFrom ? "fresh" : "in_cache"; }

// Each case runs in turns of this long with the references it is compared with (measure.h),
// at least four turns each at the smallest budgets.
double TurnSeconds(double budget_s) { return std::min(0.02, budget_s / 4); }

std::uint64_t LastLevelCacheBytes() {
  long l3 = ::sysconf(_SC_LEVEL3_CACHE_SIZE);
  return l3 > 0 ? static_cast<std::uint64_t>(l3) : 32ull << 20;
}

// The memcpy references: into the same, cache-warm destination again and again, and into fresh
// destinations (a pool of pre-faulted memory several times the last-level cache, cycled
// through), which is what a put's copy into the arena meets above the cache.
class MemcpyReference {
 public:
  explicit MemcpyReference(std::uint64_t max_size)
      : dst_(max_size),
        pool_(std::min<std::uint64_t>(std::max(4 * LastLevelCacheBytes(), 4 * max_size),
                                      1ull << 30)) {
    std::memset(dst_.data(), 0, dst_.size());
    std::memset(pool_.data(), 1, pool_.size());  // pre-faulted, as the server's arenas are
  }

  std::function<Status()> InCache(const Bytes& src, std::uint64_t size) {
    return [this, &src, size] {
      std::memcpy(dst_.data(), src.data(), size);
      asm volatile("" : : "r"(dst_.data()) : "memory");
      return Status::Ok();
    };
  }
  std::function<Status()> Fresh(const Bytes& src, std::uint64_t size) {
    const std::uint64_t slots = std::max<std::uint64_t>(pool_.size() / size, 2);
    return [this, &src, size, slots] {
      std::byte* to = pool_.data() + (next_++ % slots) * size;
      std::memcpy(to, src.data(), size);
      asm volatile("" : : "r"(to) : "memory");
      return Status::Ok();
    };
  }
  // The one a row of this size is compared with.
  std::function<Status()> For(const Bytes& src, std::uint64_t size) {
    return size >= kFreshFrom ? Fresh(src, size) : InCache(src, size);
  }

 private:
  Bytes dst_;
  Bytes pool_;
  std::uint64_t next_ = 0;
};

Turn OneThread(std::function<Status()> op) {
  return [op = std::move(op)](double seconds) { return MeasureFor(seconds, op); };
}
Turn Threads(int threads, std::function<Status(int)> op) {
  return [threads, op = std::move(op)](double seconds) {
    return MeasureParallel(threads, seconds, op);
  };
}

// row[name]: a subject's rate over that of a reference measured in turns with it (operations
// of the same bytes: the ratio of GB/s, and for batches of objects per second).
void AddRatio(nlohmann::json& row, const char* name, const Sample& subject,
              const Sample& reference) {
  row[name] = Rate(subject) / Rate(reference);
}

// A tierpool row's ratios to Redis's operation measured in turns with it: of the rates, and of
// the medians (Redis's p50 time per operation over the row's) for one-thread rows.
void AddRedisRatios(nlohmann::json& row, const Sample& mine, const Sample& theirs,
                    std::uint64_t bytes_per_op, bool one_thread) {
  row["redis_gbps_alongside"] = Gbps(theirs, bytes_per_op);
  AddRatio(row, "ratio_to_redis", mine, theirs);
  if (one_thread) {
    row["ratio_to_redis_p50"] = Percentile(theirs.micros, 0.5) / Percentile(mine.micros, 0.5);
  }
}

Bytes Pattern(std::uint64_t size, unsigned seed) {
  Bytes v(size);
  for (std::size_t i = 0; i < size; ++i) v[i] = static_cast<std::byte>(i * 131 + seed);
  return v;
}

// What both groups of cases measure with: the client, Redis when compared, the time budgets,
// and the rows they add to.
struct RunContext {
  Client& client;
  RedisPeer* redis;  // nullptr: not compared
  double budget;     // seconds per case
  double turn;       // seconds per turn (measure.h)
  nlohmann::json& rows;
};

// Single puts and gets of each size, copying and zero copy, in turns with their memcpy
// references (and Redis); from 256 KiB up they go round keys of fresh_pool_bytes in all.
Status RunSizeCases(const RunContext& run, std::uint64_t fresh_pool_bytes) {
  Client& client = run.client;
  RedisPeer* redis = run.redis;
  nlohmann::json& rows = run.rows;
  const double budget = run.budget, turn = run.turn;
  const std::uint64_t sizes[] = {4096,        64 * 1024,       256 * 1024,
                                 1024 * 1024, 4 * 1024 * 1024, 64 * 1024 * 1024};
  MemcpyReference memcpy_ref(sizes[std::size(sizes) - 1]);
  for (std::uint64_t size : sizes) {
    // Pre-faulted buffers, so neither side pays page faults inside the timed loop.
    const Bytes src = Pattern(size, 7);
    Bytes dst(size), redis_dst(size);
    std::memset(dst.data(), 0, size);
    std::memset(redis_dst.data(), 0, size);
    const int min_iters = size >= (64u << 20) ? 10 : 50;
    // Both references, in turns with each other: the rows that show them.
    auto refs = MeasureInTurns(
        budget, turn, min_iters,
        {OneThread(memcpy_ref.InCache(src, size)), OneThread(memcpy_ref.Fresh(src, size))});
    if (!refs.ok()) return refs.status();
    rows.push_back(Row(size, "memcpy", "in_cache", (*refs)[0], 1));
    rows.push_back(Row(size, "memcpy", "fresh", (*refs)[1], 1));
    const double in_cache_gbps = Gbps((*refs)[0], size);

    // One tierpool case in turns with its memcpy reference and, compared, Redis's operation of
    // the same kind; add_redis_row: the Redis row of this size and operation comes from these
    // turns (the copying cases'; the zero-copy ones measure Redis again only for their ratios).
    auto measure = [&](const char* op, const char* path, std::function<Status()> tierpool_op,
                       std::function<Status()> redis_op, bool add_redis_row) -> Status {
      std::vector<Turn> cases = {OneThread(std::move(tierpool_op)),
                                 OneThread(memcpy_ref.For(src, size))};
      if (redis) cases.push_back(OneThread(std::move(redis_op)));
      auto s = MeasureInTurns(budget, turn, min_iters, cases);
      if (!s.ok()) return s.status();
      const Sample& mine = (*s)[0];
      const Sample& copy = (*s)[1];
      auto with_memcpy_ratios = [&](nlohmann::json row, const Sample& subject) {
        row["memcpy_reference"] = ReferenceName(size);
        row["memcpy_gbps_alongside"] = Gbps(copy, size);
        AddRatio(row, "ratio_to_memcpy", subject, copy);
        row["ratio_to_memcpy_in_cache"] = Gbps(subject, size) / in_cache_gbps;
        return row;
      };
      nlohmann::json row = with_memcpy_ratios(Row(size, op, path, mine, 1), mine);
      if (redis) AddRedisRatios(row, mine, (*s)[2], size, /*one_thread=*/true);
      rows.push_back(std::move(row));
      if (redis && add_redis_row) {
        rows.push_back(with_memcpy_ratios(Row(size, op, "redis", (*s)[2], 1), (*s)[2]));
      }
      return Status::Ok();
    };

    // From 256 KiB up, puts and gets go round several keys, so that their copies meet memory
    // out of cache as the fresh reference does (a real offload writes new tensors, not one
    // key over and over into the same two extents). Redis goes round the same keys: with one
    // key its values stayed in the cache, where tierpool's gets read memory, and its rate of
    // 256 KiB gets moved 2.7x between runs (docs/benchmarks/redis.md, "Packed batches").
    const std::uint64_t rounds =
        size >= kFreshFrom ? std::max<std::uint64_t>(1, fresh_pool_bytes / size) : 1;
    std::vector<std::string> keys;
    for (std::uint64_t i = 0; i < rounds; ++i) {
      keys.push_back("bench-" + std::to_string(size) + "-" + std::to_string(i));
    }
    std::uint64_t turn_key = 0, redis_turn = 0;
    auto next_key = [&]() -> const std::string& { return keys[turn_key++ % keys.size()]; };
    auto redis_key = [&]() -> const std::string& { return keys[redis_turn++ % keys.size()]; };
    auto redis_set = [&] { return redis->Set(redis_key(), src.data(), size); };
    auto redis_get = [&] { return redis->Get(redis_key(), redis_dst.data(), size); };
    PutOptions po;
    po.durability = Durability::kCache;
    // One untimed round first: the client faults an arena's pages in as its calls first meet
    // them (client/arena_mappings.h), once per page for its lifetime, so the timed rounds see
    // what a trainer's puts see after its first steps, not that one-time cost.
    if (rounds > 1) {
      for (const auto& k : keys) TIERPOOL_RETURN_IF_ERROR(client.Put(k, src.data(), size, po));
    }
    TIERPOOL_RETURN_IF_ERROR(measure(
        "put", "copy", [&] { return client.Put(next_key(), src.data(), size, po); }, redis_set,
        true));
    // The gets read every key: write the ones the timed loop did not reach.
    for (std::uint64_t i = turn_key; i < keys.size(); ++i) {
      TIERPOOL_RETURN_IF_ERROR(client.Put(keys[i], src.data(), size, po));
    }
    for (std::uint64_t i = redis_turn; redis && i < keys.size(); ++i) {
      TIERPOOL_RETURN_IF_ERROR(redis->Set(keys[i], src.data(), size));
    }

    turn_key = 0;
    redis_turn = 0;
    TIERPOOL_RETURN_IF_ERROR(measure(
        "get", "copy",
        [&] {
          auto r = client.Get(next_key(), dst.data(), size);
          return r.ok() ? Status::Ok() : r.status();
        },
        redis_get, true));
    if (std::memcmp(src.data(), dst.data(), size) != 0) {
      return Status::DataLoss("bench: bytes read back differ from those written");
    }
    if (redis && std::memcmp(src.data(), redis_dst.data(), size) != 0) {
      return Status::DataLoss("bench: redis returned other bytes than those written");
    }

    // Zero copy: the producer writes in place and the consumer reads in place, so what is timed
    // is tierpool's own cost: reserve + checksum + commit, and pin + map + release.
    turn_key = 0;
    TIERPOOL_RETURN_IF_ERROR(measure(
        "put", "zero_copy",
        [&] {
          auto r = client.Reserve(next_key(), size, po);
          if (!r.ok()) return r.status();
          return r->Commit();
        },
        redis_set, false));
    turn_key = 0;
    TIERPOOL_RETURN_IF_ERROR(measure(
        "get", "zero_copy",
        [&] {
          auto v = client.GetView(next_key());
          return v.ok() ? Status::Ok() : v.status();
        },
        redis_get, false));
    (void)client.DeleteBatch(keys);
    if (redis) (void)redis->Delete(keys);
  }
  return Status::Ok();
}

// Batches of 64 x 4 KiB, as a KV-cache offload would send them: one thread, then `most_threads`,
// each thread with keys of its own, in turns with each other and with Redis pipelined 64 deep.
Status RunBatchCases(const RunContext& run, int most_threads) {
  Client& client = run.client;
  RedisPeer* redis = run.redis;
  nlohmann::json& rows = run.rows;
  const double budget = run.budget, turn = run.turn;
  constexpr int kBatch = 64;
  constexpr std::uint64_t kSize = 4096;
  constexpr std::uint64_t kBatchBytes = kBatch * kSize;
  const int max_threads = std::max(1, most_threads);
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
    b.src = Pattern(kBatchBytes, 1 + static_cast<unsigned>(t));
    b.dst.assign(kBatchBytes, std::byte{0});
    for (int i = 0; i < kBatch; ++i) {
      b.keys.push_back("bench-batch-" + std::to_string(t) + "-" + std::to_string(i));
    }
    for (int i = 0; i < kBatch; ++i) {
      b.puts.push_back({b.keys[i], b.src.data() + i * kSize, kSize, bo});
      b.gets.push_back({b.keys[i], b.dst.data() + i * kSize, kSize});
    }
  }
  Bytes redis_batch_dst(kBatchBytes, std::byte{0});
  const Batch& first = batches[0];
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
  auto measure_batches = [&](const char* op, std::function<Status(int)> tierpool_op,
                             std::function<Status()> redis_op) -> Status {
    std::vector<Turn> cases = {Threads(1, tierpool_op)};
    if (max_threads > 1) cases.push_back(Threads(max_threads, tierpool_op));
    if (redis) cases.push_back(OneThread(std::move(redis_op)));
    auto s = MeasureInTurns(budget, turn, 50, cases);
    if (!s.ok()) return s.status();
    const Sample& one = (*s)[0];
    for (std::size_t i = 0; i + (redis ? 1 : 0) < s->size(); ++i) {
      const int threads = i == 0 ? 1 : max_threads;
      nlohmann::json row = Row(kSize, op, "copy", (*s)[i], kBatch, threads);
      if (threads > 1) AddRatio(row, "ratio_to_one_thread", (*s)[i], one);
      if (redis) AddRedisRatios(row, (*s)[i], s->back(), kBatchBytes, threads == 1);
      rows.push_back(std::move(row));
    }
    if (redis) rows.push_back(Row(kSize, op, "redis", s->back(), kBatch));
    return Status::Ok();
  };
  TIERPOOL_RETURN_IF_ERROR(measure_batches("put_batch", put_batch, [&] {
    return redis->SetPipelined(first.keys, first.src.data(), kSize);
  }));
  TIERPOOL_RETURN_IF_ERROR(measure_batches("get_batch", get_batch, [&] {
    return redis->GetPipelined(first.keys, redis_batch_dst.data(), kSize);
  }));
  for (const Batch& b : batches) {
    if (std::memcmp(b.src.data(), b.dst.data(), b.src.size()) != 0) {
      return Status::DataLoss("bench: batch bytes read back differ from those written");
    }
    (void)client.DeleteBatch(b.keys);
  }
  if (redis) {
    if (std::memcmp(first.src.data(), redis_batch_dst.data(), kBatchBytes) != 0) {
      return Status::DataLoss("bench: redis batch bytes differ from those written");
    }
    (void)redis->Delete(first.keys);
  }
  return Status::Ok();
}

}  // namespace

Result<nlohmann::json> RunBench(Client& client, const BenchOptions& options) {
  if (options.cases != "all" && options.cases != "sizes" && options.cases != "batches") {
    return Status::InvalidArgument("bench --cases is all, sizes or batches, not '" + options.cases +
                                   "'");
  }
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
  // What backs the server's dram (4 KiB pages, transparent or reserved 2 MiB ones): the rows
  // from 256 KiB up depend on it (docs/operations.md, "Sizing the tiers").
  std::string dram_backend;
  if (auto stats = client.ServerStat(); stats.ok()) {
    for (const auto& t : stats->tiers) {
      if (t.tier != TierKind::kDram) continue;
      fresh_pool_bytes = std::min(fresh_pool_bytes, t.capacity / 4);
      dram_backend = t.backend;
    }
  }
  const RunContext run{client, redis.get(), options.seconds_per_case,
                       TurnSeconds(options.seconds_per_case), rows};
  if (options.cases != "batches") TIERPOOL_RETURN_IF_ERROR(RunSizeCases(run, fresh_pool_bytes));
  if (options.cases != "sizes") TIERPOOL_RETURN_IF_ERROR(RunBatchCases(run, options.threads));
  // Which gets were measured: a copying get's rate depends on it.
  for (auto& row : rows) {
    row["client_verifies_checksums"] = options.verify_checksums;
    row["server_dram_backend"] = dram_backend;
  }
  return rows;
}

}  // namespace tierpool::tool
