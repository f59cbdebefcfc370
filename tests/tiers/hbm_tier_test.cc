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
  auto a = t.Allocate(3 << 20, -1);
  ASSERT_TRUE(a.ok());
  EXPECT_FALSE(t.Allocate(2 << 20, -1).ok());
  ASSERT_NE(t.HostAddress(*a), nullptr);
  ASSERT_EQ(t.Arenas().size(), 1u);
  EXPECT_GE(t.Arenas()[0].fd, 0);
  ASSERT_TRUE(t.Free(*a).ok());
  EXPECT_TRUE(t.Allocate(4 << 20, -1).ok());
}

TEST(HbmTier, AnyBackendGetsTheSameAccounting) {
  auto tier = HbmTier::Create({.capacity = 1 << 20}, std::make_unique<FakeBackend>());
  ASSERT_TRUE(tier.ok());
  auto a = (*tier)->Allocate(5000, -1);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ((*tier)->used_bytes(), 8192u);
  EXPECT_EQ((*tier)->Stats().backend, "fake");
}

TEST(HbmTier, ZeroCapacityIsOff) {
  auto tier = HbmTier::Create({.capacity = 0}, std::make_unique<HostPinnedHbmBackend>());
  ASSERT_TRUE(tier.ok());
  EXPECT_EQ((*tier)->capacity(), 0u);
  EXPECT_FALSE((*tier)->Allocate(1, -1).ok());
}

}  // namespace
}  // namespace tierpool
