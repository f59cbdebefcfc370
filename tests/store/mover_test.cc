// The mover on its own: priorities and deadlines, bounded in-flight bytes per link,
// cancellation, checked copies, and the fault-injecting I/O backend under moves.
#include "store/mover.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "common/checksum.h"
#include "tiers/dram_tier.h"
#include "tiers/hbm_tier.h"
#include "tiers/nvme_tier.h"

namespace tierpool {
namespace {

// A host tier whose writes wait on a gate, so a test can hold operations in flight and look at
// the queue; it records the order in which writes started.
class GatedTier final : public Tier {
 public:
  explicit GatedTier(Tier* inner) : inner_(inner) {}
  TierKind kind() const override { return TierKind::kHbm; }
  std::uint32_t level() const override { return 0; }
  Result<Extent> Allocate(std::uint64_t size, const AllocationHint& hint) override {
    return inner_->Allocate(size, hint);
  }
  Status Free(const Extent& e) override { return inner_->Free(e); }
  std::byte* HostAddress(const Extent& e) override { return inner_->HostAddress(e); }
  std::vector<ArenaInfo> Arenas() const override { return inner_->Arenas(); }
  TierStats Stats() const override { return inner_->Stats(); }
  std::uint64_t capacity() const override { return inner_->capacity(); }
  std::uint64_t used_bytes() const override { return inner_->used_bytes(); }

  void Open() {
    std::lock_guard lock(mu_);
    open_ = true;
    cv_.notify_all();
  }
  std::vector<std::uint64_t> started() {
    std::lock_guard lock(mu_);
    return started_;
  }
  int waiting() {
    std::lock_guard lock(mu_);
    return waiting_;
  }

 protected:
  void ReadImpl(const Extent&, const RecordInfo&, std::byte*, IoCompletion done) override {
    done(Status::Unimplemented("not used"));
  }
  void WriteImpl(const Extent& dst, const RecordInfo& info, const std::byte* src,
                 IoCompletion done) override {
    {
      std::unique_lock lock(mu_);
      started_.push_back(info.object_id);
      ++waiting_;
      cv_.wait(lock, [&] { return open_; });
      --waiting_;
    }
    std::byte* to = inner_->HostAddress(dst);
    done(CopyAndChecksum(to, src, info.size) == info.checksum ? Status::Ok()
                                                              : Status::DataLoss("mismatch"));
  }

 private:
  Tier* inner_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool open_ = false;
  int waiting_ = 0;
  std::vector<std::uint64_t> started_;
};

struct Completions {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::pair<std::uint64_t, MoveResult>> done;
  std::function<void(const MoveResult&)> For(std::uint64_t tag) {
    return [this, tag](const MoveResult& r) {
      std::lock_guard lock(mu);
      done.emplace_back(tag, r);
      cv.notify_all();
    };
  }
};

class MoverTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto d = DramTier::Create({.capacity = 64 << 20, .populate = false});
    ASSERT_TRUE(d.ok());
    dram_ = std::move(d).value();
    auto h = HbmTier::Create({.capacity = 64 << 20}, std::make_unique<HostPinnedHbmBackend>());
    ASSERT_TRUE(h.ok());
    hbm_ = std::move(h).value();
  }

  // Fills a fresh dram extent with a pattern and returns a request to copy it into `to`.
  MoveRequest Request(Tier* to, std::uint64_t size, std::uint64_t tag) {
    auto src = dram_->Allocate(size, {});
    auto dst = to->Allocate(size, {});
    EXPECT_TRUE(src.ok() && dst.ok());
    std::byte* p = dram_->HostAddress(*src);
    for (std::uint64_t i = 0; i < size; ++i) p[i] = static_cast<std::byte>((i * 7 + tag) & 0xff);
    MoveRequest r;
    r.from = dram_.get();
    r.src = *src;
    r.to = to;
    r.dst = *dst;
    r.info = {tag, tag, size, Xxh3(p, size)};
    return r;
  }

  std::unique_ptr<DramTier> dram_;
  std::unique_ptr<HbmTier> hbm_;
};

