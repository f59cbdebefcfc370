#include "store/object_store.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <span>
#include <thread>

#include "common/checksum.h"
#include "tiers/dram_tier.h"
#include "tiers/hbm_tier.h"

namespace tierpool {
namespace {

constexpr std::uint64_t kOwner = 42;
constexpr std::uint64_t kPutter = 99;  // Put()'s connection, apart from the ones under test

class ObjectStoreTest : public ::testing::Test {
 protected:
  void Make(std::uint64_t dram, std::uint64_t hbm, StoreConfig config = {}) {
    std::vector<std::unique_ptr<Tier>> tiers;
    auto d = DramTier::Create({.capacity = dram, .populate = false});
    ASSERT_TRUE(d.ok());
    tiers.push_back(std::move(d).value());
    if (hbm > 0) {
      auto h = HbmTier::Create({.capacity = hbm}, std::make_unique<HostPinnedHbmBackend>());
      ASSERT_TRUE(h.ok());
      (*h)->set_watermarks({.high = 0.5, .low = 0.25});
      tiers.push_back(std::move(h).value());
    }
    auto s = ObjectStore::Create(config, std::move(tiers));
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    store_ = std::move(s).value();
  }

  Status Put(const std::string& key, std::uint64_t size, Durability d = Durability::kRetained,
             std::optional<TierKind> tier = std::nullopt) {
    std::string bytes(size, static_cast<char>(key.size() + size));
    PutSpec spec{.ns = "ns", .key = key, .size = size, .durability = d, .tier_hint = tier};
    return store_->PutCopy(spec, bytes.data(), kPutter);
  }

  std::uint64_t Counter(std::uint64_t StoreStats::*field) { return store_->Stats().*field; }
  TierUsage Usage(TierKind k) {
    for (auto& t : store_->Stats().tiers) {
      if (t.tier.kind == k) return t;
    }
    return {};
  }

