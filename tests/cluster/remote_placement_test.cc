// The store over dram, a remote tier borrowing from lenders in this process, and nvme: where
// spilled objects go (--spill-order), and what keeps a `retained` object safe when the remote
// tier holds one replica: a guard copy on local nvme, read when the peers are gone.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <thread>

#include "store/object_store.h"
#include "tests/cluster/lending_node.h"
#include "tiers/dram_tier.h"
#include "tiers/nvme_tier.h"

namespace tierpool {
namespace {

using namespace tierpool::testing;  // NOLINT: the fixture's helpers

constexpr std::uint64_t kOwner = 1;
constexpr std::size_t kSize = 1u << 20;

struct Rig {
  LendingNode a = StartLender("a"), b = StartLender("b");
  RemoteTier* remote = nullptr;
  std::unique_ptr<ObjectStore> store;
};

// dram of 8 MiB (watermarks 0.8 / 0.6), a remote tier of `replicas` from lenders a and b, and
// (with nvme_bytes) a memory-backed nvme tier.
std::unique_ptr<Rig> MakeRig(std::uint32_t replicas, std::uint64_t nvme_bytes,
                             StoreConfig config = {}) {
  auto rig = std::make_unique<Rig>();
  std::vector<std::unique_ptr<Tier>> tiers;
  auto d = DramTier::Create({.capacity = 8u << 20, .populate = false});
  EXPECT_TRUE(d.ok());
  (*d)->set_watermarks({.high = 0.8, .low = 0.6});
  tiers.push_back(std::move(d).value());
  RemoteTierConfig rc = SmallConfig();
  rc.replicas = replicas;
  rc.headroom_regions = 2;
  rc.background_maintenance = true;
  rc.maintenance_interval_ms = 10;  // grants kept ahead of the spills
  auto remote = Borrower({&rig->a, &rig->b}, rc);
  rig->remote = remote.get();
  tiers.push_back(std::move(remote));
  if (nvme_bytes > 0) {
    NvmeTierConfig nc;
    nc.backend = "memory";
    nc.capacity = nvme_bytes;
    nc.io_size = 256 * 1024;
    auto n = NvmeTier::Create(
        nc, std::make_unique<MemoryIoBackend>(IoBackendConfig{.block_size = 4096, .queue_depth = 8},
                                              std::vector<std::uint64_t>{nvme_bytes}));
    EXPECT_TRUE(n.ok()) << n.status().ToString();
    tiers.push_back(std::move(n).value());
  }
  config.room_wait_ms = 2000;
  auto s = ObjectStore::Create(config, std::move(tiers));
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  rig->store = std::move(s).value();
  rig->store->Start();
  return rig;
}

Status Put(ObjectStore& store, int i, Durability d = Durability::kRetained) {
  const std::string bytes = Bytes(kSize, i);
  return store.PutCopy(
      {.ns = "ns", .key = "k" + std::to_string(i), .size = bytes.size(), .durability = d},
      bytes.data(), kOwner);
}

std::vector<TierKind> Copies(ObjectStore& store, int i) {
  auto c = store.CopiesOf("ns", "k" + std::to_string(i));
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  return c.ok() ? *c : std::vector<TierKind>{};
}

// Objects k0..k<count-1> as Put wrote them, byte for byte.
void ExpectEachReadsBack(ObjectStore& store, int count) {
  for (int i = 0; i < count; ++i) {
    std::string out;
    auto meta = store.ReadCopy("ns", "k" + std::to_string(i), &out);
    ASSERT_TRUE(meta.ok()) << "k" << i << ": " << meta.status().ToString();
    EXPECT_TRUE(out == Bytes(kSize, i)) << "k" << i;
  }
}

bool Has(const std::vector<TierKind>& copies, TierKind k) {
  return std::find(copies.begin(), copies.end(), k) != copies.end();
}

std::uint64_t CopiesIn(ObjectStore& store, TierKind k) {
  for (const auto& t : store.Stats().tiers) {
    if (t.tier.kind == k) return t.object_count;
  }
  return 0;
}

// Waits (bounded) until the moves under way have landed and `done` holds.
template <typename Pred>
bool SettleUntil(ObjectStore& store, Pred done) {
  for (int i = 0; i < 500; ++i) {
    store.Quiesce();
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

TEST(RemotePlacement, ARetainedObjectWithOneRemoteReplicaKeepsAnNvmeCopyAndSurvivesThePeers) {
  auto rig = MakeRig(/*replicas=*/1, /*nvme_bytes=*/64u << 20);
  ObjectStore& store = *rig->store;
  ASSERT_FALSE(rig->remote->keeps_retained_alone());
  constexpr int kObjects = 24;  // 24 MiB through 8 MiB of dram
  for (int i = 0; i < kObjects; ++i) ASSERT_TRUE(Put(store, i).ok()) << i;
  ASSERT_TRUE(SettleUntil(store, [&] { return CopiesIn(store, TierKind::kRemote) >= 8; }))
      << CopiesIn(store, TierKind::kRemote) << " copies in remote";
  // Every retained object keeps a copy in a tier that keeps it alone (dram or nvme): each
  // remote copy has its guard.
  int in_remote = 0;
  for (int i = 0; i < kObjects; ++i) {
    const auto copies = Copies(store, i);
    if (!Has(copies, TierKind::kRemote)) continue;
    ++in_remote;
    EXPECT_TRUE(Has(copies, TierKind::kNvme) || Has(copies, TierKind::kDram)) << "k" << i;
  }
  EXPECT_GE(in_remote, 8);
  EXPECT_GE(store.Stats().guard_copies, static_cast<std::uint64_t>(in_remote));

  // Both lenders go: every remote copy with them.
  rig->a.server->Stop();
  rig->b.server->Stop();
  rig->remote->SetMembers({});
  ExpectEachReadsBack(store, kObjects);
  // A read that found its remote copy gone (NOT_FOUND) dropped it and counted it. One that met
  // a stopped peer's refusal before the remote tier judged the peer gone (UNAVAILABLE) read its
  // guard copy; the copy is counted once the remote tier's maintenance drops the peer (it left
  // the membership and refuses) and the store's takes the copies reported lost. Both run here:
  // before, the count depended on which came first (0 in 2 of 40 runs under load).
  rig->remote->RunMaintenance();
  store.RunMaintenance();
  const StoreStats stats = store.Stats();
  EXPECT_EQ(stats.copies_lost_with_peers, 0u);
  EXPECT_GE(stats.copies_lost_read_elsewhere, 1u);
}

TEST(RemotePlacement, AFullNvmeNeverGivesUpAGuardCopy) {
  // nvme for about a dozen guard copies: once it is full, a guard copy there is the only thing
  // keeping its object, and is not dropped to make room for another.
  auto rig = MakeRig(/*replicas=*/1, /*nvme_bytes=*/12u << 20);
  ObjectStore& store = *rig->store;
  int put = 0;
  for (; put < 40; ++put) {
    Status s = Put(store, put);
    if (s.code() == StatusCode::kResourceExhausted) break;
    ASSERT_TRUE(s.ok()) << put << ": " << s.ToString();
  }
  EXPECT_LT(put, 40);  // refused once dram and nvme are full, with remote room to spare
  store.Quiesce();
  int in_remote = 0;
  for (int i = 0; i < put; ++i) {
    const auto copies = Copies(store, i);
    if (!Has(copies, TierKind::kRemote)) continue;
    ++in_remote;
    EXPECT_TRUE(Has(copies, TierKind::kNvme) || Has(copies, TierKind::kDram)) << "k" << i;
  }
  EXPECT_GT(in_remote, 0);
}

TEST(RemotePlacement, WithOneRemoteReplicaAndNoNvmeRetainedObjectsNeverGoRemote) {
  auto rig = MakeRig(/*replicas=*/1, /*nvme_bytes=*/0);
  ObjectStore& store = *rig->store;
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(Put(store, i).ok()) << i;
  // Cache objects may go remote with one copy; they make room for each other there.
  for (int i = 100; i < 116; ++i) ASSERT_TRUE(Put(store, i, Durability::kCache).ok()) << i;
  ASSERT_TRUE(SettleUntil(store, [&] { return CopiesIn(store, TierKind::kRemote) > 0; }));
  for (int i = 0; i < 4; ++i) EXPECT_EQ(Copies(store, i), std::vector{TierKind::kDram}) << i;
  // Retained puts past dram: refused (no room), never placed on one peer.
  Status full;
  for (int i = 4; i < 24 && full.ok(); ++i) full = Put(store, i);
  EXPECT_EQ(full.code(), StatusCode::kResourceExhausted) << full.ToString();
  for (int i = 0; i < 24; ++i) {
    auto copies = store.CopiesOf("ns", "k" + std::to_string(i));
    if (copies.ok()) {
      EXPECT_FALSE(Has(*copies, TierKind::kRemote)) << "k" << i;
    }
  }
}

TEST(RemotePlacement, TheSpillOrderPutsNvmeBeforeRemote) {
  for (const bool nvme_first : {false, true}) {
    StoreConfig config;
    if (nvme_first) config.spill_order = {TierKind::kNvme, TierKind::kRemote};
    auto rig = MakeRig(/*replicas=*/2, /*nvme_bytes=*/64u << 20, config);
    ObjectStore& store = *rig->store;
    for (int i = 0; i < 16; ++i) ASSERT_TRUE(Put(store, i).ok()) << i;
    const TierKind first = nvme_first ? TierKind::kNvme : TierKind::kRemote;
    const TierKind second = nvme_first ? TierKind::kRemote : TierKind::kNvme;
    ASSERT_TRUE(SettleUntil(store, [&] { return CopiesIn(store, first) >= 8; }))
        << "nvme first: " << nvme_first;
    EXPECT_EQ(CopiesIn(store, second), 0u) << "nvme first: " << nvme_first;
    ExpectEachReadsBack(store, 16);
  }
}

TEST(RemotePlacement, WithNvmeFirstAFullNvmeSpillsOnToRemote) {
  StoreConfig config;
  config.spill_order = {TierKind::kNvme, TierKind::kRemote};
  auto rig = MakeRig(/*replicas=*/2, /*nvme_bytes=*/12u << 20, config);
  ObjectStore& store = *rig->store;
  constexpr int kObjects = 28;  // past dram (8 MiB) and nvme (12 MiB) together
  for (int i = 0; i < kObjects; ++i) ASSERT_TRUE(Put(store, i).ok()) << i;
  ASSERT_TRUE(SettleUntil(store, [&] { return CopiesIn(store, TierKind::kRemote) > 0; }));
  EXPECT_GT(CopiesIn(store, TierKind::kNvme), 0u);
  ExpectEachReadsBack(store, kObjects);
}

TEST(RemotePlacement, TheSpillOrderIsValidated) {
  StoreConfig c;
  c.spill_order = {TierKind::kNvme, TierKind::kNvme};
  EXPECT_EQ(c.validate().code(), StatusCode::kInvalidArgument);
  c.spill_order = {TierKind::kDram};
  EXPECT_EQ(c.validate().code(), StatusCode::kInvalidArgument);
  c.spill_order = {TierKind::kNvme};  // the others follow by level
  EXPECT_TRUE(c.validate().ok());
}

}  // namespace
}  // namespace tierpool
