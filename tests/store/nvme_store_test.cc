// The store over dram + nvme: spill, read-back, and a randomized run under injected faults
// checked against a model of what must be there.
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <random>
#include <thread>

#include "common/checksum.h"
#include "store/object_store.h"
#include "tiers/dram_tier.h"
#include "tiers/nvme_tier.h"

namespace tierpool {
namespace {

constexpr std::uint64_t kOwner = 1;

struct Rig {
  std::unique_ptr<ObjectStore> store;
  FaultInjectingIoBackend* faults = nullptr;
};

Rig MakeRig(std::uint64_t dram, std::uint64_t nvme, std::uint64_t seed, StoreConfig config = {},
            std::vector<NamespacePool> pools = {}) {
  Rig rig;
  std::vector<std::unique_ptr<Tier>> tiers;
  std::vector<std::uint64_t> pool_bytes;
  for (const auto& p : pools) pool_bytes.push_back(p.dram_bytes);
  auto d = DramTier::Create({.capacity = dram, .pools = pool_bytes, .populate = false});
  EXPECT_TRUE(d.ok());
  (*d)->set_watermarks({.high = 0.8, .low = 0.6});
  tiers.push_back(std::move(d).value());
  NvmeTierConfig nc;
  nc.backend = "memory";
  nc.capacity = nvme;
  nc.files = 2;
  nc.io_size = 64 * 1024;
  nc.queue_depth = 8;
  nc.degrade_after_errors = 3;
  nc.retry_degraded_ms = 20;
  auto faults = std::make_unique<FaultInjectingIoBackend>(
      std::make_unique<MemoryIoBackend>(IoBackendConfig{.block_size = 4096, .queue_depth = 8},
                                        std::vector<std::uint64_t>(2, nvme / 2)),
      seed);
  rig.faults = faults.get();
  auto n = NvmeTier::Create(nc, std::move(faults));
  EXPECT_TRUE(n.ok()) << n.status().ToString();
  tiers.push_back(std::move(n).value());
  auto s = ObjectStore::Create(config, std::move(tiers));
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  rig.store = std::move(s).value();
  rig.store->SetPools(std::move(pools));
  return rig;
}

std::string Bytes(std::uint64_t seed, std::size_t n) {
  std::string s(n, '\0');
  std::mt19937_64 rng(seed);
  for (auto& c : s) c = static_cast<char>(rng());
  return s;
}

Status Put(ObjectStore& store, const std::string& key, const std::string& bytes,
           Durability d = Durability::kRetained) {
  return store.PutCopy({.ns = "ns", .key = key, .size = bytes.size(), .durability = d},
                       bytes.data(), kOwner);
}

TierUsage Usage(ObjectStore& store, TierKind k) {
  for (auto& t : store.Stats().tiers) {
    if (t.tier.kind == k) return t;
  }
  return {};
}

TEST(NvmeStore, HoldsFourTimesDramByteForByte) {
  Rig rig = MakeRig(8 << 20, 128 << 20, 1);
  ObjectStore& store = *rig.store;
  std::vector<std::string> data;
  for (int i = 0; i < 32; ++i) {  // 32 x 1 MiB = 4x dram
    data.push_back(Bytes(static_cast<std::uint64_t>(i), 1 << 20));
    ASSERT_TRUE(Put(store, "k" + std::to_string(i), data.back()).ok()) << i;
  }
  EXPECT_GT(store.Stats().spills, 20u);
  EXPECT_GT(Usage(store, TierKind::kNvme).object_count, 20u);
  for (int i = 0; i < 32; ++i) {
    std::string out;
    auto meta = store.ReadCopy("ns", "k" + std::to_string(i), &out);
    ASSERT_TRUE(meta.ok()) << i << ": " << meta.status().ToString();
    EXPECT_TRUE(out == data[static_cast<std::size_t>(i)]) << i;
  }
  EXPECT_GT(store.Stats().nvme_reads, 20u);
}

// A namespace pool fills and spills on its own: its puts move its own least recently used
// objects to nvme, never another pool's, and the shared arenas' objects stay where they are.
TEST(NvmeStore, NamespacePoolsFillAndSpillOnTheirOwn) {
  Rig rig = MakeRig(8 << 20, 64 << 20, 7, {},
                    {{.name = "bob", .patterns = {"bob", "bob-*"}, .dram_bytes = 2 << 20}});
  ObjectStore& store = *rig.store;
  EXPECT_EQ(store.PoolOf("bob-1"), 1u);
  EXPECT_EQ(store.PoolOf("alice"), kSharedPool);
  std::vector<std::string> alice, bob;
  for (int i = 0; i < 4; ++i) {  // 4 MiB of the 6 MiB shared: under the 80% watermark
    alice.push_back(Bytes(100 + static_cast<std::uint64_t>(i), 1 << 20));
    ASSERT_TRUE(store
                    .PutCopy({.ns = "alice", .key = std::to_string(i), .size = 1 << 20},
                             alice.back().data(), kOwner)
                    .ok());
  }
  for (int i = 0; i < 8; ++i) {  // 8 MiB into bob's 2 MiB
    bob.push_back(Bytes(200 + static_cast<std::uint64_t>(i), 1 << 20));
    ASSERT_TRUE(store
                    .PutCopy({.ns = "bob-1", .key = std::to_string(i), .size = 1 << 20},
                             bob.back().data(), kOwner)
                    .ok())
        << i;
  }
  store.RunMaintenance();
  store.Quiesce();
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(store.Head("alice", std::to_string(i))->tier, TierKind::kDram) << i;
  }
  int bob_spilled = 0;
  for (int i = 0; i < 8; ++i) {
    bob_spilled += store.Head("bob-1", std::to_string(i))->tier == TierKind::kNvme;
  }
  EXPECT_GE(bob_spilled, 6);
  const TierUsage dram = Usage(store, TierKind::kDram);
  EXPECT_LE(dram.tier.used_bytes, (4u << 20) + (2u << 20));
  for (int i = 0; i < 8; ++i) {
    std::string out;
    ASSERT_TRUE(store.ReadCopy("bob-1", std::to_string(i), &out).ok()) << i;
    EXPECT_TRUE(out == bob[static_cast<std::size_t>(i)]) << i;
  }
  for (int i = 0; i < 4; ++i) {
    std::string out;
    ASSERT_TRUE(store.ReadCopy("alice", std::to_string(i), &out).ok()) << i;
    EXPECT_TRUE(out == alice[static_cast<std::size_t>(i)]) << i;
  }
  // An object larger than the pool's share of dram is refused with the pool named.
  std::string big(3 << 20, 'b');
  Status s = store.PutCopy({.ns = "bob", .key = "big", .size = big.size()}, big.data(), kOwner);
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted);
  EXPECT_NE(s.message().find("bob"), std::string::npos) << s.ToString();
}

