#include "tiers/hbm_tier.h"

#include <gtest/gtest.h>

namespace tierpool {
namespace {

// A backend that records what the tier asks of it: the tier's accounting must not depend on
// which backend supplies the memory.
class FakeBackend final : public HbmBackend {
 public:
  std::string name() const override { return "fake"; }
  Status Init(std::uint64_t capacity) override {
    memory_.resize(capacity);
    return Status::Ok();
  }
  std::byte* host_base() const override { return const_cast<std::byte*>(memory_.data()); }
  int export_fd() const override { return -1; }
  int export_read_only_fd() const override { return -1; }
  std::unique_ptr<HbmBackend> Another() const override { return std::make_unique<FakeBackend>(); }
  bool pages_locked() const override { return false; }

 private:
  std::vector<std::byte> memory_;
};

TEST(HbmTier, HostPinnedBackendKeepsABudget) {
  auto tier = HbmTier::Create({.capacity = 4 << 20}, std::make_unique<HostPinnedHbmBackend>());
  ASSERT_TRUE(tier.ok()) << tier.status().ToString();
  Tier& t = **tier;
  EXPECT_EQ(t.kind(), TierKind::kHbm);
  EXPECT_EQ(t.Stats().backend, "host-pinned");
  auto a = t.Allocate(3 << 20, {});
  ASSERT_TRUE(a.ok());
  EXPECT_FALSE(t.Allocate(2 << 20, {}).ok());
  ASSERT_NE(t.HostAddress(*a), nullptr);
  ASSERT_EQ(t.Arenas().size(), 1u);
  EXPECT_GE(t.Arenas()[0].fd, 0);
  ASSERT_TRUE(t.Free(*a).ok());
  EXPECT_TRUE(t.Allocate(4 << 20, {}).ok());
}

TEST(HbmTier, PoolsGetRegionsOfTheirOwnFromTheSameKindOfBackend) {
  auto tier = HbmTier::Create({.capacity = 4 << 20, .pools = {1 << 20}, .first_pool_arena_id = 9},
                              std::make_unique<FakeBackend>());
  ASSERT_TRUE(tier.ok()) << tier.status().ToString();
  Tier& t = **tier;
  EXPECT_EQ(t.SpaceOf(1).capacity, 1u << 20);
  EXPECT_EQ(t.SpaceOf(kSharedPool).capacity, 3u << 20);
  auto a = t.Allocate(4096, {.pool = 1});
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->arena_id, 9u);
  EXPECT_EQ(t.Stats().backend, "fake");
  EXPECT_FALSE(
      HbmTier::Create({.capacity = 1 << 20, .pools = {2 << 20}}, std::make_unique<FakeBackend>())
          .ok());
}

TEST(HbmTier, AnyBackendGetsTheSameAccounting) {
  auto tier = HbmTier::Create({.capacity = 1 << 20}, std::make_unique<FakeBackend>());
  ASSERT_TRUE(tier.ok());
  auto a = (*tier)->Allocate(5000, {});
  ASSERT_TRUE(a.ok());
  EXPECT_EQ((*tier)->used_bytes(), 8192u);
  EXPECT_EQ((*tier)->Stats().backend, "fake");
}

TEST(HbmTier, ZeroCapacityIsOff) {
  auto tier = HbmTier::Create({.capacity = 0}, std::make_unique<HostPinnedHbmBackend>());
  ASSERT_TRUE(tier.ok());
  EXPECT_EQ((*tier)->capacity(), 0u);
  EXPECT_FALSE((*tier)->Allocate(1, {}).ok());
}

}  // namespace
}  // namespace tierpool
