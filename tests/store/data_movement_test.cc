// The store's data movement through the mover: copies in more than one tier, gets racing
// moves, moves racing deletes, quarantine of corrupt objects, and expiry on a test clock.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <map>
#include <random>
#include <thread>

#include "common/checksum.h"
#include "store/object_store.h"
#include "tiers/dram_tier.h"
#include "tiers/hbm_tier.h"
#include "tiers/nvme_tier.h"

namespace tierpool {
namespace {

constexpr std::uint64_t kOwner = 5;

struct Rig {
  std::unique_ptr<ObjectStore> store;
  FaultInjectingIoBackend* faults = nullptr;
};

Rig Make(std::uint64_t dram, std::uint64_t hbm, std::uint64_t nvme, StoreConfig config = {},
         const Clock* clock = SystemClock::Default()) {
  Rig rig;
  std::vector<std::unique_ptr<Tier>> tiers;
  auto d = DramTier::Create({.capacity = dram, .populate = false});
  EXPECT_TRUE(d.ok());
  (*d)->set_watermarks({.high = 0.8, .low = 0.6});
  tiers.push_back(std::move(d).value());
  if (hbm > 0) {
    auto h = HbmTier::Create({.capacity = hbm}, std::make_unique<HostPinnedHbmBackend>());
    EXPECT_TRUE(h.ok());
    tiers.push_back(std::move(h).value());
  }
  if (nvme > 0) {
    NvmeTierConfig nc;
    nc.backend = "memory";
    nc.capacity = nvme;
    nc.io_size = 64 << 10;
    auto faults = std::make_unique<FaultInjectingIoBackend>(
        std::make_unique<MemoryIoBackend>(IoBackendConfig{.block_size = 4096, .queue_depth = 8},
                                          std::vector<std::uint64_t>{nvme}),
        1);
    rig.faults = faults.get();
    auto n = NvmeTier::Create(nc, std::move(faults));
    EXPECT_TRUE(n.ok()) << n.status().ToString();
    tiers.push_back(std::move(n).value());
  }
  auto s = ObjectStore::Create(config, std::move(tiers), clock);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  rig.store = std::move(s).value();
  return rig;
}

std::string Bytes(std::uint64_t seed, std::size_t n) {
  std::string s(n, '\0');
  std::mt19937_64 rng(seed);
  for (auto& c : s) c = static_cast<char>(rng());
  return s;
}

Status Put(ObjectStore& store, const std::string& key, const std::string& bytes,
           std::optional<TierKind> tier = std::nullopt) {
  return store.PutCopy({.ns = "ns", .key = key, .size = bytes.size(), .tier_hint = tier},
                       bytes.data(), kOwner);
}

const LinkStats* Link(const StoreStats& s, TierKind from, TierKind to) {
  for (const auto& l : s.links) {
    if (l.from == from && l.to == to) return &l;
  }
  return nullptr;
}

TierUsage Usage(ObjectStore& store, TierKind k) {
  for (auto& t : store.Stats().tiers) {
    if (t.tier.kind == k) return t;
  }
  return {};
}

TEST(DataMovement, CleanCopyBelowSurvivesAPromotion) {
  Rig rig = Make(16 << 20, 4 << 20, 0);
  ObjectStore& store = *rig.store;
  const std::string a = Bytes(1, 3 << 20), b = Bytes(2, 3 << 20);
  ASSERT_TRUE(Put(store, "a", a).ok());
  ASSERT_TRUE(Put(store, "b", b).ok());
  ASSERT_TRUE(store.Promote("ns", "a", TierKind::kHbm).ok());
  EXPECT_EQ(store.Head("ns", "a")->tier, TierKind::kHbm);
  // b needs a's room in hbm: a's hbm copy is dropped, no bytes go back down.
  ASSERT_TRUE(store.Promote("ns", "b", TierKind::kHbm).ok());
  StoreStats s = store.Stats();
  EXPECT_EQ(s.clean_drops, 1u);
  EXPECT_EQ(s.demotions, 0u);
  EXPECT_EQ(Link(s, TierKind::kHbm, TierKind::kDram), nullptr);  // the link was never used
  ASSERT_NE(Link(s, TierKind::kDram, TierKind::kHbm), nullptr);
  EXPECT_EQ(Link(s, TierKind::kDram, TierKind::kHbm)->bytes, 6u << 20);
  std::string out;
  ASSERT_TRUE(store.ReadCopy("ns", "a", &out).ok());
  EXPECT_TRUE(out == a);
  ASSERT_TRUE(store.ReadCopy("ns", "b", &out).ok());
  EXPECT_TRUE(out == b);
  // A new put of a key is a new object: none of the old copies survive it.
  ASSERT_TRUE(Put(store, "b", a).ok());
  EXPECT_EQ(store.Head("ns", "b")->tier, TierKind::kDram);
  EXPECT_EQ(Usage(store, TierKind::kHbm).tier.used_bytes, 0u);
  ASSERT_TRUE(store.ReadCopy("ns", "b", &out).ok());
  EXPECT_TRUE(out == a);
}

// hbm with 4 MiB free in four 1 MiB holes and a pinned copy between them: a 2.5 MiB put opens
// a window by moving one copy aside inside hbm, and hbm never holds more than it does after the
// put (the copy moved is the only one ever held twice, and only while it is copied). Before, the
// policy moved least recently used copies down to dram until a large enough hole opened (three
// demotions here), and they came back up later: traffic the simulation, which counts bytes, never
// has.
TEST(DataMovement, ScatteredFreeBytesAreJoinedByMovingCopiesAsideNotDown) {
  Rig rig = Make(64 << 20, 8 << 20, 0);
  ObjectStore& store = *rig.store;
  std::vector<std::string> bytes;
  for (int i = 0; i < 8; ++i) {
    bytes.push_back(Bytes(10 + static_cast<std::uint64_t>(i), 1 << 20));
    ASSERT_TRUE(Put(store, "o" + std::to_string(i), bytes.back(), TierKind::kHbm).ok());
    ASSERT_EQ(store.Head("ns", "o" + std::to_string(i))->tier, TierKind::kHbm);
  }
  for (int i = 1; i < 8; i += 2) ASSERT_TRUE(store.Delete("ns", "o" + std::to_string(i)).ok());
  auto pinned = store.Pin("ns", "o4", kOwner);
  ASSERT_TRUE(pinned.ok());
  ASSERT_EQ(pinned->meta.tier, TierKind::kHbm);
  EXPECT_EQ(Usage(store, TierKind::kHbm).tier.largest_free_extent, 1u << 20);

  const std::string big = Bytes(99, 5 << 19);
  store.ResetPeaks();
  ASSERT_TRUE(Put(store, "big", big, TierKind::kHbm).ok());
  EXPECT_EQ(store.Head("ns", "big")->tier, TierKind::kHbm);
  const TierUsage hbm = Usage(store, TierKind::kHbm);
  EXPECT_EQ(hbm.tier.used_bytes, (4u << 20) + (5u << 19));
  EXPECT_LE(hbm.tier.peak_used_bytes, hbm.tier.used_bytes);
  StoreStats s = store.Stats();
  EXPECT_EQ(s.demotions, 0u);
  EXPECT_EQ(s.relocations, 1u);  // the cheapest window moves one copy, not two
  EXPECT_EQ(s.relocated_bytes, 1u << 20);
  for (int i = 0; i < 8; i += 2) {
    const std::string key = "o" + std::to_string(i);
    EXPECT_EQ(store.Head("ns", key)->tier, TierKind::kHbm) << key;
    std::string out;
    ASSERT_TRUE(store.ReadCopy("ns", key, &out).ok()) << key;
    EXPECT_TRUE(out == bytes[static_cast<std::size_t>(i)]) << key << " changed when it moved";
  }
  std::string out;
  ASSERT_TRUE(store.ReadCopy("ns", "big", &out).ok());
  EXPECT_TRUE(out == big);
  // The reader's copy never moved under it.
  EXPECT_EQ(std::memcmp(store.HostAddress(pinned->extent), bytes[4].data(), 1 << 20), 0);
  ASSERT_TRUE(store.Release(pinned->lease_id, kOwner).ok());
}

// A reader's copy never moves, though a pin does not take it out of the candidate sets (the
// policy checks as it applies). hbm 5 MiB: hole 1, P 1 (pinned), hole 1, A 2. A 2 MiB put: the
// windows around P would be cheapest; the one over A has nowhere to put A. So nothing moves,
// and the reader still reads P where it was. Before, P moved, the put landed on its old place,
// and the soak test's clients read other bytes through their views.
TEST(DataMovement, APinnedCopyIsNeverMovedAside) {
  Rig rig = Make(64 << 20, 5 << 20, 0);
  ObjectStore& store = *rig.store;
  const std::vector<std::pair<std::string, std::size_t>> layout = {
      {"f1", 1 << 20}, {"P", 1 << 20}, {"f2", 1 << 20}, {"A", 2 << 20}};
  std::map<std::string, std::string> bytes;
  for (const auto& [key, n] : layout) {
    bytes[key] = Bytes(key[0] + 100, n);
    ASSERT_TRUE(Put(store, key, bytes[key], TierKind::kHbm).ok());
  }
  ASSERT_TRUE(store.Delete("ns", "f1").ok());
  ASSERT_TRUE(store.Delete("ns", "f2").ok());
  auto p = store.Pin("ns", "P", kOwner, {.want = TierKind::kHbm});
  ASSERT_TRUE(p.ok());
  ASSERT_EQ(p->meta.tier, TierKind::kHbm);
  const std::string big = Bytes(5, 2 << 20);
  ASSERT_TRUE(Put(store, "big", big, TierKind::kHbm).ok());
  EXPECT_EQ(store.Stats().relocations, 0u);
  EXPECT_EQ(std::memcmp(store.HostAddress(p->extent), bytes["P"].data(), 1 << 20), 0)
      << "the reader's bytes changed under it";
  ASSERT_TRUE(store.Release(p->lease_id, kOwner).ok());
  std::string out;
  for (const char* key : {"P", "A", "big"}) {
    ASSERT_TRUE(store.ReadCopy("ns", key, &out).ok()) << key;
    EXPECT_TRUE(out == (std::string(key) == "big" ? big : bytes[key])) << key;
  }
}

// The cheapest window holds a copy that fits in no hole outside it: the next window is tried.
// hbm (7 MiB, in 512 KiB units u): hole 2u, B 3u, hole 2u | pinned X 1u | C 2u, hole 2u, D 2u.
// A 6u put: [hole, B, hole] moves 3u but B has nowhere to go; [C, hole, D] moves 4u and does.
TEST(DataMovement, AWindowWhoseCopiesHaveNowhereToGoGivesWayToTheNext) {
  Rig rig = Make(64 << 20, 7 << 20, 0);
  ObjectStore& store = *rig.store;
  constexpr std::size_t u = 512 << 10;
  const std::vector<std::pair<std::string, std::size_t>> layout = {
      {"f1", 2 * u}, {"B", 3 * u},  {"f2", 2 * u}, {"X", u},
      {"C", 2 * u},  {"f3", 2 * u}, {"D", 2 * u}};
  std::map<std::string, std::string> bytes;
  for (const auto& [key, n] : layout) {
    bytes[key] = Bytes(key[0], n);
    ASSERT_TRUE(Put(store, key, bytes[key], TierKind::kHbm).ok());
    ASSERT_EQ(store.Head("ns", key)->tier, TierKind::kHbm) << key;
  }
  for (const char* key : {"f1", "f2", "f3"}) ASSERT_TRUE(store.Delete("ns", key).ok());
  auto x = store.Pin("ns", "X", kOwner);
  ASSERT_TRUE(x.ok());
  const std::string big = Bytes(77, 6 * u);
  ASSERT_TRUE(Put(store, "big", big, TierKind::kHbm).ok());
  EXPECT_EQ(store.Head("ns", "big")->tier, TierKind::kHbm);
  StoreStats s = store.Stats();
  EXPECT_EQ(s.demotions, 0u);
  EXPECT_EQ(s.relocations, 2u);  // C and D, not B
  EXPECT_EQ(s.relocated_bytes, 4 * u);
  for (const char* key : {"B", "X", "C", "D", "big"}) {
    std::string out;
    ASSERT_TRUE(store.ReadCopy("ns", key, &out).ok()) << key;
    EXPECT_TRUE(out == (std::string(key) == "big" ? big : bytes[key])) << key;
    EXPECT_EQ(store.Head("ns", key)->tier, TierKind::kHbm) << key;
  }
  ASSERT_TRUE(store.Release(x->lease_id, kOwner).ok());
}

// Moving a copy aside checks its bytes in the same pass: bytes changed in memory are caught
// and set aside (DATA_LOSS to their gets), never carried to a new place as if right.
TEST(DataMovement, ACopyMovedAsideWhoseBytesChangedIsQuarantined) {
  Rig rig = Make(64 << 20, 4 << 20, 0);
  ObjectStore& store = *rig.store;
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE(Put(store, "o" + std::to_string(i), Bytes(static_cast<std::uint64_t>(i), 1 << 20),
                    TierKind::kHbm)
                    .ok());
  }
  ASSERT_TRUE(store.Delete("ns", "o0").ok());
  ASSERT_TRUE(store.Delete("ns", "o2").ok());
  // o1 and o3 sit between and after the holes; flip a byte of each.
  for (const char* key : {"o1", "o3"}) {
    auto p = store.Pin("ns", key, kOwner);
    ASSERT_TRUE(p.ok());
    store.HostAddress(p->extent)[100] ^= std::byte{1};
    ASSERT_TRUE(store.Release(p->lease_id, kOwner).ok());
  }
  const std::string big = Bytes(7, 2 << 20);
  ASSERT_TRUE(Put(store, "big", big, TierKind::kHbm).ok());  // to dram, or to hbm: never wrong
  StoreStats s = store.Stats();
  EXPECT_GE(s.quarantined, 1u);
  EXPECT_EQ(s.relocations, 0u);
  std::string out;
  int lost = 0;
  for (const char* key : {"o1", "o3"}) {
    auto r = store.ReadCopy("ns", key, &out);
    if (!r.ok()) {
      EXPECT_EQ(r.status().code(), StatusCode::kDataLoss) << key;
      ++lost;
    }
  }
  EXPECT_GE(lost, 1);
  ASSERT_TRUE(store.ReadCopy("ns", "big", &out).ok());
  EXPECT_TRUE(out == big);
}

TEST(DataMovement, DemotionUnderWatermarkMovesOnlyDirtyCopies) {
  Rig rig = Make(32 << 20, 4 << 20, 0);
  ObjectStore& store = *rig.store;
  // "up" was promoted (a clean copy stays in dram); "fresh" was written into hbm (only copy).
  ASSERT_TRUE(Put(store, "up", Bytes(1, 512 << 10)).ok());
  ASSERT_TRUE(store.Promote("ns", "up", TierKind::kHbm).ok());
  ASSERT_TRUE(Put(store, "fresh", Bytes(2, 3584 << 10), TierKind::kHbm).ok());
  EXPECT_EQ(store.Head("ns", "fresh")->tier, TierKind::kHbm);
  // hbm holds 4 MiB of 4 MiB, above its 0.9 high watermark: 1 MiB must go to reach 0.75. The
  // clean copy goes first (free), then the least recently used copy that must be copied down.
  store.RunMaintenance();
  store.Quiesce();
  StoreStats s = store.Stats();
  EXPECT_EQ(s.clean_drops, 1u);  // "up" left hbm for free
  EXPECT_EQ(s.demotions, 1u);    // "fresh" was copied down
  EXPECT_EQ(store.Head("ns", "up")->tier, TierKind::kDram);
  EXPECT_EQ(store.Head("ns", "fresh")->tier, TierKind::kDram);
  std::string out;
  ASSERT_TRUE(store.ReadCopy("ns", "fresh", &out).ok());
  EXPECT_TRUE(out == Bytes(2, 3584 << 10));
}

TEST(DataMovement, ConcurrentGetsShareOneReadBack) {
  Rig rig = Make(8 << 20, 0, 64 << 20);
  ObjectStore& store = *rig.store;
  const std::string big = Bytes(3, 4 << 20);
  ASSERT_TRUE(Put(store, "cold", big).ok());
  ASSERT_TRUE(Put(store, "pusher", Bytes(4, 6 << 20)).ok());  // spills "cold"
  store.Quiesce();
  ASSERT_EQ(store.Head("ns", "cold")->tier, TierKind::kNvme);
  ASSERT_TRUE(store.Delete("ns", "pusher").ok());
  // Slow the device so every reader arrives while the read-back is in flight.
  rig.faults->AddRule({.kind = FaultKind::kLatency, .one_in = 1, .latency_us = 2000});
  std::atomic<int> wrong{0}, failed{0};
  std::vector<std::thread> readers;
  for (int i = 0; i < 8; ++i) {
    readers.emplace_back([&] {
      std::string out;
      auto meta = store.ReadCopy("ns", "cold", &out);
      if (!meta.ok()) {
        ++failed;
      } else if (out != big) {
        ++wrong;
      }
    });
  }
  for (auto& t : readers) t.join();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_EQ(failed.load(), 0);
  StoreStats s = store.Stats();
  EXPECT_EQ(s.nvme_reads, 1u);  // one move, eight readers
  ASSERT_NE(Link(s, TierKind::kNvme, TierKind::kDram), nullptr);
  EXPECT_EQ(Link(s, TierKind::kNvme, TierKind::kDram)->submitted, 1u);
  // The record stays on nvme as a clean copy: dram can let the object go again for free.
  EXPECT_EQ(Usage(store, TierKind::kNvme).object_count, 1u);
  EXPECT_EQ(Usage(store, TierKind::kDram).object_count, 1u);
}

TEST(DataMovement, DeleteRacingMovesLeaksNothing) {
  Rig rig = Make(8 << 20, 4 << 20, 64 << 20);
  ObjectStore& store = *rig.store;
  rig.faults->AddRule({.kind = FaultKind::kLatency, .one_in = 1, .latency_us = 300});
  store.Start();
  std::mt19937_64 rng(5);
  std::atomic<bool> stop{false};
  std::thread deleter([&] {
    while (!stop) {
      (void)store.Delete("ns", "k" + std::to_string(rng() % 16));
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  });
  for (int i = 0; i < 300; ++i) {
    std::string key = "k" + std::to_string(i % 16);
    Status s = Put(store, key, Bytes(static_cast<std::uint64_t>(i), 512 << 10));
    ASSERT_TRUE(s.ok() || s.code() == StatusCode::kResourceExhausted) << s.ToString();
    if (i % 3 == 0) (void)store.Promote("ns", key, TierKind::kHbm);
    std::string out;
    auto meta = store.ReadCopy("ns", key, &out);
    if (meta.ok()) {
      ASSERT_EQ(Xxh3(out.data(), out.size()), meta->checksum);
    }
  }
  stop = true;
  deleter.join();
  store.Stop();
  for (int i = 0; i < 16; ++i) (void)store.Delete("ns", "k" + std::to_string(i));
  store.Quiesce();
  StoreStats s = store.Stats();
  EXPECT_EQ(s.objects, 0u);
  for (const auto& t : s.tiers) {
    EXPECT_EQ(t.tier.used_bytes, 0u) << TierName(t.tier.kind);
    EXPECT_EQ(t.object_count, 0u) << TierName(t.tier.kind);
  }
}

// An object whose bytes were damaged in memory after commit is set aside: its spill fails once,
// its gets say DATA_LOSS, and it never again stands in the way of everyone else's spills.
TEST(DataMovement, CorruptObjectsAreQuarantinedNotRetried) {
  Rig rig = Make(8 << 20, 0, 64 << 20);
  ObjectStore& store = *rig.store;
  for (int i = 0; i < 8; ++i) {
    std::string key = "bad" + std::to_string(i);
    ASSERT_TRUE(Put(store, key, Bytes(static_cast<std::uint64_t>(i), 256 << 10)).ok());
    auto pin = store.Pin("ns", key, kOwner);
    ASSERT_TRUE(pin.ok());
    store.HostAddress(pin->extent)[100] ^= std::byte{0xff};  // a stray write through the mapping
    ASSERT_TRUE(store.Release(pin->lease_id, kOwner).ok());
  }
  int accepted = 0;
  for (int i = 0; i < 200; ++i) {
    if (Put(store, "good" + std::to_string(i),
            Bytes(100 + static_cast<std::uint64_t>(i), 256 << 10))
            .ok()) {
      ++accepted;
    }
  }
  EXPECT_EQ(accepted, 200);
  StoreStats s = store.Stats();
  EXPECT_EQ(s.quarantined, 8u);
  EXPECT_EQ(s.corrupt_in_memory, 8u);
  std::string out;
  EXPECT_EQ(store.ReadCopy("ns", "bad3", &out).status().code(), StatusCode::kDataLoss);
  EXPECT_TRUE(out.empty());
  ASSERT_TRUE(store.ReadCopy("ns", "good7", &out).ok());
  EXPECT_TRUE(out == Bytes(107, 256 << 10));
  ASSERT_TRUE(store.Delete("ns", "bad3").ok());  // a quarantined object can still be deleted
}

// A pin for a get that reads only the bytes (PinOptions::bytes_meta_only) copies no names, dtype
// or shape, but still says size, checksum and tier; and a copy out of such a pin whose bytes were
// damaged names the object and quarantines it (found by id, not by the names it left out).
TEST(DataMovement, APinOfBytesMetaOnlyLeavesTheNamesOutAndStillQuarantinesDamage) {
  Rig rig = Make(8 << 20, 0, 64 << 20);
  ObjectStore& store = *rig.store;
  const std::string key = "a-key-long-enough-to-live-out-of-line";
  const std::string bytes = Bytes(7, 64 << 10);
  ASSERT_TRUE(Put(store, key, bytes).ok());
  PinOptions lean;
  lean.bytes_meta_only = true;
  auto pin = store.Pin("ns", key, kOwner, lean);
  ASSERT_TRUE(pin.ok()) << pin.status().ToString();
  EXPECT_TRUE(pin->meta.ns.empty());
  EXPECT_TRUE(pin->meta.key.empty());
  EXPECT_EQ(pin->meta.size, bytes.size());
  EXPECT_EQ(pin->meta.checksum, Xxh3(bytes.data(), bytes.size()));
  EXPECT_EQ(pin->meta.tier, TierKind::kDram);
  EXPECT_EQ(pin->meta.pins, 1u);
  auto full = store.Pin("ns", key, kOwner);
  ASSERT_TRUE(full.ok());
  EXPECT_EQ(full->meta.key, key);
  EXPECT_EQ(full->object_id, pin->object_id);
  ASSERT_TRUE(store.Release(full->lease_id, kOwner).ok());

  store.HostAddress(pin->extent)[100] ^= std::byte{0xff};  // a stray write through the mapping
  std::string out;
  Status copied = store.CopyOut(*pin, &out);
  EXPECT_EQ(copied.code(), StatusCode::kDataLoss);
  EXPECT_NE(copied.message().find("ns/" + key), std::string::npos) << copied.ToString();
  EXPECT_TRUE(out.empty());
  ASSERT_TRUE(store.Release(pin->lease_id, kOwner).ok());
  EXPECT_EQ(store.Stats().quarantined, 1u);
  EXPECT_EQ(store.ReadCopy("ns", key, &out).status().code(), StatusCode::kDataLoss);
}

TEST(DataMovement, CopyPathReadsCheckBytesInTheSamePass) {
  Rig rig = Make(8 << 20, 0, 0);
  ObjectStore& store = *rig.store;
  ASSERT_TRUE(Put(store, "k", Bytes(9, 100 << 10)).ok());
  auto pin = store.Pin("ns", "k", kOwner);
  ASSERT_TRUE(pin.ok());
  store.HostAddress(pin->extent)[7] ^= std::byte{1};
  ASSERT_TRUE(store.Release(pin->lease_id, kOwner).ok());
  std::string out;
  EXPECT_EQ(store.ReadCopy("ns", "k", &out).status().code(), StatusCode::kDataLoss);
  EXPECT_EQ(store.Stats().quarantined, 1u);
}

TEST(DataMovement, TimeLimitsRunOnTheTestClock) {
  ManualClock clock;
  StoreConfig config;
  config.reservation_ttl_ms = 1000;
  config.lease_ttl_ms = 2000;
  Rig rig = Make(8 << 20, 0, 0, config, &clock);
  ObjectStore& store = *rig.store;
  auto r = store.Reserve({.ns = "ns", .key = "r", .size = 4096}, kOwner);
  ASSERT_TRUE(r.ok());
  ASSERT_TRUE(Put(store, "a", Bytes(1, 4096)).ok());
  auto pin = store.Pin("ns", "a", kOwner + 1);
  ASSERT_TRUE(pin.ok());
  clock.Advance(999'000);
  store.RunMaintenance();
  EXPECT_TRUE(store.CheckOwner(kOwner).ok());
  clock.Advance(2'000);
  store.RunMaintenance();
  EXPECT_FALSE(store.CheckOwner(kOwner).ok());
  EXPECT_TRUE(store.CheckOwner(kOwner + 1).ok());
  EXPECT_EQ(store.Stats().reservations_open, 1u);  // held, not freed
  clock.Advance(1'000'000);
  store.RunMaintenance();
  EXPECT_FALSE(store.CheckOwner(kOwner + 1).ok());
  EXPECT_EQ(store.Stats().leases_open, 1u);
  EXPECT_EQ(store.Stats().leases_overdue, 1u);
  EXPECT_EQ(store.Stats().clients_overdue, 2u);
  store.ReleaseOwner(kOwner);
  store.ReleaseOwner(kOwner + 1);
  EXPECT_EQ(store.Stats().reservations_open, 0u);
  EXPECT_EQ(store.Stats().leases_open, 0u);
}

}  // namespace
}  // namespace tierpool