TEST(NvmeStore, GetsWhileSpillsAreInFlight) {
  Rig rig = MakeRig(8 << 20, 128 << 20, 2);
  ObjectStore& store = *rig.store;
  rig.faults->AddRule({.kind = FaultKind::kLatency, .one_in = 4, .latency_us = 300});
  store.Start();
  std::vector<std::string> data;
  for (int i = 0; i < 24; ++i)
    data.push_back(Bytes(static_cast<std::uint64_t>(100 + i), 512 << 10));
  for (int i = 0; i < 6; ++i)
    ASSERT_TRUE(Put(store, "k" + std::to_string(i), data[static_cast<std::size_t>(i)]).ok());
  std::atomic<bool> stop{false};
  std::atomic<int> bad{0}, reads{0};
  std::vector<std::thread> readers;
  for (int r = 0; r < 3; ++r) {
    readers.emplace_back([&, r] {
      std::mt19937 rng(static_cast<unsigned>(r));
      while (!stop) {
        int i = static_cast<int>(rng() % 6);
        std::string out;
        auto meta = store.ReadCopy("ns", "k" + std::to_string(i), &out);
        if (!meta.ok() || out != data[static_cast<std::size_t>(i)]) ++bad;
        ++reads;
      }
    });
  }
  for (int i = 6; i < 24; ++i) {
    const Status s = Put(store, "k" + std::to_string(i), data[static_cast<std::size_t>(i)]);
    EXPECT_TRUE(s.ok()) << i << ": " << s.ToString();
  }
  stop = true;
  for (auto& t : readers) t.join();
  store.Stop();
  EXPECT_EQ(bad.load(), 0);
  EXPECT_GT(reads.load(), 10);
  EXPECT_GT(store.Stats().spills, 5u);
}

