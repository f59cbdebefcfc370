// Staged reservations (ObjectStore::Stage): room made before a put has a name, named by the
// commit that uses it.
#include <gtest/gtest.h>

#include <cstring>

#include "common/checksum.h"
#include "store/object_store.h"
#include "tiers/dram_tier.h"

namespace tierpool {
namespace {

constexpr std::uint64_t kOwner = 7;

class StagingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::vector<std::unique_ptr<Tier>> tiers;
    auto d = DramTier::Create({.capacity = 1 << 20, .populate = false});
    ASSERT_TRUE(d.ok());
    (*d)->set_watermarks({.high = 0.75, .low = 0.5});
    tiers.push_back(std::move(d).value());
    auto s = ObjectStore::Create({}, std::move(tiers));
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    store_ = std::move(s).value();
  }

  // Stages `size` bytes and fills them with `fill`; returns the reservation and its checksum.
  std::pair<Reservation, std::uint64_t> StageFilled(std::uint64_t size, char fill) {
    auto r = store_->Stage({.ns = "ns", .size = size}, kOwner);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    if (!r.ok()) return {};
    std::byte* p = store_->HostAddress(r->extent);
    std::memset(p, fill, size);
    return {*r, Xxh3(p, size)};
  }

  std::unique_ptr<ObjectStore> store_;
};

TEST_F(StagingTest, TheCommitNamesTheObjectAndGivesItsMetadata) {
  auto [r, sum] = StageFilled(64 << 10, 'x');
  EXPECT_EQ(store_->Stats().reservations_open, 1u);
  EXPECT_FALSE(store_->Holds(kOwner)) << "staged room must not keep an idle connection open";
  PutSpec name{.ns = "ns",
               .key = "kv/0",
               .size = 64 << 10,
               .dtype = "bfloat16",
               .shape = {32, 1024},
               .kind = ObjectKind::kKvBlock,
               .durability = Durability::kCache};
  ASSERT_TRUE(store_->Commit(r.id, sum, kOwner, &name).ok());
  auto meta = store_->Head("ns", "kv/0");
  ASSERT_TRUE(meta.ok()) << meta.status().ToString();
  EXPECT_EQ(meta->size, 64u << 10);
  EXPECT_EQ(meta->dtype, "bfloat16");
  EXPECT_EQ(meta->shape, (std::vector<std::int64_t>{32, 1024}));
  EXPECT_EQ(meta->kind, ObjectKind::kKvBlock);
  EXPECT_EQ(meta->durability, Durability::kCache);
  EXPECT_EQ(meta->checksum, sum);
  std::string out;
  ASSERT_TRUE(store_->ReadCopy("ns", "kv/0", &out).ok());
  EXPECT_EQ(out, std::string(64 << 10, 'x'));
  const StoreStats s = store_->Stats();
  EXPECT_EQ(s.reservations_staged, 1u);
  EXPECT_EQ(s.staged_commits, 1u);
  EXPECT_EQ(s.reservations_open, 0u);
}

