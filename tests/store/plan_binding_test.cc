// The executor driving a real store through the binding: moves that need no transfer (an empty
// tensor's prefetch, an offload that finds a clean copy below) complete without calling back
// into the executor while it holds its lock (which deadlocked), and planned moves land. A plan's
// FREE that meets a reader's pin (the step that last used the tensor, its release on another
// connection still on the way) frees the copy when the reader lets go.
#include "store/plan_binding.h"

#include <gtest/gtest.h>

#include <cstring>
#include <future>
#include <optional>

#include "proto/tierpool.pb.h"
#include "tiers/dram_tier.h"
#include "tiers/hbm_tier.h"

namespace tierpool {
namespace {

std::unique_ptr<ObjectStore> MakeStore() {
  std::vector<std::unique_ptr<Tier>> tiers;
  auto d = DramTier::Create({.capacity = 16 << 20, .populate = false});
  EXPECT_TRUE(d.ok());
  tiers.push_back(std::move(d).value());
  auto h = HbmTier::Create({.capacity = 8 << 20}, std::make_unique<HostPinnedHbmBackend>());
  EXPECT_TRUE(h.ok());
  tiers.push_back(std::move(h).value());
  auto s = ObjectStore::Create({}, std::move(tiers));
  EXPECT_TRUE(s.ok());
  return std::move(s).value();
}

// A put into the job's namespace (dram unless `tier` says hbm).
Status PutJob(ObjectStore& store, const std::string& key, const std::string& bytes,
              std::optional<TierKind> tier = std::nullopt) {
  return store.PutCopy({.ns = "job", .key = key, .size = bytes.size(), .tier_hint = tier},
                       bytes.data(), 1);
}

prefetch::JobSpec Spec() {
  prefetch::JobSpec spec;
  spec.ns = "job";
  spec.schedule.set_format_version(1);
  spec.schedule.set_name("two");
  for (int i = 0; i < 3; ++i) {
    auto* st = spec.schedule.add_steps();
    st->set_name("s" + std::to_string(i));
    st->set_compute_us(100);
  }
  const char* names[] = {"empty", "clean"};
  for (int t = 0; t < 2; ++t) {
    auto* x = spec.schedule.add_tensors();
    x->set_id(static_cast<std::uint32_t>(t));
    x->set_name(names[t]);
    x->set_size_bytes(t == 0 ? 0 : 1 << 20);
    x->set_def_step(-1);
    x->add_use_steps(2);
  }
  auto* pre = spec.plan.add_actions();
  pre->set_kind(schedule::PREFETCH);
  pre->set_tensor(0);
  pre->set_step(0);
  pre->set_needed_by(2);
  auto* off = spec.plan.add_actions();
  off->set_kind(schedule::OFFLOAD);
  off->set_tensor(1);
  off->set_step(1);
  spec.hbm_budget = 4 << 20;
  return spec;
}

TEST(PlanBinding, MovesWithoutTransferDoNotCallBackIntoTheExecutor) {
  auto store = MakeStore();
  ASSERT_TRUE(store->PutCopy({.ns = "job", .key = "empty", .size = 0}, "", 1).ok());
  std::string bytes(1 << 20, 'x');
  ASSERT_TRUE(PutJob(*store, "clean", bytes).ok());
  ASSERT_TRUE(store->Promote("job", "clean", TierKind::kHbm).ok());  // dram copy stays: clean
  StoreTierControl control(store.get());
  prefetch::Executor exec(&control, 8 << 20);
  auto id = exec.Register(Spec(), 1);
  ASSERT_TRUE(id.ok()) << id.status().ToString();
  // Run on another thread so that a deadlock fails the test instead of hanging it.
  auto run = std::async(std::launch::async, [&] {
    EXPECT_TRUE(exec.Progress(*id, 1, 0, 0).ok());
    EXPECT_TRUE(exec.Progress(*id, 1, 0, 1).ok());
  });
  ASSERT_EQ(run.wait_for(std::chrono::seconds(10)), std::future_status::ready)
      << "the executor deadlocked on a move that completed at once";
  EXPECT_EQ(store->Head("job", "empty")->tier, TierKind::kHbm);
  EXPECT_EQ(store->Head("job", "clean")->tier, TierKind::kDram);
  auto jobs = exec.Jobs();
  ASSERT_EQ(jobs.size(), 1u);
  EXPECT_EQ(jobs[0].counters.issued, 2u);
  EXPECT_EQ(jobs[0].counters.failed, 0u);
}

std::uint64_t Counter(ObjectStore& store, std::uint64_t StoreStats::*field) {
  return store.Stats().*field;
}

// Before: DropHbmCopy refused a pinned copy (FAILED_PRECONDITION) and the executor's FREE was
// lost, so the job's next put found its budget full and went to dram (a live ResNet-18 replay
// stalled 2.5 s on reading it back, one run in four).
TEST(PlanBinding, AFreeThatMeetsAReadersPinFreesTheCopyWhenItIsReleased) {
  auto store = MakeStore();
  std::string bytes(2 << 20, 'x');
  ASSERT_TRUE(PutJob(*store, "in", bytes).ok());
  ASSERT_TRUE(store->Promote("job", "in", TierKind::kHbm).ok());  // its dram copy stays
  store->SetPlanned("job", 3 << 20);
  auto pin = store->Pin("job", "in", 2, {.want = TierKind::kHbm});
  ASSERT_TRUE(pin.ok()) << pin.status().ToString();
  ASSERT_EQ(pin->meta.tier, TierKind::kHbm);

  ASSERT_TRUE(store->DropHbmCopy("job", "in").ok());
  EXPECT_EQ(store->CopiesOf("job", "in")->front(), TierKind::kHbm);  // its reader's bytes stay
  EXPECT_TRUE(store->PlacementOf("job", "in").leaving_hbm);
  ASSERT_TRUE(store->Release(pin->lease_id, 2).ok());
  EXPECT_EQ(store->CopiesOf("job", "in")->front(), TierKind::kDram);
  EXPECT_EQ(Counter(*store, &StoreStats::drops_after_unpin), 1u);
  EXPECT_EQ(store->HbmBytesOf("job"), 0u);

  // The room is the next put's, within the budget.
  std::string out(2 << 20, 'y');
  ASSERT_TRUE(PutJob(*store, "out", out, TierKind::kHbm).ok());
  EXPECT_EQ(store->Head("job", "out")->tier, TierKind::kHbm);
}

TEST(PlanBinding, APendingFreeWaitsForTheReleaseBeforeAPutDecidesItsTier) {
  auto store = MakeStore();
  std::string bytes(2 << 20, 'x');
  ASSERT_TRUE(PutJob(*store, "in", bytes).ok());
  ASSERT_TRUE(store->Promote("job", "in", TierKind::kHbm).ok());
  store->SetPlanned("job", 3 << 20);
  auto pin = store->Pin("job", "in", 2, {.want = TierKind::kHbm});
  ASSERT_TRUE(pin.ok());
  ASSERT_TRUE(store->DropHbmCopy("job", "in").ok());
  // The put would pass the budget with the pinned copy counted: it waits for the copy leaving
  // (as for a copy-out in flight) instead of going to dram at once.
  std::string out(2 << 20, 'y');
  auto put =
      std::async(std::launch::async, [&] { return PutJob(*store, "out", out, TierKind::kHbm); });
  EXPECT_EQ(put.wait_for(std::chrono::milliseconds(50)), std::future_status::timeout);
  ASSERT_TRUE(store->Release(pin->lease_id, 2).ok());
  ASSERT_EQ(put.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  ASSERT_TRUE(put.get().ok());
  EXPECT_EQ(store->Head("job", "out")->tier, TierKind::kHbm);
}

TEST(PlanBinding, ADeletedObjectAReaderStillHoldsIsRoomAPutWaitsFor) {
  // A job replaces a tensor in two phases: it reads the old copy, deletes it and reserves the
  // new one. The reader's release travels on another connection and may come after the
  // reserve: the reserve waits for it rather than going to dram.
  auto store = MakeStore();
  std::string bytes(2 << 20, 'x');
  ASSERT_TRUE(PutJob(*store, "w", bytes, TierKind::kHbm).ok());
  store->SetPlanned("job", 3 << 20);
  auto pin = store->Pin("job", "w", 2, {.want = TierKind::kHbm});
  ASSERT_TRUE(pin.ok());
  ASSERT_TRUE(store->Delete("job", "w").ok());
  std::string fresh(2 << 20, 'y');
  auto put =
      std::async(std::launch::async, [&] { return PutJob(*store, "w", fresh, TierKind::kHbm); });
  EXPECT_EQ(put.wait_for(std::chrono::milliseconds(50)), std::future_status::timeout);
  ASSERT_TRUE(store->Release(pin->lease_id, 2).ok());
  ASSERT_EQ(put.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  ASSERT_TRUE(put.get().ok());
  EXPECT_EQ(store->Head("job", "w")->tier, TierKind::kHbm);
  EXPECT_EQ(store->HbmBytesOf("job"), 2u << 20);
}

TEST(PlanBinding, APlanWithAnOwnedPrefixTakesItsObjectsWhenItGoes) {
  auto store = MakeStore();
  PlanRegistry registry(store.get(), 8 << 20);
  const prefetch::JobSpec spec = Spec();
  wire::RegisterPlanRequest req;
  req.set_format_version(1);
  req.set_ns("job");
  req.set_schedule(spec.schedule.SerializeAsString());
  req.set_plan(spec.plan.SerializeAsString());
  req.set_hbm_budget_bytes(4 << 20);
  req.set_owned_prefix("mine/");
  std::string bytes(4096, 'x');
  for (const char* key : {"mine/a", "mine/b/c", "minefield", "other"}) {
    ASSERT_TRUE(PutJob(*store, key, bytes).ok());
  }
  ASSERT_TRUE(store->PutCopy({.ns = "elsewhere", .key = "mine/a", .size = 1}, "z", 1).ok());
  auto pinned = store->Pin("job", "mine/b/c", 3);  // another connection still reads one
  ASSERT_TRUE(pinned.ok());

  // Its connection closes (the job died): what it owned goes, nothing else.
  auto job = registry.Register(req, /*session=*/7);
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  registry.OnDisconnect(7);
  EXPECT_FALSE(store->Head("job", "mine/a").ok());
  EXPECT_FALSE(store->Head("job", "mine/b/c").ok());  // unnamed now; freed as its reader goes
  EXPECT_TRUE(store->Head("job", "minefield").ok());
  EXPECT_TRUE(store->Head("job", "other").ok());
  EXPECT_TRUE(store->Head("elsewhere", "mine/a").ok());
  ASSERT_TRUE(store->Release(pinned->lease_id, 3).ok());

  // Unregistered: the same; without a prefix nothing goes.
  ASSERT_TRUE(PutJob(*store, "mine/a", bytes).ok());
  job = registry.Register(req, 8);
  ASSERT_TRUE(job.ok());
  ASSERT_TRUE(registry.Unregister(*job, 8).ok());
  EXPECT_FALSE(store->Head("job", "mine/a").ok());
  ASSERT_TRUE(PutJob(*store, "mine/a", bytes).ok());
  req.clear_owned_prefix();
  job = registry.Register(req, 9);
  ASSERT_TRUE(job.ok());
  registry.OnDisconnect(9);
  EXPECT_TRUE(store->Head("job", "mine/a").ok());
  EXPECT_EQ(store->Stats().objects, 4u);

  // A prefix past the key limit is refused.
  req.set_owned_prefix(std::string(2000, 'k'));
  EXPECT_EQ(registry.Register(req, 10).status().code(), StatusCode::kInvalidArgument);
}

TEST(PlanBinding, APendingFreeIsCancelledByANewReaderOrAPrefetch) {
  auto store = MakeStore();
  std::string bytes(1 << 20, 'x');
  for (const char* key : {"a", "b"}) {
    ASSERT_TRUE(PutJob(*store, key, bytes).ok());
    ASSERT_TRUE(store->Promote("job", key, TierKind::kHbm).ok());
  }
  store->SetPlanned("job", 4 << 20);
  // a: read again before the first reader lets go.
  auto first = store->Pin("job", "a", 2, {.want = TierKind::kHbm});
  ASSERT_TRUE(first.ok());
  ASSERT_TRUE(store->DropHbmCopy("job", "a").ok());
  auto second = store->Pin("job", "a", 2, {.want = TierKind::kHbm});
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(second->meta.tier, TierKind::kHbm);
  ASSERT_TRUE(store->Release(first->lease_id, 2).ok());
  ASSERT_TRUE(store->Release(second->lease_id, 2).ok());
  EXPECT_EQ(store->CopiesOf("job", "a")->front(), TierKind::kHbm);
  // b: prefetched again (the plan wants it back) before its reader lets go.
  auto pin = store->Pin("job", "b", 2, {.want = TierKind::kHbm});
  ASSERT_TRUE(pin.ok());
  ASSERT_TRUE(store->DropHbmCopy("job", "b").ok());
  EXPECT_EQ(store->StartPrefetch("job", "b", 0, nullptr).code(), StatusCode::kAlreadyExists);
  ASSERT_TRUE(store->Release(pin->lease_id, 2).ok());
  EXPECT_EQ(store->CopiesOf("job", "b")->front(), TierKind::kHbm);
  EXPECT_EQ(Counter(*store, &StoreStats::drops_cancelled), 2u);
  EXPECT_EQ(Counter(*store, &StoreStats::drops_after_unpin), 0u);
  EXPECT_EQ(store->HbmBytesOf("job"), 2u << 20);
}

// A prefetch into hbm whose free bytes are scattered: the policy may not move a plan's copies
// out, so before this the prefetch failed (RESOURCE_EXHAUSTED) and the tensor's use missed; now
// copies are moved aside inside hbm to open a window for it.
TEST(PlanBinding, APrefetchIntoScatteredRoomMovesCopiesAsideInHbm) {
  auto store = MakeStore();  // hbm 8 MiB
  store->SetPlanned("job", 8 << 20);
  std::string one(1 << 20, 'a');
  for (int i = 0; i < 8; ++i) {
    one[0] = static_cast<char>('a' + i);
    ASSERT_TRUE(PutJob(*store, "k" + std::to_string(i), one, TierKind::kHbm).ok());
  }
  for (int i = 0; i < 8; i += 2) ASSERT_TRUE(store->Delete("job", "k" + std::to_string(i)).ok());
  std::string big(3 << 20, 'b');
  ASSERT_TRUE(PutJob(*store, "big", big).ok());
  std::promise<Status> landed;
  Status started = store->StartPrefetch("job", "big", 0, [&](Status s) { landed.set_value(s); });
  ASSERT_TRUE(started.ok()) << started.ToString();
  auto done = landed.get_future();
  ASSERT_EQ(done.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  ASSERT_TRUE(done.get().ok());
  EXPECT_EQ(store->CopiesOf("job", "big")->front(), TierKind::kHbm);
  EXPECT_EQ(Counter(*store, &StoreStats::relocations), 1u);  // hole, copy, hole: one moves
  for (int i = 1; i < 8; i += 2) {
    std::string out;
    ASSERT_TRUE(store->ReadCopy("job", "k" + std::to_string(i), &out).ok());
    EXPECT_EQ(out[0], static_cast<char>('a' + i));
    EXPECT_EQ(store->CopiesOf("job", "k" + std::to_string(i))->front(), TierKind::kHbm);
  }
}

// Before: an OFFLOAD of a copy a reader held was refused, and the tensor stayed in hbm.
TEST(PlanBinding, AnOffloadOfAPinnedOnlyCopyCopiesItDownAndFreesItOnRelease) {
  auto store = MakeStore();
  std::string bytes(1 << 20, 'z');
  ASSERT_TRUE(PutJob(*store, "act", bytes, TierKind::kHbm).ok());
  ASSERT_EQ(store->CopiesOf("job", "act")->size(), 1u);
  auto pin = store->Pin("job", "act", 2, {.want = TierKind::kHbm});
  ASSERT_TRUE(pin.ok());
  std::promise<Status> landed;
  ASSERT_TRUE(store->StartOffload("job", "act", [&](Status s) { landed.set_value(s); }).ok());
  auto done = landed.get_future();
  ASSERT_EQ(done.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  ASSERT_TRUE(done.get().ok());
  EXPECT_EQ(*store->CopiesOf("job", "act"),
            (std::vector<TierKind>{TierKind::kHbm, TierKind::kDram}));
  // The reader still reads the right bytes in hbm.
  EXPECT_EQ(std::memcmp(store->HostAddress(pin->extent), bytes.data(), bytes.size()), 0);
  ASSERT_TRUE(store->Release(pin->lease_id, 2).ok());
  EXPECT_EQ(*store->CopiesOf("job", "act"), (std::vector<TierKind>{TierKind::kDram}));
  EXPECT_EQ(Counter(*store, &StoreStats::drops_after_unpin), 1u);
}

}  // namespace
}  // namespace tierpool