// Room is made from the copies nobody reads: a get's pin keeps a copy where it is, and the
// least recently used copy being pinned must not end the search for room (puts were refused
// with room to spill while readers pinned the oldest objects, in GetsWhileSpillsAreInFlight
// under load).
TEST(NvmeStore, APinnedLeastRecentlyUsedCopyIsPassedOverWhenRoomIsMade) {
  Rig rig = MakeRig(4 << 20, 64 << 20, 5);
  ObjectStore& store = *rig.store;
  std::vector<std::string> data;
  for (int i = 0; i < 5; ++i) data.push_back(Bytes(static_cast<std::uint64_t>(i + 1), 1 << 20));
  for (int i = 0; i < 4; ++i) {  // dram full
    ASSERT_TRUE(Put(store, "k" + std::to_string(i), data[static_cast<std::size_t>(i)]).ok());
  }
  auto pinned = store.Pin("ns", "k0", kOwner + 1);
  ASSERT_TRUE(pinned.ok()) << pinned.status().ToString();
  std::string out;
  for (int i = 1; i < 4; ++i) {  // used after k0: k0 is the oldest
    ASSERT_TRUE(store.ReadCopy("ns", "k" + std::to_string(i), &out).ok());
  }
  const Status s = Put(store, "k4", data[4]);  // room for one: k1 goes to nvme, not k0
  EXPECT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(store.Head("ns", "k0")->tier, TierKind::kDram);
  ASSERT_TRUE(store.Release(pinned->lease_id, kOwner + 1).ok());
  for (int i = 0; i < 5; ++i) {
    ASSERT_TRUE(store.ReadCopy("ns", "k" + std::to_string(i), &out).ok()) << i;
    EXPECT_TRUE(out == data[static_cast<std::size_t>(i)]) << i;
  }
  EXPECT_GE(store.Stats().spills, 1u);
}

TEST(NvmeStore, FailedSpillLeavesTheObjectReadable) {
  Rig rig = MakeRig(4 << 20, 64 << 20, 3);
  ObjectStore& store = *rig.store;
  rig.faults->AddRule({.kind = FaultKind::kEio, .one_in = 1});
  std::string a = Bytes(1, 3 << 20), b = Bytes(2, 2 << 20);
  ASSERT_TRUE(Put(store, "a", a).ok());
  for (int i = 0; i < 3; ++i) {
    Status s = Put(store, "b", b);  // needs a spill, which fails: a clear error
    EXPECT_EQ(s.code(), StatusCode::kResourceExhausted) << s.ToString();
  }
  std::string out;
  ASSERT_TRUE(store.ReadCopy("ns", "a", &out).ok());
  EXPECT_TRUE(out == a);
  EXPECT_GE(store.Stats().spill_failures, 3u);
  EXPECT_EQ(Usage(store, TierKind::kNvme).tier.state, "degraded");
}

