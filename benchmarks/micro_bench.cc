// Micro-benchmarks: checksummed and alignment-proof copies against plain memcpy, and the extent
// allocator.
// Run: build/default/benchmarks/micro_bench
#include <benchmark/benchmark.h>

#include <cstring>
#include <random>
#include <vector>

#include <chrono>

#include "common/checksum.h"
#include "common/copy.h"
#include "common/latency_histogram.h"
#include "tiers/extent_allocator.h"

namespace tierpool {
namespace {

std::vector<char> Buffer(std::size_t n) {
  std::vector<char> v(n + 64);
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<char>(i * 131);
  return v;
}

// The first page boundary at or after p.
char* PageStart(char* p) { return p + (4096 - reinterpret_cast<std::uintptr_t>(p) % 4096) % 4096; }

void BM_Memcpy(benchmark::State& state) {
  auto n = static_cast<std::size_t>(state.range(0));
  auto src = Buffer(n), dst = Buffer(n);
  for (auto _ : state) {
    std::memcpy(dst.data(), src.data(), n);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * n));
}
BENCHMARK(BM_Memcpy)->Arg(4 << 10)->Arg(256 << 10)->Arg(4 << 20)->Arg(64 << 20);

void BM_CopyAndChecksum(benchmark::State& state) {
  auto n = static_cast<std::size_t>(state.range(0));
  auto src = Buffer(n), dst = Buffer(n);
  for (auto _ : state) benchmark::DoNotOptimize(CopyAndChecksum(dst.data(), src.data(), n));
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * n));
}
BENCHMARK(BM_CopyAndChecksum)->Arg(4 << 10)->Arg(256 << 10)->Arg(4 << 20)->Arg(64 << 20);

// Into fresh memory, as a put's or a move's copy into a just-allocated extent meets it: the
// destination cycles through a 256 MiB pre-faulted pool (several times the last-level cache).
// Arg 1: 0 = memcpy, 1 = CopyAndChecksum kWarm, 2 = CopyAndChecksum kFresh.
void BM_CopyIntoFreshMemory(benchmark::State& state) {
  auto n = static_cast<std::size_t>(state.range(0));
  const auto how = state.range(1);
  const std::size_t slots = std::max<std::size_t>((256u << 20) / n, 2);
  auto src = Buffer(n), pool = Buffer(slots * n);
  std::size_t next = 0;
  for (auto _ : state) {
    char* dst = pool.data() + (next++ % slots) * n;
    if (how == 0) {
      std::memcpy(dst, src.data(), n);
      benchmark::ClobberMemory();
    } else {
      benchmark::DoNotOptimize(
          CopyAndChecksum(dst, src.data(), n, how == 2 ? CopyTarget::kFresh : CopyTarget::kWarm));
    }
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * n));
  state.SetLabel(how == 0 ? "memcpy" : how == 1 ? "copy+checksum warm" : "copy+checksum fresh");
}
BENCHMARK(BM_CopyIntoFreshMemory)
    ->ArgsProduct({{64 << 10, 256 << 10, 1 << 20, 4 << 20}, {0, 1, 2}});

// A get's copy out of an arena into the caller's buffer: the source is page-aligned (an extent)
// and cycles through a 256 MiB pool (out of cache, as gets over many keys meet it), the
// destination starts `offset` bytes into a page. Arg 2: 0 = memcpy, 1 = CopyBytes. glibc's
// rep movsb is many times slower on AMD when the destination is a few bytes past the source
// modulo 4 KiB (common/copy.h); CopyBytes should not care.
void BM_CopyToUnalignedBuffer(benchmark::State& state) {
  auto n = static_cast<std::size_t>(state.range(0));
  const auto offset = static_cast<std::size_t>(state.range(1));
  const bool copy_bytes = state.range(2) == 1;
  const std::size_t slots = std::max<std::size_t>((256u << 20) / n, 2);
  auto pool = Buffer(slots * n + 4096), dst = Buffer(n + 8192);
  char* const from_base = PageStart(pool.data());
  char* const to = PageStart(dst.data()) + offset;
  std::size_t next = 0;
  for (auto _ : state) {
    const char* from = from_base + (next++ % slots) * n;
    if (copy_bytes) {
      CopyBytes(to, from, n);
    } else {
      std::memcpy(to, from, n);
    }
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * n));
  state.SetLabel(copy_bytes ? "CopyBytes" : "memcpy");
}
BENCHMARK(BM_CopyToUnalignedBuffer)
    ->ArgsProduct({{4 << 10, 256 << 10, 4 << 20}, {0, 8, 16}, {0, 1}});

