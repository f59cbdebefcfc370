// The executor driving a real store through the binding: moves that need no transfer (an empty
// tensor's prefetch, an offload that finds a clean copy below) complete without calling back
// into the executor while it holds its lock (which deadlocked), and planned moves land.
#include "store/plan_binding.h"

#include <gtest/gtest.h>

#include <future>

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
  ASSERT_TRUE(
      store->PutCopy({.ns = "job", .key = "clean", .size = bytes.size()}, bytes.data(), 1).ok());
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

}  // namespace
}  // namespace tierpool