TEST(NvmeStore, CachePolicyDropKeepsNvmeForRetained) {
  StoreConfig config;
  config.cache_policy = StoreConfig::CachePolicy::kDrop;
  Rig rig = MakeRig(4 << 20, 64 << 20, 4, config);
  ObjectStore& store = *rig.store;
  ASSERT_TRUE(Put(store, "c", Bytes(1, 3 << 20), Durability::kCache).ok());
  ASSERT_TRUE(Put(store, "r", Bytes(2, 3 << 20)).ok());
  EXPECT_EQ(store.Head("ns", "c").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(store.Stats().spills, 0u);
}

// put / get / delete at random under every kind of fault; the model says what must be there.
TEST(NvmeStore, RandomizedFaultsAgainstAModel) {
  const std::uint64_t seed = std::random_device{}();
  std::printf("RandomizedFaultsAgainstAModel seed %llu\n", static_cast<unsigned long long>(seed));
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  Rig rig = MakeRig(6 << 20, 48 << 20, seed);
  ObjectStore& store = *rig.store;
  for (FaultKind k : {FaultKind::kEio, FaultKind::kEnospc, FaultKind::kShortRead,
                      FaultKind::kShortWrite, FaultKind::kFlipBitRead, FaultKind::kFlipBitWrite}) {
    rig.faults->AddRule({.kind = k, .one_in = 40});
  }
  rig.faults->AddRule({.kind = FaultKind::kLatency, .one_in = 50, .latency_us = 200});
  store.Start();
  struct Expect {
    std::uint64_t seed;
    std::size_t size;
    Durability durability;
  };
  std::map<std::string, Expect> model;  // acknowledged puts
  int wrong = 0, lost = 0, gets_ok = 0, puts_ok = 0;
  for (int op = 0; op < 1500; ++op) {
    std::string key = "k" + std::to_string(rng() % 48);
    int what = static_cast<int>(rng() % 10);
    if (what < 5) {
      std::size_t size = 1 + rng() % (600 << 10);
      std::uint64_t s = rng();
      Durability d = rng() % 4 == 0 ? Durability::kCache : Durability::kRetained;
      Status st = Put(store, key, Bytes(s, size), d);
      if (st.ok()) {
        model[key] = {s, size, d};
        ++puts_ok;
      } else {
        ASSERT_TRUE(st.code() == StatusCode::kResourceExhausted ||
                    st.code() == StatusCode::kUnavailable)
            << st.ToString();
      }
    } else if (what < 9) {
      std::string out;
      auto meta = store.ReadCopy("ns", key, &out);
      auto it = model.find(key);
      if (meta.ok()) {
        ++gets_ok;
        if (it == model.end() || out != Bytes(it->second.seed, it->second.size)) ++wrong;
      } else if (meta.status().code() == StatusCode::kNotFound) {
        if (it != model.end()) {
          if (it->second.durability == Durability::kRetained) ++lost;
          model.erase(it);  // a dropped cache object
        }
      } else {
        // A transient failure (I/O error, checksum, no room to bring it back): allowed, but the
        // object must still be there once the faults stop.
        ASSERT_TRUE(meta.status().code() == StatusCode::kIoError ||
                    meta.status().code() == StatusCode::kDataLoss ||
                    meta.status().code() == StatusCode::kResourceExhausted ||
                    meta.status().code() == StatusCode::kUnavailable)
            << meta.status().ToString();
      }
    } else {
      Status st = store.Delete("ns", key);
      if (st.ok()) model.erase(key);
    }
  }
  rig.faults->ClearRules();
  store.Stop();
  ASSERT_EQ(wrong, 0) << "wrong bytes returned";
  ASSERT_EQ(lost, 0) << "acknowledged retained objects lost";
  // With the faults gone, every acknowledged retained object reads back exactly.
  std::this_thread::sleep_for(std::chrono::milliseconds(30));  // past the degraded pause
  for (const auto& [key, e] : model) {
    std::string out;
    auto meta = store.ReadCopy("ns", key, &out);
    if (e.durability == Durability::kCache && meta.status().code() == StatusCode::kNotFound) {
      continue;
    }
    ASSERT_TRUE(meta.ok()) << key << ": " << meta.status().ToString();
    EXPECT_TRUE(out == Bytes(e.seed, e.size)) << key;
  }
  EXPECT_GT(rig.faults->injected(), 20u);
  EXPECT_GT(puts_ok, 100);
  EXPECT_GT(gets_ok, 100);
  std::printf("faults injected %llu, spills %llu, nvme reads %llu, read failures %llu\n",
              static_cast<unsigned long long>(rig.faults->injected()),
              static_cast<unsigned long long>(store.Stats().spills),
              static_cast<unsigned long long>(store.Stats().nvme_reads),
              static_cast<unsigned long long>(store.Stats().nvme_read_failures));
}

}  // namespace
}  // namespace tierpool
