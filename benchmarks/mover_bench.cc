// The mover's own cost per move, without a device: moves of 256 KiB objects from dram into a
// tier whose writes copy nothing and end on a completion thread of their own, as the CUDA copy
// engine's do (queued by the mover's link thread, answered in order by another). Small moves
// onto a GPU ran at about 12 us each against the copy engine's 7 us per copy
// (docs/benchmarks/hbm.md, "hbm in a GPU's memory"); this says how much of that the mover and the
// hand-offs between its threads take. The reference in the same run is the same hand-off with
// no mover: the link thread's loop queueing the writes itself. Run:
// build/ci/benchmarks/mover_bench
#include <benchmark/benchmark.h>

#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "store/mover.h"
#include "tiers/dram_tier.h"

namespace tierpool {
namespace {

constexpr std::uint64_t kSize = 256 << 10;
constexpr int kMoves = 4096;

// A tier that takes writes and answers them in order on its own thread, copying nothing.
class CompletionThreadTier final : public Tier {
 public:
  explicit CompletionThreadTier(Tier* inner) : inner_(inner), thread_([this] { Run(); }) {}
  ~CompletionThreadTier() override {
    {
      std::lock_guard lock(mu_);
      stopping_ = true;
    }
    wake_.notify_one();
    thread_.join();
  }
  TierKind kind() const override { return TierKind::kHbm; }
  std::uint32_t level() const override { return 0; }
  Result<Extent> Allocate(std::uint64_t size, const AllocationHint& hint) override {
    return inner_->Allocate(size, hint);
  }
  Status Free(const Extent& e) override { return inner_->Free(e); }
  std::byte* HostAddress(const Extent&) override { return nullptr; }
  std::vector<ArenaInfo> Arenas() const override { return inner_->Arenas(); }
  TierStats Stats() const override { return inner_->Stats(); }
  std::uint64_t capacity() const override { return inner_->capacity(); }
  std::uint64_t used_bytes() const override { return inner_->used_bytes(); }

  void Queue(IoCompletion done) {
    {
      std::lock_guard lock(mu_);
      pending_.push_back(std::move(done));
    }
    wake_.notify_one();
  }

 protected:
  void ReadImpl(const Extent&, const RecordInfo&, std::byte*, IoCompletion done) override {
    done(Status::Unimplemented("not used"));
  }
  void WriteImpl(const Extent&, const RecordInfo&, const std::byte*, IoCompletion done) override {
    Queue(std::move(done));
  }

 private:
  void Run() {
    for (;;) {
      IoCompletion done;
      {
        std::unique_lock lock(mu_);
        wake_.wait(lock, [&] { return !pending_.empty() || stopping_; });
        if (pending_.empty()) return;
        done = std::move(pending_.front());
        pending_.pop_front();
      }
      done(Status::Ok());
    }
  }

  Tier* inner_;
  std::mutex mu_;
  std::condition_variable wake_;
  std::deque<IoCompletion> pending_;  // guarded by mu_
  bool stopping_ = false;             // guarded by mu_
  std::thread thread_;
};

struct Fixture {
  std::unique_ptr<DramTier> dram;
  std::unique_ptr<CompletionThreadTier> device;
  std::vector<Extent> src, dst;
  Fixture() {
    dram = std::move(DramTier::Create({.capacity = 2 * kMoves * kSize + (64 << 20)})).value();
    device = std::make_unique<CompletionThreadTier>(dram.get());
    for (int i = 0; i < kMoves; ++i) {
      src.push_back(*dram->Allocate(kSize, {}));
      dst.push_back(*device->Allocate(kSize, {}));
    }
  }
};

Fixture& Shared() {
  static Fixture* f = new Fixture();
  return *f;
}

// kMoves moves through the mover, 256 MiB in flight per link (the server's default).
void BM_MoverMoves(benchmark::State& state) {
  Fixture& f = Shared();
  for (auto _ : state) {
    Mover mover({});
    for (int i = 0; i < kMoves; ++i) {
      MoveRequest m;
      m.from = f.dram.get();
      m.src = f.src[static_cast<std::size_t>(i)];
      m.to = f.device.get();
      m.dst = f.dst[static_cast<std::size_t>(i)];
      m.info = {static_cast<std::uint64_t>(i), static_cast<std::uint64_t>(i), kSize, 0};
      m.done = [](const MoveResult&) {};
      mover.Submit(std::move(m));
    }
    mover.Drain();
    mover.Stop();
  }
  state.SetItemsProcessed(state.iterations() * kMoves);
}
BENCHMARK(BM_MoverMoves)->Unit(benchmark::kMillisecond)->UseRealTime();

// The reference: the same writes queued by one thread and answered on the tier's, with a count
// of those outstanding bounded as the mover bounds its bytes.
void BM_QueuedWritesAlone(benchmark::State& state) {
  Fixture& f = Shared();
  constexpr int kInflight = (256 << 20) / kSize;
  for (auto _ : state) {
    std::mutex mu;
    std::condition_variable room;
    int inflight = 0, done = 0;
    for (int i = 0; i < kMoves; ++i) {
      {
        std::unique_lock lock(mu);
        room.wait(lock, [&] { return inflight < kInflight; });
        ++inflight;
      }
      f.device->Queue([&](Status) {
        std::lock_guard lock(mu);
        --inflight;
        ++done;
        room.notify_one();
      });
    }
    std::unique_lock lock(mu);
    room.wait(lock, [&] { return done == kMoves; });
  }
  state.SetItemsProcessed(state.iterations() * kMoves);
}
BENCHMARK(BM_QueuedWritesAlone)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
}  // namespace tierpool

BENCHMARK_MAIN();