  std::unique_ptr<ObjectStore> store_;
};

TEST_F(ObjectStoreTest, TwoPhasePutThenReadBack) {
  Make(8 << 20, 0);
  PutSpec spec{.ns = "ns", .key = "k", .size = 5000, .dtype = "float32", .shape = {10, 125}};
  auto r = store_->Reserve(spec, kOwner);
  ASSERT_TRUE(r.ok());
  std::byte* p = store_->HostAddress(r->extent);
  ASSERT_NE(p, nullptr);
  std::memset(p, 7, 5000);
  // Not visible before commit.
  EXPECT_EQ(store_->Head("ns", "k").status().code(), StatusCode::kNotFound);
  ASSERT_TRUE(store_->Commit(r->id, Xxh3(p, 5000), kOwner).ok());
  auto meta = store_->Head("ns", "k");
  ASSERT_TRUE(meta.ok());
  EXPECT_EQ(meta->size, 5000u);
  EXPECT_EQ(meta->dtype, "float32");
  EXPECT_EQ(meta->shape, (std::vector<std::int64_t>{10, 125}));
  std::string out;
  ASSERT_TRUE(store_->ReadCopy("ns", "k", &out).ok());
  EXPECT_EQ(out, std::string(5000, '\7'));
  EXPECT_EQ(Xxh3(out.data(), out.size()), meta->checksum);
  // A second commit of the same reservation is refused.
  EXPECT_EQ(store_->Commit(r->id, 0, kOwner).code(), StatusCode::kNotFound);
}

TEST_F(ObjectStoreTest, OnlyTheOwnerCommits) {
  Make(8 << 20, 0);
  auto r = store_->Reserve({.ns = "ns", .key = "k", .size = 10}, kOwner);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(store_->Commit(r->id, 0, kOwner + 1).code(), StatusCode::kPermissionDenied);
}

TEST_F(ObjectStoreTest, RejectsBadNames) {
  Make(8 << 20, 0);
  EXPECT_EQ(Put("", 1).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(Put(std::string(5000, 'k'), 1).code(), StatusCode::kInvalidArgument);
  PutSpec spec{.ns = "ns", .key = "k", .size = 1, .shape = std::vector<std::int64_t>(40, 1)};
  EXPECT_EQ(store_->Reserve(spec, kOwner).status().code(), StatusCode::kInvalidArgument);
}

TEST_F(ObjectStoreTest, RetainedNeverEvictedPutFailsClearly) {
  Make(1 << 20, 0);
  ASSERT_TRUE(Put("a", 600 << 10).ok());
  Status s = Put("b", 600 << 10);
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted);
  EXPECT_NE(s.message().find("retained"), std::string::npos) << s.message();
  EXPECT_TRUE(store_->Head("ns", "a").ok());
  EXPECT_EQ(Counter(&StoreStats::resource_exhausted), 1u);
}

TEST_F(ObjectStoreTest, CacheObjectsEvictedLeastRecentlyUsedFirst) {
  Make(1 << 20, 0);
  ASSERT_TRUE(Put("old", 300 << 10, Durability::kCache).ok());
  ASSERT_TRUE(Put("mid", 300 << 10, Durability::kCache).ok());
  ASSERT_TRUE(Put("keep", 300 << 10, Durability::kRetained).ok());
  std::string out;
  ASSERT_TRUE(store_->ReadCopy("ns", "old", &out).ok());  // "old" is now more recent than "mid"
  ASSERT_TRUE(Put("new", 300 << 10, Durability::kCache).ok());
  EXPECT_TRUE(store_->Head("ns", "old").ok());
  EXPECT_FALSE(store_->Head("ns", "mid").ok());
  EXPECT_TRUE(store_->Head("ns", "keep").ok());
  EXPECT_EQ(Counter(&StoreStats::evictions), 1u);
}

TEST_F(ObjectStoreTest, PinnedCacheObjectsAreNotEvicted) {
  Make(1 << 20, 0);
  ASSERT_TRUE(Put("a", 600 << 10, Durability::kCache).ok());
  auto pin = store_->Pin("ns", "a", kOwner);
  ASSERT_TRUE(pin.ok());
  EXPECT_EQ(Put("b", 600 << 10).code(), StatusCode::kResourceExhausted);
  ASSERT_TRUE(store_->Release(pin->lease_id, kOwner).ok());
  EXPECT_TRUE(Put("b", 600 << 10).ok());
}

TEST_F(ObjectStoreTest, DeleteWhilePinnedFreesAfterRelease) {
  Make(1 << 20, 0);
  ASSERT_TRUE(Put("a", 512 << 10).ok());
  auto pin = store_->Pin("ns", "a", kOwner);
  ASSERT_TRUE(pin.ok());
  std::byte* p = store_->HostAddress(pin->extent);
  ASSERT_TRUE(store_->Delete("ns", "a").ok());
  EXPECT_FALSE(store_->Head("ns", "a").ok());
  // The reader's bytes stay put: no new object may take the extent while it is pinned.
  EXPECT_EQ(Put("b", 600 << 10).code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(static_cast<unsigned char>(p[0]), static_cast<unsigned char>(1 + (512 << 10)));
  ASSERT_TRUE(store_->Release(pin->lease_id, kOwner).ok());
  EXPECT_TRUE(Put("b", 600 << 10).ok());
}

TEST_F(ObjectStoreTest, ReleaseAllLetsGoOfABatchAndFreesWhatWasDeletedMeanwhile) {
  Make(1 << 20, 0);
  ASSERT_TRUE(Put("a", 300 << 10).ok());
  ASSERT_TRUE(Put("b", 300 << 10).ok());
  auto pa = store_->Pin("ns", "a", kOwner);
  auto pb = store_->Pin("ns", "b", kOwner);
  auto pb2 = store_->Pin("ns", "b", kOwner);
  auto theirs = store_->Pin("ns", "a", kOwner + 1);
  ASSERT_TRUE(pa.ok() && pb.ok() && pb2.ok() && theirs.ok());
  ASSERT_TRUE(store_->Delete("ns", "a").ok());
  ASSERT_TRUE(store_->Delete("ns", "b").ok());
  // Another connection's lease is refused and stays; the rest are released, b's two pins both.
  const std::uint64_t ids[] = {pa->lease_id, theirs->lease_id, pb->lease_id, pb2->lease_id};
  Status s = store_->ReleaseAll(ids, kOwner);
  EXPECT_EQ(s.code(), StatusCode::kPermissionDenied) << s.ToString();
  EXPECT_NE(s.message().find("1 of 4"), std::string::npos) << s.ToString();
  EXPECT_FALSE(store_->Holds(kOwner));
  EXPECT_TRUE(store_->Holds(kOwner + 1));
  // b had no other reader: its bytes are free. a's stay while the other connection reads them.
  EXPECT_EQ(Usage(TierKind::kDram).tier.used_bytes, 300u << 10);
  ASSERT_TRUE(store_->ReleaseAll(std::span(&theirs->lease_id, 1), kOwner + 1).ok());
  EXPECT_EQ(Usage(TierKind::kDram).tier.used_bytes, 0u);
  EXPECT_EQ(store_->ReleaseAll(std::span(&pa->lease_id, 1), kOwner).code(), StatusCode::kNotFound);
}

// A get batch's pins made at once: each object the shared path can read as it is, pinned with a
// lease of its own; a missing name answered NotFound; an invalid name, and every name of a
// batch that would pass the connection's pin limit, left for Pin to answer.
TEST_F(ObjectStoreTest, PinAllSharedPinsWhatTheSharedPathTakesAndLeavesTheRestToPin) {
  StoreConfig config;
  config.max_leases_per_client = 4;
  Make(1 << 20, 0, config);
  ASSERT_TRUE(Put("a", 4096).ok());
  ASSERT_TRUE(Put("b", 8192).ok());
  const ObjectIndex::NameView names[] = {{"ns", "a"}, {"ns", "missing"}, {"ns", ""}, {"ns", "b"}};
  std::vector<std::optional<Result<PinnedObject>>> out;
  const std::uint64_t gets = Counter(&StoreStats::gets);
  store_->PinAllShared(names, kOwner, {}, &out);
  ASSERT_EQ(out.size(), 4u);
  ASSERT_TRUE(out[0] && out[0]->ok());
  EXPECT_EQ((*out[0])->meta.size, 4096u);
  ASSERT_TRUE(out[1]);
  EXPECT_EQ(out[1]->status().code(), StatusCode::kNotFound);
  EXPECT_FALSE(out[2]) << "an invalid name is Pin's to refuse";
  ASSERT_TRUE(out[3] && out[3]->ok());
  EXPECT_EQ((*out[3])->meta.size, 8192u);
  EXPECT_NE((*out[0])->lease_id, (*out[3])->lease_id);
  EXPECT_EQ(Counter(&StoreStats::leases_open), 2u);
  EXPECT_EQ(Counter(&StoreStats::gets), gets + 3);
  // Each lease is the connection's own.
  EXPECT_EQ(store_->Release((*out[0])->lease_id, kOwner + 1).code(), StatusCode::kPermissionDenied);
  // One more is within the limit of 4; two more after it would pass it: none pinned ahead, and
  // Pin counts them one by one.
  std::vector<std::optional<Result<PinnedObject>>> more;
  store_->PinAllShared(std::span(names).first(1), kOwner, {}, &more);
  ASSERT_TRUE(more[0] && more[0]->ok());
  store_->PinAllShared(std::span(names).first(2), kOwner, {}, &more);
  ASSERT_EQ(more.size(), 3u);
  EXPECT_FALSE(more[1] || more[2]) << "a batch past the limit was pinned ahead";
  auto fourth = store_->Pin("ns", "a", kOwner);
  ASSERT_TRUE(fourth.ok());
  EXPECT_EQ(store_->Pin("ns", "b", kOwner).status().code(), StatusCode::kResourceExhausted);
  const std::uint64_t leases[] = {(*out[0])->lease_id, (*out[3])->lease_id, (*more[0])->lease_id,
                                  fourth->lease_id};
  EXPECT_TRUE(store_->ReleaseAll(leases, kOwner).ok());
  EXPECT_FALSE(store_->Holds(kOwner));
}

TEST_F(ObjectStoreTest, OverwriteReplacesAndFreesTheOldBytes) {
  Make(1 << 20, 0);
  ASSERT_TRUE(Put("a", 600 << 10).ok());
  ASSERT_TRUE(store_->Delete("ns", "a").ok());
  ASSERT_TRUE(Put("a", 300 << 10).ok());
  ASSERT_TRUE(Put("a", 400 << 10).ok());
  EXPECT_EQ(store_->Head("ns", "a")->size, 400u << 10);
  EXPECT_EQ(Usage(TierKind::kDram).object_count, 1u);
  EXPECT_EQ(Usage(TierKind::kDram).tier.used_bytes, 400u << 10);
}

TEST_F(ObjectStoreTest, ZeroByteObjects) {
  Make(1 << 20, 0);
  ASSERT_TRUE(Put("empty", 0).ok());
  std::string out = "junk";
  auto meta = store_->ReadCopy("ns", "empty", &out);
  ASSERT_TRUE(meta.ok());
  EXPECT_EQ(meta->size, 0u);
  EXPECT_TRUE(out.empty());
  EXPECT_EQ(meta->checksum, Xxh3(nullptr, 0));
}

TEST_F(ObjectStoreTest, HbmAboveHighWatermarkDemotesLeastRecentlyUsed) {
  Make(8 << 20, 1 << 20);  // hbm watermarks: high 0.5, low 0.25
  ASSERT_TRUE(Put("h1", 200 << 10, Durability::kRetained, TierKind::kHbm).ok());
  ASSERT_TRUE(Put("h2", 200 << 10, Durability::kRetained, TierKind::kHbm).ok());
  ASSERT_TRUE(Put("h3", 200 << 10, Durability::kRetained, TierKind::kHbm).ok());
  EXPECT_EQ(store_->Head("ns", "h3")->tier, TierKind::kHbm);
  store_->RunMaintenance();
  store_->Quiesce();
  // 600K > 512K high: demote LRU until <= 256K low: h1 and h2 go, h3 stays.
  EXPECT_EQ(store_->Head("ns", "h1")->tier, TierKind::kDram);
  EXPECT_EQ(store_->Head("ns", "h2")->tier, TierKind::kDram);
  EXPECT_EQ(store_->Head("ns", "h3")->tier, TierKind::kHbm);
  EXPECT_EQ(Counter(&StoreStats::demotions), 2u);
  std::string out;
  ASSERT_TRUE(store_->ReadCopy("ns", "h1", &out).ok());
  EXPECT_EQ(out, std::string(200 << 10, static_cast<char>(2 + (200 << 10))));
}

TEST_F(ObjectStoreTest, PromoteMakesRoomInHbmByDemoting) {
  Make(8 << 20, 1 << 20);
  ASSERT_TRUE(Put("a", 600 << 10, Durability::kRetained, TierKind::kHbm).ok());
  ASSERT_TRUE(Put("b", 600 << 10).ok());
  ASSERT_TRUE(store_->Promote("ns", "b", TierKind::kHbm).ok());
  EXPECT_EQ(store_->Head("ns", "b")->tier, TierKind::kHbm);
  EXPECT_EQ(store_->Head("ns", "a")->tier, TierKind::kDram);
  EXPECT_EQ(Counter(&StoreStats::promotions), 1u);
  // b's dram copy survived the move up: dropping b from hbm later costs no transfer.
  EXPECT_EQ(Usage(TierKind::kDram).object_count, 2u);
  // A pinned copy never moves (its reader holds its address): promoting a pinned object makes
  // a new copy above, and the room comes from dropping b's clean hbm copy, not from a copy-out.
  auto pin = store_->Pin("ns", "a", kOwner);
  ASSERT_TRUE(pin.ok());
  std::byte* before = store_->HostAddress(pin->extent);
  const auto demotions = Counter(&StoreStats::demotions);
  ASSERT_TRUE(store_->Promote("ns", "a", TierKind::kHbm).ok());
  EXPECT_EQ(store_->Head("ns", "a")->tier, TierKind::kHbm);
  EXPECT_EQ(store_->Head("ns", "b")->tier, TierKind::kDram);
  EXPECT_EQ(Counter(&StoreStats::clean_drops), 1u);
  EXPECT_EQ(Counter(&StoreStats::demotions), demotions);
  EXPECT_EQ(store_->HostAddress(pin->extent), before);
  EXPECT_EQ(static_cast<unsigned char>(before[0]), static_cast<unsigned char>(1 + (600 << 10)));
  ASSERT_TRUE(store_->Release(pin->lease_id, kOwner).ok());
}

// A holder past its time limit may still touch the memory: nothing it holds is freed until its
// connection goes; meanwhile the connection is refused.
TEST_F(ObjectStoreTest, HoldersPastTheirTimeAreRefusedNotFreed) {
  StoreConfig config;
  config.reservation_ttl_ms = 30;
  config.lease_ttl_ms = 30;
  Make(1 << 20, 0, config);
  auto r = store_->Reserve({.ns = "ns", .key = "never", .size = 900 << 10}, kOwner);
  ASSERT_TRUE(r.ok());
  ASSERT_TRUE(Put("a", 50 << 10).ok());
  auto pin = store_->Pin("ns", "a", kOwner);
  ASSERT_TRUE(pin.ok());
  EXPECT_TRUE(store_->CheckOwner(kOwner).ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(60));
  store_->RunMaintenance();
  EXPECT_EQ(Counter(&StoreStats::reservations_overdue), 1u);
  EXPECT_EQ(Counter(&StoreStats::leases_overdue), 1u);
  EXPECT_EQ(Counter(&StoreStats::clients_overdue), 1u);
  EXPECT_EQ(store_->CheckOwner(kOwner).code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(store_->CheckOwner(kOwner + 1).ok());
  EXPECT_EQ(store_->Stats().reservations_open, 1u);
  EXPECT_EQ(store_->Head("ns", "a")->pins, 1u);
  // The reserved memory is not given to anyone else while its holder lives.
  EXPECT_EQ(Put("b", 900 << 10).code(), StatusCode::kResourceExhausted);
  store_->ReleaseOwner(kOwner);
  EXPECT_TRUE(store_->CheckOwner(kOwner).ok());
  EXPECT_EQ(store_->Stats().reservations_open, 0u);
  EXPECT_EQ(store_->Head("ns", "a")->pins, 0u);
  EXPECT_TRUE(Put("b", 900 << 10).ok());
}

TEST_F(ObjectStoreTest, NoTimeLimitByDefault) {
  Make(1 << 20, 0);
  auto r = store_->Reserve({.ns = "ns", .key = "slow", .size = 4096}, kOwner);
  ASSERT_TRUE(r.ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(40));
  store_->RunMaintenance();
  EXPECT_TRUE(store_->CheckOwner(kOwner).ok());
  EXPECT_TRUE(store_->Commit(r->id, Xxh3(store_->HostAddress(r->extent), 4096), kOwner).ok());
}

TEST_F(ObjectStoreTest, VerifiedCommitDropsBytesThatDoNotMatch) {
  StoreConfig config;
  config.verify_commits = true;
  Make(1 << 20, 0, config);
  auto r = store_->Reserve({.ns = "ns", .key = "k", .size = 4096}, kOwner);
  ASSERT_TRUE(r.ok());
  std::memset(store_->HostAddress(r->extent), 7, 4096);
  EXPECT_EQ(store_->Commit(r->id, 12345, kOwner).code(), StatusCode::kDataLoss);
  EXPECT_EQ(store_->Head("ns", "k").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(Counter(&StoreStats::commits_rejected), 1u);
  EXPECT_EQ(store_->Stats().reservations_open, 0u);
  auto good = store_->Reserve({.ns = "ns", .key = "k", .size = 4096}, kOwner);
  ASSERT_TRUE(good.ok());
  std::memset(store_->HostAddress(good->extent), 7, 4096);
  EXPECT_TRUE(store_->Commit(good->id, Xxh3(store_->HostAddress(good->extent), 4096), kOwner).ok());
}

TEST_F(ObjectStoreTest, NamespaceQuotasOnBytesAndObjects) {
  Make(1 << 20, 0);
  store_->SetQuotas({{"ns", {.max_bytes = 100 << 10, .max_objects = 3}}});
  ASSERT_TRUE(Put("a", 40 << 10).ok());
  ASSERT_TRUE(Put("b", 40 << 10).ok());
  EXPECT_EQ(Put("c", 40 << 10).code(), StatusCode::kResourceExhausted);  // 120 KiB > 100 KiB
  ASSERT_TRUE(Put("c", 10 << 10).ok());
  EXPECT_EQ(Put("d", 1).code(), StatusCode::kResourceExhausted);  // a 4th object
  EXPECT_EQ(store_->UsageOf("ns").objects, 3u);
  EXPECT_EQ(store_->UsageOf("ns").bytes, 90u << 10);
  EXPECT_EQ(Counter(&StoreStats::quota_refusals), 2u);
  // Replacing an object is not a new one; deleting one makes room.
  ASSERT_TRUE(Put("c", 5 << 10).ok());
  EXPECT_EQ(store_->UsageOf("ns").objects, 3u);
  ASSERT_TRUE(store_->Delete("ns", "a").ok());
  store_->Quiesce();
  EXPECT_EQ(store_->UsageOf("ns").objects, 2u);
  EXPECT_EQ(store_->UsageOf("ns").bytes, 45u << 10);
  EXPECT_TRUE(Put("d", 40 << 10).ok());
  // Other namespaces have no quota.
  EXPECT_TRUE(store_
                  ->PutCopy({.ns = "other", .key = "k", .size = 500 << 10},
                            std::string(500 << 10, 'o').data(), kPutter)
                  .ok());
}

// #76 item 5: a million empty objects took 939 MB of the server's memory, and no tier's capacity
// bounds them. Objects in all and per namespace have limits with defaults; 0-byte objects and
// reservations count.
TEST_F(ObjectStoreTest, ObjectsInAllAndPerNamespaceAreLimited) {
  EXPECT_EQ(StoreConfig{}.max_objects, 4u << 20);
  EXPECT_EQ(StoreConfig{}.max_objects_per_namespace, 1u << 20);
  StoreConfig config;
  config.max_objects = 100;
  config.max_objects_per_namespace = 40;
  Make(8 << 20, 0, config);
  auto put = [&](const std::string& ns, const std::string& key, std::uint64_t size = 0) {
    std::string bytes(size, 'x');
    return store_->PutCopy({.ns = ns, .key = key, .size = size}, bytes.data(), kPutter);
  };
  int made = 0;
  for (int i = 0; i < 60 && put("a", "k" + std::to_string(i)).ok(); ++i) ++made;
  EXPECT_EQ(made, 40);
  Status s = put("a", "one-more", 4096);
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted);
  EXPECT_NE(s.message().find("--max-objects-per-namespace 40"), std::string::npos) << s.ToString();
  EXPECT_TRUE(put("a", "k3", 4096).ok());  // a new version of a name is no new object
  for (int i = 0; i < 40; ++i) ASSERT_TRUE(put("b", "k" + std::to_string(i), 100).ok());
  // An open reservation holds an object's place too.
  auto held = store_->Reserve({.ns = "c", .key = "held", .size = 64}, kOwner);
  ASSERT_TRUE(held.ok());
  for (int i = 0; i < 19; ++i) ASSERT_TRUE(put("c", "k" + std::to_string(i)).ok());
  s = put("d", "k");
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted);
  EXPECT_NE(s.message().find("--max-objects 100"), std::string::npos) << s.ToString();
  EXPECT_EQ(store_->Reserve({.ns = "d", .key = "k", .size = 64}, kOwner).status().code(),
            StatusCode::kResourceExhausted);
  EXPECT_EQ(Counter(&StoreStats::object_limit_refusals), 4u);
  EXPECT_EQ(Counter(&StoreStats::objects), 99u);  // the reservation is not linked yet
  // Room again once one goes.
  ASSERT_TRUE(store_->Delete("b", "k0").ok());
  store_->Quiesce();
  EXPECT_TRUE(put("d", "k").ok());
}

// The counts the shared path reads are sloppy (per part, flushed every 64): from four threads
// at once the limit is still exact, since near it every put counts exactly.
TEST_F(ObjectStoreTest, ObjectLimitsHoldUnderPutsFromManyThreads) {
  StoreConfig config;
  config.max_objects = 5000;
  config.max_objects_per_namespace = 3000;
  Make(64 << 20, 0, config);
  std::atomic<int> made{0}, refused{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      const std::string ns = t < 2 ? "one" : "two";
      for (int i = 0; i < 2000; ++i) {
        std::string bytes(64, 'x');
        Status s = store_->PutCopy(
            {.ns = ns, .key = std::to_string(t) + "-" + std::to_string(i), .size = 64},
            bytes.data(), kPutter + t);
        if (s.ok()) {
          ++made;
        } else {
          ASSERT_EQ(s.code(), StatusCode::kResourceExhausted) << s.ToString();
          ++refused;
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  const std::uint64_t one = store_->UsageOf("one").objects, two = store_->UsageOf("two").objects;
  EXPECT_LE(one, 3000u);
  EXPECT_LE(two, 3000u);
  EXPECT_EQ(one + two, 5000u);
  EXPECT_EQ(made.load(), 5000);
  EXPECT_EQ(refused.load(), 3000);
}

TEST_F(ObjectStoreTest, NamespaceQuotasPerTier) {
  Make(1 << 20, 1 << 20);
  NamespaceQuota q;
  q.max_tier_bytes[static_cast<int>(TierKind::kHbm)] = 64 << 10;
  q.max_tier_bytes[static_cast<int>(TierKind::kDram)] = 128 << 10;
  store_->SetQuotas({{"ns", q}});
  ASSERT_TRUE(Put("h1", 48 << 10, Durability::kRetained, TierKind::kHbm).ok());
  EXPECT_EQ(store_->Head("ns", "h1")->tier, TierKind::kHbm);
  // Over the hbm quota: the put goes to dram instead.
  ASSERT_TRUE(Put("h2", 48 << 10, Durability::kRetained, TierKind::kHbm).ok());
  EXPECT_EQ(store_->Head("ns", "h2")->tier, TierKind::kDram);
  // A promotion over it does not start.
  EXPECT_EQ(store_->Promote("ns", "h2", TierKind::kHbm).code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(store_->Head("ns", "h2")->tier, TierKind::kDram);
  ASSERT_TRUE(Put("d1", 64 << 10).ok());
  // 48 + 64 KiB in dram: 32 KiB more passes the 128 KiB quota there.
  EXPECT_EQ(Put("d2", 32 << 10).code(), StatusCode::kResourceExhausted);
  EXPECT_TRUE(Put("d2", 16 << 10).ok());
  EXPECT_EQ(Counter(&StoreStats::quota_refusals), 3u);
  // Another namespace has none.
  EXPECT_TRUE(store_
                  ->PutCopy({.ns = "other", .key = "k", .size = 512 << 10},
                            std::string(512 << 10, 'o').data(), kPutter)
                  .ok());
}

TEST_F(ObjectStoreTest, PerClientLimitsOnReservationsPinsAndBytes) {
  StoreConfig config;
  config.max_reservations_per_client = 3;
  config.max_leases_per_client = 2;
  config.max_reserved_fraction_per_client = 0.5;
  Make(1 << 20, 0, config);
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(
        store_->Reserve({.ns = "ns", .key = "r" + std::to_string(i), .size = 10}, kOwner).ok());
  }
  EXPECT_EQ(store_->Reserve({.ns = "ns", .key = "r3", .size = 10}, kOwner).status().code(),
            StatusCode::kResourceExhausted);
  // Another connection has its own allowance, in bytes too: its first reservation may be of any
  // size, further ones only within half of the 1 MiB tier.
  EXPECT_TRUE(store_->Reserve({.ns = "ns", .key = "big", .size = 600 << 10}, kOwner + 1).ok());
  EXPECT_EQ(
      store_->Reserve({.ns = "ns", .key = "big2", .size = 10 << 10}, kOwner + 1).status().code(),
      StatusCode::kResourceExhausted);
  ASSERT_TRUE(Put("a", 10).ok());
  ASSERT_TRUE(store_->Pin("ns", "a", kOwner).ok());
  ASSERT_TRUE(store_->Pin("ns", "a", kOwner).ok());
  EXPECT_EQ(store_->Pin("ns", "a", kOwner).status().code(), StatusCode::kResourceExhausted);
  EXPECT_TRUE(store_->Pin("ns", "a", kOwner + 1).ok());
  EXPECT_EQ(Counter(&StoreStats::client_limit_refusals), 3u);
  store_->ReleaseOwner(kOwner);
  EXPECT_TRUE(store_->Reserve({.ns = "ns", .key = "r3", .size = 10}, kOwner).ok());
}

TEST_F(ObjectStoreTest, ReleaseOwnerDropsItsReservationsAndPins) {
  Make(1 << 20, 0);
  ASSERT_TRUE(Put("a", 10).ok());
  ASSERT_TRUE(store_->Reserve({.ns = "ns", .key = "r", .size = 100}, 7).ok());
  ASSERT_TRUE(store_->Pin("ns", "a", 7).ok());
  ASSERT_TRUE(store_->Pin("ns", "a", 8).ok());
  store_->ReleaseOwner(7);
  EXPECT_EQ(store_->Stats().reservations_open, 0u);
  EXPECT_EQ(store_->Head("ns", "a")->pins, 1u);  // owner 8's pin stays
}

TEST_F(ObjectStoreTest, ListsByNamespaceAndPrefix) {
  Make(1 << 20, 0);
  for (const char* k : {"a1", "a2", "b1"}) ASSERT_TRUE(Put(k, 1).ok());
  ASSERT_TRUE(store_->PutCopy({.ns = "other", .key = "a3", .size = 1}, "x", kOwner).ok());
  bool truncated = false;
  auto all = store_->List("ns", "", "", 0, false, &truncated);
  EXPECT_EQ(all.size(), 3u);
  auto a = store_->List("ns", "a", "", 0, false, &truncated);
  ASSERT_EQ(a.size(), 2u);
  EXPECT_EQ(a[1].key, "a2");
  auto page = store_->List("ns", "", "a1", 1, false, &truncated);
  ASSERT_EQ(page.size(), 1u);
  EXPECT_EQ(page[0].key, "a2");
  EXPECT_TRUE(truncated);
  EXPECT_EQ(store_->List("", "", "", 0, true, &truncated).size(), 4u);
}

// Readers, writers and the maintenance thread at once; checked by checksums.
TEST_F(ObjectStoreTest, ConcurrentPutsGetsAndDemotions) {
  Make(32 << 20, 2 << 20);
  store_->Start();
  std::vector<std::thread> threads;
  std::atomic<int> bad{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 300; ++i) {
        std::string key = "k" + std::to_string(t) + "-" + std::to_string(i % 20);
        std::string bytes(16 << 10, static_cast<char>(t * 31 + i));
        PutSpec spec{.ns = "ns",
                     .key = key,
                     .size = bytes.size(),
                     .tier_hint = (i % 2) ? std::optional(TierKind::kHbm) : std::nullopt};
        if (!store_->PutCopy(spec, bytes.data(), kOwner + static_cast<std::uint64_t>(t)).ok()) {
          ++bad;
        }
        std::string out;
        auto meta = store_->ReadCopy("ns", key, &out);
        if (meta.ok() && Xxh3(out.data(), out.size()) != meta->checksum) ++bad;
        if (i % 7 == 0) (void)store_->Promote("ns", key, TierKind::kHbm);
        if (i % 11 == 0) (void)store_->Delete("ns", key);
      }
    });
  }
  for (auto& th : threads) th.join();
  store_->Stop();
  EXPECT_EQ(bad.load(), 0);
}

// Gets of the same keys from several connections at once (the shared-lock path: pins and
// releases that run together) beside a thread that replaces, deletes, promotes and demotes
// those keys. Every pinned copy holds the bytes its meta says until released; when all is
// deleted and released, no lease is left and every byte of both tiers is free again (a release
// that was a copy's last pin settled the free it was waiting for).
TEST_F(ObjectStoreTest, SharedGetsBesideReplacesDeletesAndMoves) {
  Make(32 << 20, 1 << 20);
  store_->Start();
  constexpr int kKeys = 16, kReaders = 3, kRounds = 1000;
  auto key = [](int i) { return "s" + std::to_string(i); };
  auto put = [&](int i, int version) {
    std::string bytes(8 << 10, static_cast<char>(i * 7 + version));
    PutSpec spec{.ns = "ns",
                 .key = key(i),
                 .size = bytes.size(),
                 .tier_hint = version % 3 == 0 ? std::optional(TierKind::kHbm) : std::nullopt};
    return store_->PutCopy(spec, bytes.data(), kPutter);
  };
  for (int i = 0; i < kKeys; ++i) ASSERT_TRUE(put(i, 0).ok());
  std::atomic<int> readers_left{kReaders};
  std::atomic<int> bad{0}, pinned_ok{0};
  std::vector<std::thread> readers;
  for (int r = 0; r < kReaders; ++r) {
    readers.emplace_back([&, r] {
      const std::uint64_t owner = kOwner + 1 + static_cast<std::uint64_t>(r);
      for (int n = 0; n < kRounds * kKeys; ++n) {
        auto pinned = store_->Pin("ns", key(n % kKeys), owner);
        if (!pinned.ok()) {
          if (pinned.status().code() != StatusCode::kNotFound) ++bad;
          continue;
        }
        const std::byte* p = store_->HostAddress(pinned->extent);
        if (p == nullptr || Xxh3(p, pinned->meta.size) != pinned->meta.checksum) ++bad;
        ++pinned_ok;
        if (!store_->Release(pinned->lease_id, owner).ok()) ++bad;
      }
      --readers_left;
    });
  }
  // The writer goes on while the readers do (bounded, in case they stop early).
  int writes = 0;
  for (int round = 1; readers_left.load() > 0 && round < 1'000'000; ++round, ++writes) {
    const int i = round % kKeys;
    switch (round % 4) {
      case 0:
        (void)put(i, round);
        break;
      case 1:
        (void)store_->Delete("ns", key(i));
        (void)put(i, round);
        break;
      case 2:
        (void)store_->Promote("ns", key(i), TierKind::kHbm);
        break;
      case 3:
        (void)store_->Promote("ns", key(i), TierKind::kDram);
        break;
    }
  }
  for (auto& t : readers) t.join();
  EXPECT_EQ(bad.load(), 0);
  EXPECT_GT(pinned_ok.load(), 0);
  EXPECT_GT(writes, 0);
  for (int i = 0; i < kKeys; ++i) (void)store_->Delete("ns", key(i));
  store_->Quiesce();
  store_->Stop();
  const StoreStats stats = store_->Stats();
  EXPECT_EQ(stats.leases_open, 0u);
  EXPECT_EQ(stats.objects, 0u);
  EXPECT_EQ(Usage(TierKind::kDram).tier.used_bytes, 0u);
  EXPECT_EQ(Usage(TierKind::kHbm).tier.used_bytes, 0u);
}

// Puts from several connections at once into the same names (reserves and commits under the
// shared lock, each commit freeing the object it replaced when nobody reads it) beside gets of
// those names, deletes, and puts of `cache` objects that fill dram so that room is made (the
// exclusive path) while the rest goes on; one writer puts through staged room. A get returns
// the bytes of some put of its own name,
// whole; every put that a full tier does not refuse lands; when all is deleted, nothing is left:
// no object, reservation or lease, and every byte of dram is free (no replaced object leaked).
TEST_F(ObjectStoreTest, PutsInParallelIntoTheSameNamesBesideGetsAndEvictions) {
  Make(4 << 20, 0);
  store_->Start();
  constexpr int kKeys = 24, kWriters = 3, kReaders = 2, kRounds = 4000, kFillers = 48;
  constexpr std::uint64_t kSize = 16 << 10;  // 256 of them fill dram: evictions below
  auto key = [](int i) { return "p" + std::to_string(i); };
  // Bytes that say whose they are: the key's number, the version, then a fill of both.
  auto bytes_of = [](int i, std::uint64_t version) {
    std::string b(kSize, static_cast<char>(i * 7 + version));
    std::memcpy(b.data(), &i, sizeof(i));
    std::memcpy(b.data() + 8, &version, sizeof(version));
    return b;
  };
  std::atomic<int> bad{0}, puts_ok{0}, gets_ok{0}, writers_left{kWriters};
  std::vector<std::thread> threads;
  for (int w = 0; w < kWriters; ++w) {
    threads.emplace_back([&, w] {
      const std::uint64_t owner = kOwner + 10 + static_cast<std::uint64_t>(w);
      for (int n = 0; n < kRounds; ++n) {
        const int i = (n * 5 + w) % kKeys;
        const std::uint64_t version = static_cast<std::uint64_t>(n) * kWriters + w;
        const std::string b = bytes_of(i, version);
        // Retained names the readers check, and cache objects of their own that fill dram.
        // The first writer puts through staged room a page larger than its puts (the commit
        // that names it gives the rest back).
        PutSpec spec{.ns = "ns", .key = key(i), .size = kSize};
        Status s;
        if (w == 0) {
          auto room = store_->Stage({.ns = "ns", .size = kSize + 4096}, owner);
          s = room.status();
          if (room.ok()) {
            std::memcpy(store_->HostAddress(room->extent), b.data(), kSize);
            s = store_->Commit(room->id, Xxh3(b.data(), kSize), owner, &spec);
          }
        } else {
          s = store_->PutCopy(spec, b.data(), owner);
        }
        if (s.ok()) {
          ++puts_ok;
        } else if (s.code() != StatusCode::kResourceExhausted) {
          ++bad;
        }
        // The others' cache objects (2 x 48 x 16 KiB), the retained names (24 x 16 KiB) and the
        // large one (1.5 MiB) fill 84% of dram, below its 90% high watermark, where staged room
        // is made; a new large one beside the one it replaces needs room made.
        if (w != 0) {
          PutSpec filler{.ns = "ns",
                         .key = "c" + std::to_string(w) + "-" + std::to_string(n % kFillers),
                         .size = kSize,
                         .durability = Durability::kCache};
          s = store_->PutCopy(filler, b.data(), owner);
          if (!s.ok() && s.code() != StatusCode::kResourceExhausted) ++bad;
        }
        if (w == 1 && n % 64 == 0) {
          const std::string large(3 << 19, 'L');
          PutSpec big{
              .ns = "ns", .key = "large", .size = large.size(), .durability = Durability::kCache};
          s = store_->PutCopy(big, large.data(), owner);
          if (!s.ok() && s.code() != StatusCode::kResourceExhausted) ++bad;
        }
        if (n % 97 == 0) (void)store_->Delete("ns", key(i));
      }
      --writers_left;
    });
  }
  for (int r = 0; r < kReaders; ++r) {
    threads.emplace_back([&, r] {
      const std::uint64_t owner = kOwner + 20 + static_cast<std::uint64_t>(r);
      // Readers go on until the writers are done: on a busy 2-core machine they could
      // otherwise finish every round before the first put lands, and check nothing.
      for (int n = 0; n < kRounds * 4 || writers_left.load() > 0; ++n) {
        const int i = (n + r * 11) % kKeys;
        auto pinned = store_->Pin("ns", key(i), owner);
        if (!pinned.ok()) {
          if (pinned.status().code() != StatusCode::kNotFound) ++bad;
          continue;
        }
        const std::byte* p = store_->HostAddress(pinned->extent);
        int whose = -1;
        if (p != nullptr) std::memcpy(&whose, p, sizeof(whose));
        // Checked twice: a pinned copy's bytes stay as they are for as long as it is held.
        if (p == nullptr || pinned->meta.size != kSize || whose != i ||
            Xxh3(p, pinned->meta.size) != pinned->meta.checksum ||
            Xxh3(p, pinned->meta.size) != pinned->meta.checksum) {
          ++bad;
        }
        ++gets_ok;
        if (!store_->Release(pinned->lease_id, owner).ok()) ++bad;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(bad.load(), 0);
  EXPECT_GT(puts_ok.load(), kWriters * kRounds / 2);
  EXPECT_GT(gets_ok.load(), 0);
  EXPECT_EQ(Counter(&StoreStats::puts) >= static_cast<std::uint64_t>(puts_ok.load()), true);
  std::string out;
  for (int i = 0; i < kKeys; ++i) {
    if (auto meta = store_->ReadCopy("ns", key(i), &out); meta.ok()) {
      int whose = -1;
      std::memcpy(&whose, out.data(), sizeof(whose));
      EXPECT_EQ(whose, i);
    }
    (void)store_->Delete("ns", key(i));
  }
  for (int w = 0; w < kWriters; ++w) {
    for (int n = 0; n < kFillers; ++n) {
      (void)store_->Delete("ns", "c" + std::to_string(w) + "-" + std::to_string(n));
    }
  }
  (void)store_->Delete("ns", "large");
  store_->Quiesce();
  store_->Stop();
  const StoreStats stats = store_->Stats();
  EXPECT_EQ(stats.objects, 0u);
  EXPECT_EQ(stats.reservations_open, 0u);
  EXPECT_EQ(stats.leases_open, 0u);
  EXPECT_GT(stats.staged_commits, 0u);
  EXPECT_GT(stats.evictions, 0u);
  EXPECT_EQ(Usage(TierKind::kDram).tier.used_bytes, 0u);
  EXPECT_EQ(Usage(TierKind::kDram).object_count, 0u);
  for (int w = 0; w < kWriters; ++w) {
    EXPECT_FALSE(store_->Holds(kOwner + 10 + static_cast<std::uint64_t>(w)));
  }
}

}  // namespace
}  // namespace tierpool