TEST_F(MoverTest, CopiesAndChecksBytes) {
  Mover mover({});
  Completions c;
  MoveRequest r = Request(hbm_.get(), 3 << 20, 1);
  Extent dst = r.dst, src = r.src;
  r.done = c.For(1);
  mover.Submit(std::move(r));
  mover.Drain();
  ASSERT_EQ(c.done.size(), 1u);
  EXPECT_TRUE(c.done[0].second.status.ok()) << c.done[0].second.status.ToString();
  EXPECT_EQ(std::memcmp(hbm_->HostAddress(dst), dram_->HostAddress(src), 3 << 20), 0);

  // Bytes that no longer match their checksum do not arrive as a good copy.
  MoveRequest bad = Request(hbm_.get(), 1 << 20, 2);
  dram_->HostAddress(bad.src)[12345] ^= std::byte{1};
  bad.done = c.For(2);
  mover.Submit(std::move(bad));
  mover.Drain();
  ASSERT_EQ(c.done.size(), 2u);
  EXPECT_EQ(c.done[1].second.status.code(), StatusCode::kDataLoss);
  std::uint64_t failed = 0, completed = 0;
  mover.VisitLinks([&](const LinkStats& l) {
    failed += l.failed;
    completed += l.completed;
  });
  EXPECT_EQ(failed, 1u);
  EXPECT_EQ(completed, 1u);
}

TEST_F(MoverTest, PriorityThenDeadlineThenArrival) {
  GatedTier gated(hbm_.get());
  // One operation in flight at a time: everything else waits in the queue, in order.
  Mover mover({.max_inflight_bytes_per_link = 1});
  Completions c;
  auto submit = [&](std::uint64_t tag, MovePriority p, std::uint64_t deadline) {
    MoveRequest r = Request(&gated, 4096, tag);
    r.priority = p;
    r.deadline_us = deadline;
    r.done = c.For(tag);
    return mover.Submit(std::move(r));
  };
  submit(1, MovePriority::kBackground, 0);  // starts at once and holds the link
  while (gated.waiting() == 0) std::this_thread::yield();
  submit(2, MovePriority::kBackground, 0);
  submit(3, MovePriority::kPlanned, 900);
  submit(4, MovePriority::kPlanned, 500);
  submit(5, MovePriority::kDemand, 0);
  std::uint64_t late = submit(6, MovePriority::kBackground, 0);
  submit(7, MovePriority::kPlanned, 0);  // no deadline: after those with one
  // A reader now waits for 6: it jumps to demand, behind 5 which was there first.
  EXPECT_TRUE(mover.Expedite(late, MovePriority::kDemand, 0));
  gated.Open();
  mover.Drain();
  EXPECT_EQ(gated.started(), (std::vector<std::uint64_t>{1, 5, 6, 4, 3, 7, 2}));
}

TEST_F(MoverTest, InflightBytesBoundedPerLink) {
  GatedTier gated(hbm_.get());
  Mover mover({.max_inflight_bytes_per_link = 3 << 20});
  Completions c;
  for (std::uint64_t i = 1; i <= 6; ++i) {
    MoveRequest r = Request(&gated, 1 << 20, i);
    r.done = c.For(i);
    mover.Submit(std::move(r));
  }
  // A link is one copy stream: with tiers that complete on the caller's thread one operation
  // runs at a time, and the queue holds the rest.
  while (gated.waiting() == 0) std::this_thread::yield();
  std::uint64_t inflight_bytes = 0, queued = 0;
  mover.VisitLinks([&](const LinkStats& l) {
    inflight_bytes = l.inflight_bytes;
    queued = l.queued;
  });
  EXPECT_LE(inflight_bytes, 3u << 20);
  EXPECT_EQ(queued, 5u);
  gated.Open();
  mover.Drain();
  EXPECT_EQ(c.done.size(), 6u);
}

TEST_F(MoverTest, CancelRemovesQueuedOperationsOnly) {
  GatedTier gated(hbm_.get());
  Mover mover({});
  Completions c;
  MoveRequest first = Request(&gated, 4096, 1);
  first.done = c.For(1);
  std::uint64_t running = mover.Submit(std::move(first));
  while (gated.waiting() == 0) std::this_thread::yield();
  MoveRequest second = Request(&gated, 4096, 2);
  second.done = c.For(2);
  std::uint64_t queued = mover.Submit(std::move(second));
  EXPECT_FALSE(mover.Cancel(running));  // already copying: it finishes and reports
  EXPECT_TRUE(mover.Cancel(queued));
  EXPECT_FALSE(mover.Cancel(queued));
  gated.Open();
  mover.Drain();
  ASSERT_EQ(c.done.size(), 1u);  // a cancelled operation's callback never runs
  EXPECT_EQ(c.done[0].first, 1u);
  std::uint64_t cancelled = 0;
  mover.VisitLinks([&](const LinkStats& l) { cancelled += l.cancelled; });
  EXPECT_EQ(cancelled, 1u);
}

