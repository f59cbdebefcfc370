// The store's index under concurrent readers, without the socket: each benchmark thread pins and
// releases 4 KiB objects (what a get asks of the store) from its own set of keys, as the I/O
// threads of a server with several clients do. The reference in the same run is the one-thread
// rate: with N threads, items_per_second per thread against the /threads:1 row says how far gets
// scale (1.0: perfectly; 1/N: one at a time). A second pair pins and releases while another
// thread keeps putting, to show readers are not starved and writers still get through.
// BM_StorePut is the same for puts of 4 KiB objects from one and two threads, each replacing
// names of its own (reserves and commits under the shared lock, in different parts of the
// index). Run: build/ci/benchmarks/store_concurrency_bench
#include <benchmark/benchmark.h>

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "store/object_store.h"
#include "tiers/dram_tier.h"

namespace tierpool {
namespace {

constexpr std::uint64_t kSize = 4096;
constexpr int kKeysPerThread = 1024;
constexpr int kMaxThreads = 8;

std::string Key(int thread, int i) {
  return "t" + std::to_string(thread) + "-" + std::to_string(i);
}

ObjectStore* SharedStore() {
  static ObjectStore* store = [] {
    std::vector<std::unique_ptr<Tier>> tiers;
    auto d = DramTier::Create({.capacity = 256 << 20, .populate = true});
    if (!d.ok()) std::abort();
    tiers.push_back(std::move(d).value());
    auto s = ObjectStore::Create({}, std::move(tiers));
    if (!s.ok()) std::abort();
    const std::string bytes(kSize, 'x');
    for (int t = 0; t < kMaxThreads; ++t) {
      for (int i = 0; i < kKeysPerThread; ++i) {
        PutSpec spec{.ns = "default", .key = Key(t, i), .size = kSize};
        if (!(*s)->PutCopy(spec, bytes.data(), 0).ok()) std::abort();
      }
    }
    return std::move(s).value().release();  // lives as long as the process
  }();
  return store;
}

// Pin and release one object per iteration, cycling through this thread's keys.
void PinReleaseLoop(benchmark::State& state, ObjectStore* store) {
  const int t = state.thread_index();
  std::vector<std::string> keys;
  for (int i = 0; i < kKeysPerThread; ++i) keys.push_back(Key(t, i));
  const std::uint64_t owner = 100 + t;
  int i = 0;
  for (auto _ : state) {
    auto pinned = store->Pin("default", keys[i], owner);
    if (!pinned.ok() || !store->Release(pinned->lease_id, owner).ok()) {
      state.SkipWithError("pin or release failed");
      return;
    }
    i = (i + 1) % kKeysPerThread;
  }
  state.SetItemsProcessed(state.iterations());
}

void BM_StorePinRelease(benchmark::State& state) { PinReleaseLoop(state, SharedStore()); }
BENCHMARK(BM_StorePinRelease)->Threads(1)->Threads(2)->UseRealTime();

// Puts of 4 KiB objects (reserve, copy, commit), each thread replacing objects of its own.
// Per thread against /threads:1, 1/N means they ran one at a time; what they still share is
// the dram tier's allocator and the index's name parts.
void BM_StorePut(benchmark::State& state) {
  ObjectStore* store = SharedStore();
  const int t = state.thread_index();
  const std::string bytes(kSize, 'p');
  std::vector<PutSpec> specs;
  for (int i = 0; i < kKeysPerThread; ++i) {
    specs.push_back({.ns = "default", .key = "put-" + Key(t, i), .size = kSize});
  }
  const std::uint64_t owner = 200 + t;
  int i = 0;
  for (auto _ : state) {
    if (!store->PutCopy(specs[i], bytes.data(), owner).ok()) {
      state.SkipWithError("put failed");
      return;
    }
    i = (i + 1) % kKeysPerThread;
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_StorePut)->Threads(1)->Threads(2)->UseRealTime();

// The same beside a writer replacing objects of its own as fast as it can (thread 0 of the
// benchmark starts it and stops it; the rows report the readers).
void BM_StorePinReleaseBesidePuts(benchmark::State& state) {
  ObjectStore* store = SharedStore();
  static std::atomic<bool> stop{false};
  static std::atomic<std::uint64_t> puts{0};
  static std::thread writer;
  if (state.thread_index() == 0) {
    stop = false;
    puts = 0;
    writer = std::thread([store] {
      const std::string bytes(kSize, 'y');
      for (int i = 0; !stop.load(std::memory_order_relaxed); i = (i + 1) % kKeysPerThread) {
        PutSpec spec{.ns = "default", .key = "writer-" + std::to_string(i), .size = kSize};
        if (store->PutCopy(spec, bytes.data(), 1).ok()) puts.fetch_add(1);
      }
    });
  }
  PinReleaseLoop(state, store);
  if (state.thread_index() == 0) {
    stop = true;
    writer.join();
    state.counters["writer_puts_per_second"] =
        benchmark::Counter(static_cast<double>(puts.load()), benchmark::Counter::kIsRate);
  }
}
BENCHMARK(BM_StorePinReleaseBesidePuts)->Threads(1)->UseRealTime();

}  // namespace
}  // namespace tierpool

BENCHMARK_MAIN();