TEST_F(StagingTest, ACommitThatDoesNotNameItOrNamesItWronglyFreesIt) {
  const std::uint64_t size = 64 << 10;
  auto [a, sum_a] = StageFilled(size, 'a');
  EXPECT_EQ(store_->Commit(a.id, sum_a, kOwner).code(), StatusCode::kInvalidArgument);
  PutSpec too_large{.ns = "ns", .key = "k", .size = size + 1};
  auto [b, sum_b] = StageFilled(size, 'b');
  EXPECT_EQ(store_->Commit(b.id, sum_b, kOwner, &too_large).code(), StatusCode::kInvalidArgument);
  PutSpec empty{.ns = "ns", .key = "k", .size = 0};
  auto [b2, sum_b2] = StageFilled(size, 'B');
  EXPECT_EQ(store_->Commit(b2.id, sum_b2, kOwner, &empty).code(), StatusCode::kInvalidArgument);
  PutSpec other_ns{.ns = "other", .key = "k", .size = size};
  auto [c, sum_c] = StageFilled(size, 'c');
  EXPECT_EQ(store_->Commit(c.id, sum_c, kOwner, &other_ns).code(), StatusCode::kInvalidArgument);
  PutSpec no_key{.ns = "ns", .size = size};
  auto [d, sum_d] = StageFilled(size, 'd');
  EXPECT_EQ(store_->Commit(d.id, sum_d, kOwner, &no_key).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(store_->Stats().reservations_open, 0u);
  EXPECT_EQ(store_->SpaceOf(TierKind::kDram, kSharedPool).used, 0u);
  EXPECT_EQ(store_->Head("ns", "k").status().code(), StatusCode::kNotFound);
  // A reservation made for a key keeps that key.
  auto named = store_->Reserve({.ns = "ns", .key = "mine", .size = 16}, kOwner);
  ASSERT_TRUE(named.ok());
  PutSpec rename{.ns = "ns", .key = "theirs", .size = 16};
  EXPECT_EQ(store_->Commit(named->id, 0, kOwner, &rename).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(store_->Stats().reservations_open, 0u);
  // Only its owner names it.
  auto [e, sum_e] = StageFilled(size, 'e');
  PutSpec ok{.ns = "ns", .key = "k", .size = size};
  EXPECT_EQ(store_->Commit(e.id, sum_e, kOwner + 1, &ok).code(), StatusCode::kPermissionDenied);
  EXPECT_TRUE(store_->Commit(e.id, sum_e, kOwner, &ok).ok());
}

// A put smaller than the room takes it; the room past its bytes goes back to the tier, and the
// connection's and namespace's counts are the put's.
TEST_F(StagingTest, ASmallerPutTakesTheRoomAndGivesTheRestBack) {
  const std::uint64_t staged = 256 << 10, size = (100 << 10) + 1;
  auto r = store_->Stage({.ns = "ns", .size = staged}, kOwner);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(store_->SpaceOf(TierKind::kDram, kSharedPool).used, staged);
  EXPECT_EQ(store_->UsageOf("ns").bytes, staged);
  std::byte* p = store_->HostAddress(r->extent);
  std::memset(p, 's', staged);  // the client may write past its bytes: they are not the object
  std::memset(p, 'x', size);
  PutSpec name{.ns = "ns", .key = "small", .size = size};
  ASSERT_TRUE(store_->Commit(r->id, Xxh3(p, size), kOwner, &name).ok());
  // The extent keeps the put's bytes rounded up to the tier's 4 KiB.
  EXPECT_EQ(store_->SpaceOf(TierKind::kDram, kSharedPool).used, 104u << 10);
  EXPECT_EQ(store_->UsageOf("ns").bytes, size);
  EXPECT_EQ(store_->UsageOf("ns").tier_bytes[static_cast<int>(TierKind::kDram)], 104u << 10);
  EXPECT_EQ(store_->Stats().reservations_open, 0u);
  auto meta = store_->Head("ns", "small");
  ASSERT_TRUE(meta.ok());
  EXPECT_EQ(meta->size, size);
  std::string out;
  ASSERT_TRUE(store_->ReadCopy("ns", "small", &out).ok());
  EXPECT_EQ(out, std::string(size, 'x'));
  // The room given back is free for others: all of what is left fits one put.
  const std::uint64_t rest = (1 << 20) - (104 << 10);
  auto again = store_->Reserve({.ns = "ns", .key = "rest", .size = rest}, kOwner);
  EXPECT_TRUE(again.ok()) << again.status().ToString();
  ASSERT_TRUE(store_->Abort(again->id, kOwner).ok());
  ASSERT_TRUE(store_->Delete("ns", "small").ok());
  EXPECT_EQ(store_->SpaceOf(TierKind::kDram, kSharedPool).used, 0u);
  EXPECT_EQ(store_->UsageOf("ns").bytes, 0u);
}

// With verify_commits the server hashes the bytes the commit names, not the whole room.
TEST(StagingVerified, ASmallerPutIsCheckedOverItsOwnBytes) {
  std::vector<std::unique_ptr<Tier>> tiers;
  auto d = DramTier::Create({.capacity = 1 << 20, .populate = false});
  ASSERT_TRUE(d.ok());
  tiers.push_back(std::move(d).value());
  auto s = ObjectStore::Create({.verify_commits = true}, std::move(tiers));
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  ObjectStore& store = **s;
  for (const bool right : {true, false}) {
    auto r = store.Stage({.ns = "ns", .size = 64 << 10}, kOwner);
    ASSERT_TRUE(r.ok());
    std::byte* p = store.HostAddress(r->extent);
    std::memset(p, 'v', 64 << 10);
    PutSpec name{.ns = "ns", .key = right ? "right" : "wrong", .size = 5000};
    const std::uint64_t sum = right ? Xxh3(p, 5000) : Xxh3(p, 64 << 10);
    EXPECT_EQ(store.Commit(r->id, sum, kOwner, &name).code(),
              right ? StatusCode::kOk : StatusCode::kDataLoss);
  }
  EXPECT_TRUE(store.Head("ns", "right").ok());
  EXPECT_EQ(store.Head("ns", "wrong").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(store.Stats().reservations_open, 0u);
}

TEST_F(StagingTest, TakesOnlyFreeRoomBelowTheHighWatermark) {
  EXPECT_EQ(store_->Stage({.ns = "ns", .key = "named", .size = 4096}, kOwner).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(store_->Stage({.ns = "ns", .size = 0}, kOwner).status().code(),
            StatusCode::kInvalidArgument);
  // 700 KiB of a cache object: staging 64 KiB more would pass the 768 KiB high watermark, and
  // staging never evicts (the cache object stays).
  std::string bytes(700 << 10, 'c');
  ASSERT_TRUE(
      store_
          ->PutCopy(
              {.ns = "ns", .key = "c", .size = bytes.size(), .durability = Durability::kCache},
              bytes.data(), kOwner + 1)
          .ok());
  auto r = store_->Stage({.ns = "ns", .size = 128 << 10}, kOwner);
  EXPECT_EQ(r.status().code(), StatusCode::kResourceExhausted) << r.status().ToString();
  EXPECT_TRUE(store_->Head("ns", "c").ok());
  EXPECT_EQ(store_->Stats().reservations_open, 0u);
  EXPECT_EQ(store_->SpaceOf(TierKind::kDram, kSharedPool).used, 700u << 10);
  // An ordinary put of that size still makes its room.
  ASSERT_TRUE(
      store_->PutCopy({.ns = "ns", .key = "p", .size = 128 << 10}, bytes.data(), kOwner).ok());
}

TEST_F(StagingTest, AFewSmallOnesPerConnection) {
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE(store_->Stage({.ns = "ns", .size = 4096}, kOwner).ok()) << i;
  }
  EXPECT_EQ(store_->Stage({.ns = "ns", .size = 4096}, kOwner).status().code(),
            StatusCode::kResourceExhausted);
  EXPECT_TRUE(store_->Stage({.ns = "ns", .size = 4096}, kOwner + 1).ok());  // per connection
  EXPECT_EQ(store_->Stage({.ns = "ns", .size = (16 << 20) + 1}, kOwner + 1).status().code(),
            StatusCode::kInvalidArgument);
}

TEST_F(StagingTest, FreedWithItsOwnerAndByAbort) {
  auto [a, sum_a] = StageFilled(4096, 'a');
  auto [b, sum_b] = StageFilled(4096, 'b');
  (void)sum_a;
  (void)sum_b;
  EXPECT_EQ(store_->Stats().reservations_open, 2u);
  ASSERT_TRUE(store_->Abort(a.id, kOwner).ok());
  EXPECT_EQ(store_->Stats().reservations_open, 1u);
  store_->ReleaseOwner(kOwner);
  EXPECT_EQ(store_->Stats().reservations_open, 0u);
  EXPECT_EQ(store_->SpaceOf(TierKind::kDram, kSharedPool).used, 0u);
  // A reservation made for a key still keeps its connection from timing out.
  auto named = store_->Reserve({.ns = "ns", .key = "k", .size = 16}, kOwner);
  ASSERT_TRUE(named.ok());
  auto [c, sum_c] = StageFilled(4096, 'c');
  (void)c;
  (void)sum_c;
  EXPECT_TRUE(store_->Holds(kOwner));
}

}  // namespace
}  // namespace tierpool