TEST_F(MoverTest, DeadlinesUseTheClockSeam) {
  ManualClock clock;
  GatedTier gated(hbm_.get());
  Mover mover({}, &clock);
  Completions c;
  MoveRequest r = Request(&gated, 4096, 1);
  r.deadline_us = clock.NowMicros() + 100;
  r.priority = MovePriority::kPlanned;
  r.done = c.For(1);
  mover.Submit(std::move(r));
  while (gated.waiting() == 0) std::this_thread::yield();
  clock.Advance(250);  // the copy "takes" 250 us: no sleeping
  gated.Open();
  mover.Drain();
  ASSERT_EQ(c.done.size(), 1u);
  EXPECT_TRUE(c.done[0].second.missed_deadline);
  EXPECT_EQ(c.done[0].second.finished_us - c.done[0].second.queued_us, 250u);
  std::uint64_t misses = 0;
  mover.VisitLinks([&](const LinkStats& l) { misses += l.deadline_misses; });
  EXPECT_EQ(misses, 1u);
}

TEST_F(MoverTest, StopEndsQueuedOperations) {
  GatedTier gated(hbm_.get());
  auto mover = std::make_unique<Mover>(MoverConfig{});
  Completions c;
  for (std::uint64_t i = 1; i <= 3; ++i) {
    MoveRequest r = Request(&gated, 4096, i);
    r.done = c.For(i);
    mover->Submit(std::move(r));
  }
  while (gated.waiting() == 0) std::this_thread::yield();
  std::thread opener([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    gated.Open();
  });
  mover->Stop();
  opener.join();
  ASSERT_EQ(c.done.size(), 3u);
  int unavailable = 0;
  for (auto& [tag, r] : c.done) unavailable += r.status.code() == StatusCode::kUnavailable;
  EXPECT_EQ(unavailable, 2);
  // After Stop a submission ends at once, on the caller's thread.
  MoveRequest late = Request(&gated, 4096, 9);
  late.done = c.For(9);
  mover->Submit(std::move(late));
  EXPECT_EQ(c.done.size(), 4u);
}

// dram -> nvme -> dram through the mover under injected faults: every operation that reports OK
// delivered exactly the bytes; every other one reports an error.
TEST_F(MoverTest, FaultInjectingBackendUnderMoves) {
  NvmeTierConfig nc;
  nc.backend = "memory";
  nc.capacity = 32 << 20;
  nc.io_size = 64 << 10;
  nc.degrade_after_errors = 1000;
  auto faults = std::make_unique<FaultInjectingIoBackend>(
      std::make_unique<MemoryIoBackend>(IoBackendConfig{.block_size = 4096, .queue_depth = 8},
                                        std::vector<std::uint64_t>{32 << 20}),
      7);
  for (FaultKind k : {FaultKind::kEio, FaultKind::kShortRead, FaultKind::kShortWrite,
                      FaultKind::kFlipBitRead, FaultKind::kFlipBitWrite}) {
    faults->AddRule({.kind = k, .one_in = 60});
  }
  auto n = NvmeTier::Create(nc, std::move(faults));
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  NvmeTier& nvme = **n;
  Mover mover({});
  int good_round_trips = 0, errors = 0, wrong = 0;
  std::mt19937_64 rng(11);
  for (std::uint64_t i = 1; i <= 60; ++i) {
    const std::uint64_t size = 4096 + rng() % (256 << 10);
    MoveRequest out = Request(&nvme, size, i);
    const Extent src = out.src, record = out.dst;
    const RecordInfo info = out.info;
    Completions c;
    out.done = c.For(1);
    mover.Submit(std::move(out));
    mover.Drain();
    if (!c.done[0].second.status.ok()) {
      ++errors;
    } else {
      auto back = dram_->Allocate(size, {});
      ASSERT_TRUE(back.ok());
      MoveRequest in;
      in.from = &nvme;
      in.src = record;
      in.to = dram_.get();
      in.dst = *back;
      in.info = info;
      in.done = c.For(2);
      mover.Submit(std::move(in));
      mover.Drain();
      if (c.done[1].second.status.ok()) {
        ++good_round_trips;
        if (std::memcmp(dram_->HostAddress(*back), dram_->HostAddress(src), size) != 0) ++wrong;
      } else {
        ++errors;
      }
      ASSERT_TRUE(dram_->Free(*back).ok());
    }
    ASSERT_TRUE(nvme.Free(record).ok());
    ASSERT_TRUE(dram_->Free(src).ok());
  }
  EXPECT_EQ(wrong, 0);
  EXPECT_GT(errors, 0);
  EXPECT_GT(good_round_trips, 10);
}

}  // namespace
}  // namespace tierpool