// A checked get's copy: out of an arena no cache holds (a page-aligned source cycling through a
// 256 MiB pool) into the caller's buffer, reused (CopyTarget::kWarm), 16 bytes into its
// allocation as a std::vector's data is. Arg 1: 0 = CopyBytes alone, 1 = CopyAndChecksum.
void BM_CheckedCopyOutOfMemory(benchmark::State& state) {
  auto n = static_cast<std::size_t>(state.range(0));
  const bool checked = state.range(1) == 1;
  const std::size_t slots = std::max<std::size_t>((256u << 20) / n, 2);
  auto pool = Buffer(slots * n + 4096), dst = Buffer(n + 16);
  char* const from_base = PageStart(pool.data());
  char* const to = dst.data() + 16;
  std::size_t next = 0;
  for (auto _ : state) {
    const char* from = from_base + (next++ % slots) * n;
    if (checked) {
      benchmark::DoNotOptimize(CopyAndChecksum(to, from, n));
    } else {
      CopyBytes(to, from, n);
      benchmark::ClobberMemory();
    }
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * n));
  state.SetLabel(checked ? "CopyAndChecksum" : "CopyBytes");
}
BENCHMARK(BM_CheckedCopyOutOfMemory)
    ->ArgsProduct({{16 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20}, {0, 1}});

void BM_Xxh3(benchmark::State& state) {
  auto n = static_cast<std::size_t>(state.range(0));
  auto src = Buffer(n);
  for (auto _ : state) benchmark::DoNotOptimize(Xxh3(src.data(), n));
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * n));
}
BENCHMARK(BM_Xxh3)->Arg(4 << 10)->Arg(64 << 20);

// Allocate/free churn in a 1 GiB range with 4 KiB..1 MiB extents, half of it live.
void BM_ExtentAllocatorChurn(benchmark::State& state) {
  ExtentAllocator a({.capacity = 1ull << 30, .alignment = 4096});
  std::mt19937_64 rng(1);
  std::vector<AllocatedRange> live;
  for (auto _ : state) {
    if (live.size() < 1000 || rng() % 2 == 0) {
      if (auto r = a.Allocate(4096 + rng() % (1 << 20))) live.push_back(*r);
    } else {
      std::size_t i = rng() % live.size();
      benchmark::DoNotOptimize(a.Free(live[i]));
      live[i] = live.back();
      live.pop_back();
    }
  }
  state.counters["fragmentation"] = a.stats().fragmentation();
}
BENCHMARK(BM_ExtentAllocatorChurn);

}  // namespace
}  // namespace tierpool

// What timing each request for /metrics adds to it: two clock reads and a histogram record.
static void BM_RequestLatencyRecording(benchmark::State& state) {
  tierpool::LatencyHistogram h;
  std::uint64_t bytes = 4096;
  for (auto _ : state) {
    const auto started = std::chrono::steady_clock::now();
    benchmark::DoNotOptimize(bytes);
    const auto took = std::chrono::duration_cast<std::chrono::microseconds>(
        std::chrono::steady_clock::now() - started);
    h.Record(static_cast<std::uint64_t>(took.count()) + tierpool::SizeClassOf(bytes));
  }
  benchmark::DoNotOptimize(h.Read().count);
}
BENCHMARK(BM_RequestLatencyRecording);

BENCHMARK_MAIN();
