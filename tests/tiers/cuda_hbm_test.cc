// The hbm tier in a GPU's memory (label "gpu"). Built in every configuration: without CUDA or
// without a device, the fallback is checked and every test that needs a device skips.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <future>
#include <mutex>
#include <random>
#include <vector>

#include <csignal>
#include <cstdlib>

#include "common/checksum.h"
#include "store/mover.h"
#include "store/server_config.h"
#include "tests/e2e/server_process.h"
#include "tiers/dram_tier.h"
#include "tiers/hbm_tier.h"

namespace tierpool {
namespace {

bool HaveDevice() { return MakeCudaHbmBackend(0).ok(); }

#define REQUIRE_DEVICE()                                                          \
  do {                                                                            \
    if (!HaveDevice()) GTEST_SKIP() << MakeCudaHbmBackend(0).status().ToString(); \
  } while (0)

std::vector<std::byte> RandomBytes(std::size_t n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::byte> v(n);
  for (std::size_t i = 0; i < n; i += 8) {
    const std::uint64_t x = rng();
    std::memcpy(v.data() + i, &x, std::min<std::size_t>(8, n - i));
  }
  return v;
}

Status Wait(const std::function<void(IoCompletion)>& start) {
  std::promise<Status> p;
  auto f = p.get_future();
  start([&p](Status s) { p.set_value(std::move(s)); });
  return f.get();
}

struct DeviceTiers {
  std::unique_ptr<DramTier> dram;
  std::unique_ptr<HbmTier> hbm;
};

DeviceTiers MakeTiers(
    std::uint64_t hbm_bytes, std::uint64_t dram_bytes, bool device_checks = true,
    std::uint64_t completion_group_bytes = CudaHbmOptions{}.completion_group_bytes) {
  DeviceTiers t;
  auto dram = DramTier::Create({.capacity = dram_bytes, .first_arena_id = 1});
  EXPECT_TRUE(dram.ok()) << dram.status().ToString();
  t.dram = std::move(dram).value();
  auto backend = MakeCudaHbmBackend(
      0, {.device_checks = device_checks, .completion_group_bytes = completion_group_bytes});
  EXPECT_TRUE(backend.ok());
  auto hbm = HbmTier::Create({.capacity = hbm_bytes, .arena_id = 100}, std::move(backend).value());
  EXPECT_TRUE(hbm.ok()) << hbm.status().ToString();
  t.hbm = std::move(hbm).value();
  for (const auto& a : t.dram->Arenas()) {
    EXPECT_TRUE(t.hbm->RegisterHostMemory(t.dram->HostAddress({a.id, 0, a.size}), a.size).ok());
  }
  return t;
}

TEST(CudaHbm, WithoutADeviceTheServerFallsBackToTheHostStandIn) {
  ServerConfig config;
  config.dram.capacity = 16 << 20;
  config.hbm.capacity = 8 << 20;
  config.hbm_device = 0;
  auto store = BuildStore(config);
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  const StoreStats stats = (*store)->Stats();
  std::string backend;
  for (const auto& t : stats.tiers) {
    if (t.tier.kind == TierKind::kHbm) backend = t.tier.backend;
  }
  EXPECT_EQ(backend, HaveDevice() ? "cuda:0" : "host-pinned");
  if (!HaveDevice()) {
    EXPECT_EQ(MakeCudaHbmBackend(0).status().code(), StatusCode::kUnavailable);
  }
  EXPECT_EQ(MakeCudaHbmBackend(-1).status().code(), StatusCode::kUnavailable);
}

TEST(CudaHbm, DeviceRegionsAreNotHostMemoryAndCarryAnIpcHandle) {
  REQUIRE_DEVICE();
  DeviceTiers t = MakeTiers(8 << 20, 16 << 20);
  auto e = t.hbm->Allocate(4096, {});
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(t.hbm->HostAddress(*e), nullptr);
  const auto arenas = t.hbm->Arenas();
  ASSERT_EQ(arenas.size(), 1u);
  EXPECT_EQ(arenas[0].fd, -1);
  EXPECT_EQ(arenas[0].device, 0);
  EXPECT_EQ(arenas[0].ipc_handle.size(), 64u);
  EXPECT_EQ(t.hbm->Stats().backend, "cuda:0");
}

// Both ways of checking: on the device (where a copy allows) and on the host.
class CudaHbmChecks : public ::testing::TestWithParam<bool> {};

TEST_P(CudaHbmChecks, EverySizeRoundTripsThroughTheCopyEnginesChecked) {
  REQUIRE_DEVICE();
  DeviceTiers t = MakeTiers(96 << 20, 192 << 20, GetParam());
  for (std::uint64_t size :
       {1ull, 240ull, 241ull, 4095ull, 4096ull, (1ull << 20) + 3, 64ull << 20}) {
    SCOPED_TRACE(size);
    auto src = t.dram->Allocate(size, {});
    auto back = t.dram->Allocate(size, {});
    auto dev = t.hbm->Allocate(size, {});
    ASSERT_TRUE(src.ok() && back.ok() && dev.ok());
    const auto bytes = RandomBytes(size, size);
    std::memcpy(t.dram->HostAddress(*src), bytes.data(), size);
    std::memset(t.dram->HostAddress(*back), 0, size);
    const RecordInfo info{1, 2, size, Xxh3(bytes.data(), size)};
    ASSERT_TRUE(Wait([&](IoCompletion d) {
                  t.hbm->Write(*dev, info, t.dram->HostAddress(*src), std::move(d));
                }).ok());
    ASSERT_TRUE(Wait([&](IoCompletion d) {
                  t.hbm->Read(*dev, info, t.dram->HostAddress(*back), std::move(d));
                }).ok());
    EXPECT_EQ(std::memcmp(t.dram->HostAddress(*back), bytes.data(), size), 0);
    ASSERT_TRUE(t.dram->Free(*src).ok() && t.dram->Free(*back).ok() && t.hbm->Free(*dev).ok());
  }
  const TierIoCounters io = t.hbm->io_counters();
  EXPECT_EQ(io.writes, 7u);
  EXPECT_EQ(io.reads, 7u);
  EXPECT_EQ(io.failures, 0u);
}

TEST_P(CudaHbmChecks, BytesThatDoNotMatchTheirChecksumFailEitherWay) {
  REQUIRE_DEVICE();
  // 16 MiB: large enough to be checked on the device when the parameter says so.
  DeviceTiers t = MakeTiers(32 << 20, 64 << 20, GetParam());
  const std::uint64_t size = 16 << 20;
  auto host = t.dram->Allocate(size, {});
  auto dev = t.hbm->Allocate(size, {});
  ASSERT_TRUE(host.ok() && dev.ok());
  const auto bytes = RandomBytes(size, 7);
  std::memcpy(t.dram->HostAddress(*host), bytes.data(), size);
  const std::uint64_t sum = Xxh3(bytes.data(), size);
  // A source that is not what its checksum says: the write fails, whatever landed on the device.
  Status w = Wait([&](IoCompletion d) {
    t.hbm->Write(*dev, {1, 2, size, sum ^ 1}, t.dram->HostAddress(*host), std::move(d));
  });
  EXPECT_EQ(w.code(), StatusCode::kDataLoss) << w.ToString();
  // Good bytes on the device, read back against a checksum they do not match: DATA_LOSS.
  ASSERT_TRUE(Wait([&](IoCompletion d) {
                t.hbm->Write(*dev, {1, 2, size, sum}, t.dram->HostAddress(*host), std::move(d));
              }).ok());
  Status r = Wait([&](IoCompletion d) {
    t.hbm->Read(*dev, {1, 2, size, sum + 1}, t.dram->HostAddress(*host), std::move(d));
  });
  EXPECT_EQ(r.code(), StatusCode::kDataLoss) << r.ToString();
  // An extent outside the region is refused before anything is copied.
  Status outside = Wait([&](IoCompletion d) {
    t.hbm->Write({100, 32 << 20, 4096}, {1, 2, 4096, 0}, t.dram->HostAddress(*host), std::move(d));
  });
  EXPECT_EQ(outside.code(), StatusCode::kInternal);
}

// Many moves each way at once through the mover, as the store issues them: every byte checked,
// the in-flight bound kept.
TEST_P(CudaHbmChecks, MovesUnderLoadThroughTheMoverKeepEveryByte) {
  REQUIRE_DEVICE();
  DeviceTiers t = MakeTiers(512 << 20, 1536 << 20, GetParam());
  Mover mover({.max_inflight_bytes_per_link = 32 << 20});
  constexpr int kObjects = 96;
  std::mt19937_64 rng(42);
  struct Obj {
    Extent host, dev, back;
    std::vector<std::byte> bytes;
    RecordInfo info;
  };
  std::vector<Obj> objs(kObjects);
  for (int i = 0; i < kObjects; ++i) {
    // Mostly small, every eighth one large enough for a device-side check.
    const std::uint64_t size =
        i % 8 == 7 ? (16 << 20) + rng() % (4 << 20) : 4096 + rng() % (3 << 20);
    Obj& o = objs[i];
    o.bytes = RandomBytes(size, 1000 + i);
    o.info = {static_cast<std::uint64_t>(i), static_cast<std::uint64_t>(i), size,
              Xxh3(o.bytes.data(), size)};
    o.host = *t.dram->Allocate(size, {});
    o.back = *t.dram->Allocate(size, {});
    o.dev = *t.hbm->Allocate(size, {});
    std::memcpy(t.dram->HostAddress(o.host), o.bytes.data(), size);
  }
  auto run = [&](bool up) {
    std::atomic<int> failed{0};
    for (Obj& o : objs) {
      MoveRequest r;
      r.from = up ? static_cast<Tier*>(t.dram.get()) : t.hbm.get();
      r.src = up ? o.host : o.dev;
      r.to = up ? static_cast<Tier*>(t.hbm.get()) : t.dram.get();
      r.dst = up ? o.dev : o.back;
      r.info = o.info;
      r.done = [&failed](const MoveResult& m) {
        if (!m.status.ok()) failed.fetch_add(1);
      };
      mover.Submit(std::move(r));
    }
    mover.Drain();
    return failed.load();
  };
  EXPECT_EQ(run(true), 0);
  EXPECT_EQ(run(false), 0);
  for (const Obj& o : objs) {
    EXPECT_EQ(std::memcmp(t.dram->HostAddress(o.back), o.bytes.data(), o.info.size), 0);
  }
  mover.VisitLinks([](const LinkStats& l) {
    EXPECT_EQ(l.completed, static_cast<std::uint64_t>(kObjects));
    EXPECT_EQ(l.failed, 0u);
  });
  mover.Stop();
}

// Small copies issued back to back share completion events (tiers/cuda_copy_engine.h): whatever
// the group's size, every copy is answered once, only after its bytes have landed, and a lone
// copy in a group that never fills is answered without waiting for more.
TEST(CudaHbm, CopiesThatShareACompletionEventAreEachAnsweredOnceTheyHaveLanded) {
  REQUIRE_DEVICE();
  for (std::uint64_t group : {0ull, 64ull << 10, 1ull << 30}) {
    SCOPED_TRACE(group);
    DeviceTiers t = MakeTiers(64 << 20, 160 << 20, true, group);
    constexpr int kCopies = 1500;
    std::mt19937_64 rng(group + 1);
    std::vector<Extent> host(kCopies), back(kCopies), dev(kCopies);
    std::vector<RecordInfo> info(kCopies);
    for (int i = 0; i < kCopies; ++i) {
      const std::uint64_t size = 1 + rng() % (40 << 10);
      host[i] = *t.dram->Allocate(size, {});
      back[i] = *t.dram->Allocate(size, {});
      dev[i] = *t.hbm->Allocate(size, {});
      const auto bytes = RandomBytes(size, group + i);
      std::memcpy(t.dram->HostAddress(host[i]), bytes.data(), size);
      std::memset(t.dram->HostAddress(back[i]), 0, size);
      info[i] = {static_cast<std::uint64_t>(i), 1, size, Xxh3(bytes.data(), size)};
    }
    // Each way: every copy issued at once from this thread, then waited for.
    for (bool up : {true, false}) {
      std::vector<std::atomic<int>> answered(kCopies);
      std::atomic<int> failed{0}, left{kCopies};
      std::promise<void> all;
      for (int i = 0; i < kCopies; ++i) {
        auto done = [&, i](Status s) {
          if (!s.ok()) failed.fetch_add(1);
          answered[i].fetch_add(1);
          if (left.fetch_sub(1) == 1) all.set_value();
        };
        if (up) {
          t.hbm->Write(dev[i], info[i], t.dram->HostAddress(host[i]), done);
        } else {
          t.hbm->Read(dev[i], info[i], t.dram->HostAddress(back[i]), done);
        }
      }
      all.get_future().wait();
      EXPECT_EQ(failed.load(), 0);
      for (int i = 0; i < kCopies; ++i) EXPECT_EQ(answered[i].load(), 1) << i;
    }
    for (int i = 0; i < kCopies; ++i) {
      ASSERT_EQ(
          std::memcmp(t.dram->HostAddress(back[i]), t.dram->HostAddress(host[i]), info[i].size), 0)
          << i;
    }
    // One copy alone, its group far from full: answered once it has landed.
    std::memset(t.dram->HostAddress(back[0]), 0, info[0].size);
    ASSERT_TRUE(Wait([&](IoCompletion d) {
                  t.hbm->Read(dev[0], info[0], t.dram->HostAddress(back[0]), std::move(d));
                }).ok());
    EXPECT_EQ(std::memcmp(t.dram->HostAddress(back[0]), t.dram->HostAddress(host[0]), info[0].size),
              0);
  }
}

INSTANTIATE_TEST_SUITE_P(OnTheDeviceOrTheHost, CudaHbmChecks, ::testing::Bool(),
                         [](const auto& p) { return p.param ? "Device" : "Host"; });

// A started store over GPU 0's memory as hbm: 64 MiB of dram, 8 MiB of hbm.
Result<std::unique_ptr<ObjectStore>> DeviceStore() {
  ServerConfig config;
  config.dram.capacity = 64 << 20;
  config.hbm.capacity = 8 << 20;
  config.hbm_device = 0;
  auto store = BuildStore(config);
  if (store.ok()) (*store)->Start();
  return store;
}

std::uint64_t LinkBytes(const StoreStats& s, TierKind from, TierKind to) {
  for (const auto& l : s.links) {
    if (l.from == from && l.to == to) return l.bytes;
  }
  return 0;
}

std::uint64_t FailedMoves(const StoreStats& s) {
  std::uint64_t failed = 0;
  for (const auto& l : s.links) failed += l.failed;
  return failed;
}

// The store over a device hbm: puts land in dram, promotions copy up on the device's engines
// (the clean dram copy stays), a get that wants hbm makes sure of the device copy and reads the
// mapped one, and room in hbm is made by dropping clean copies.
TEST(CudaHbm, TheStoreMovesObjectsOntoTheDeviceAndReadsThemBack) {
  REQUIRE_DEVICE();
  auto built = DeviceStore();
  ASSERT_TRUE(built.ok()) << built.status().ToString();
  ObjectStore& store = **built;
  constexpr std::uint64_t kOwner = 7;
  const auto a = RandomBytes(5 << 20, 1), b = RandomBytes(5 << 20, 2);
  for (const auto& [key, bytes] : {std::pair{"a", &a}, std::pair{"b", &b}}) {
    ASSERT_TRUE(
        store.PutCopy({.ns = "ns", .key = key, .size = bytes->size()}, bytes->data(), kOwner).ok());
    EXPECT_EQ(store.Head("ns", key)->tier, TierKind::kDram);
  }
  ASSERT_TRUE(store.Promote("ns", "a", TierKind::kHbm).ok());
  EXPECT_EQ(store.Head("ns", "a")->tier, TierKind::kHbm);
  auto pinned = store.Pin("ns", "a", kOwner, {.want = TierKind::kHbm});
  ASSERT_TRUE(pinned.ok()) << pinned.status().ToString();
  EXPECT_EQ(pinned->meta.tier, TierKind::kDram) << "the client reads a mapped copy";
  std::string out;
  ASSERT_TRUE(store.CopyOut(*pinned, &out).ok());
  EXPECT_EQ(std::memcmp(out.data(), a.data(), a.size()), 0);
  ASSERT_TRUE(store.Release(pinned->lease_id, kOwner).ok());
  // b wants hbm too: a's copy there is clean, so it is dropped, and b is copied up on demand.
  auto pinned_b = store.Pin("ns", "b", kOwner, {.want = TierKind::kHbm});
  ASSERT_TRUE(pinned_b.ok()) << pinned_b.status().ToString();
  ASSERT_TRUE(store.Release(pinned_b->lease_id, kOwner).ok());
  auto copies = store.CopiesOf("ns", "b");
  ASSERT_TRUE(copies.ok());
  EXPECT_EQ(copies->front(), TierKind::kHbm);
  const StoreStats s = store.Stats();
  EXPECT_EQ(s.clean_drops, 1u);
  EXPECT_EQ(FailedMoves(s), 0u);
  EXPECT_EQ(LinkBytes(s, TierKind::kDram, TierKind::kHbm), 10u << 20);
  ASSERT_TRUE(store.ReadCopy("ns", "a", &out).ok());
  EXPECT_EQ(std::memcmp(out.data(), a.data(), a.size()), 0);
  store.Stop();
}

// A put that wants device hbm lands in dram (the memory clients write), is copied up as it
// commits and its dram copy freed on arrival; moving it down is a real copy off the device.
// Without room in hbm now, the put stays in dram.
TEST(CudaHbm, APutThatWantsDeviceHbmEndsThereAndMovesDownOffTheDevice) {
  REQUIRE_DEVICE();
  auto built = DeviceStore();
  ASSERT_TRUE(built.ok()) << built.status().ToString();
  ObjectStore& store = **built;
  constexpr std::uint64_t kOwner = 7;
  const auto a = RandomBytes(5 << 20, 1), b = RandomBytes(5 << 20, 2);
  auto put = [&](const char* key, const std::vector<std::byte>& bytes) {
    return store.PutCopy(
        {.ns = "ns", .key = key, .size = bytes.size(), .tier_hint = TierKind::kHbm}, bytes.data(),
        kOwner);
  };
  ASSERT_TRUE(put("a", a).ok());
  store.Quiesce();
  EXPECT_EQ(*store.CopiesOf("ns", "a"), std::vector<TierKind>{TierKind::kHbm});
  ASSERT_TRUE(put("b", b).ok());  // a holds 5 of hbm's 8 MiB: no room now
  store.Quiesce();
  EXPECT_EQ(*store.CopiesOf("ns", "b"), std::vector<TierKind>{TierKind::kDram});
  // Reading a brings its bytes off the device into dram, checked on the way.
  std::string out;
  ASSERT_TRUE(store.ReadCopy("ns", "a", &out).ok());
  EXPECT_EQ(std::memcmp(out.data(), a.data(), a.size()), 0);
  const StoreStats s = store.Stats();
  EXPECT_EQ(FailedMoves(s), 0u);
  EXPECT_EQ(LinkBytes(s, TierKind::kHbm, TierKind::kDram), a.size());
  store.Stop();
}

// --- through a real server, from client processes ---------------------------------------------

#ifdef TIERPOOL_HAVE_CUDA
}  // namespace
}  // namespace tierpool
#include <cuda_runtime_api.h>

#include "tiers/cuda_xxh3.h"
namespace tierpool {
namespace {

// The GPU's XXH3 against the host's, for every length from 241 to 4 KiB and around the 1 KiB
// blocks and stripes of larger inputs, up to 64 MiB and an odd tail.
TEST(CudaHbm, TheDevicesXxh3IsTheHosts) {
  REQUIRE_DEVICE();
  const std::size_t max = (64 << 20) + 7;
  const auto bytes = RandomBytes(max, 99);
  void* dev = nullptr;
  ASSERT_EQ(cudaMalloc(&dev, max), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(dev, bytes.data(), max, cudaMemcpyHostToDevice), cudaSuccess);
  std::vector<std::uint64_t> sizes;
  for (std::uint64_t n = kDeviceXxh3MinBytes; n <= 4096; ++n) sizes.push_back(n);
  for (std::uint64_t k : {5ull, 64ull, 1000ull, 65536ull}) {
    for (std::int64_t d : {-65, -64, -63, -1, 0, 1, 63, 64, 65}) sizes.push_back(k * 1024 + d);
  }
  sizes.push_back(max);
  void* scratch = nullptr;
  ASSERT_EQ(cudaMalloc(&scratch, DeviceXxh3ScratchBytes(max)), cudaSuccess);
  int wrong = 0;
  for (std::uint64_t n : sizes) {
    ASSERT_EQ(EnqueueDeviceXxh3(dev, n, scratch, nullptr), cudaSuccess);
    std::uint64_t got = 0;
    ASSERT_EQ(cudaMemcpy(&got, scratch, 8, cudaMemcpyDeviceToHost), cudaSuccess);
    if (got != Xxh3(bytes.data(), n) && ++wrong <= 5) ADD_FAILURE() << "length " << n;
  }
  EXPECT_EQ(wrong, 0) << "of " << sizes.size() << " lengths";
  // Too short or unaligned: refused, never a wrong answer.
  EXPECT_NE(EnqueueDeviceXxh3(dev, kDeviceXxh3MinBytes - 1, scratch, nullptr), cudaSuccess);
  EXPECT_NE(EnqueueDeviceXxh3(static_cast<char*>(dev) + 4, 4096, scratch, nullptr), cudaSuccess);
  (void)cudaGetLastError();
  (void)cudaFree(scratch);
  (void)cudaFree(dev);
}

std::vector<std::string> DeviceServerFlags() {
  return {"--hbm-device", "0", "--hbm", "64M", "--dram", "256M"};
}

// A device view: the copy in the server's GPU memory, opened by IPC in this (another) process,
// read by the GPU in place; it holds the copy where it is until released.
TEST(CudaHbm, AClientReadsTheServersDeviceCopyInPlaceThroughIpc) {
  REQUIRE_DEVICE();
  testing::ServerProcess server(DeviceServerFlags());
  ASSERT_TRUE(server.started());
  auto client = server.Connect();
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  const std::string bytes = testing::Pattern(3, (3 << 20) + 17);
  ASSERT_TRUE((*client)->Put("t", bytes.data(), bytes.size()).ok());
  ASSERT_TRUE((*client)->Promote("t", TierKind::kHbm).ok());
  {
    auto view = (*client)->GetView("t", {.tier = TierKind::kHbm, .device = true});
    ASSERT_TRUE(view.ok()) << view.status().ToString();
    EXPECT_EQ(view->meta().tier, TierKind::kHbm);
    EXPECT_EQ(view->data(), nullptr);
    ASSERT_NE(view->device_data(), nullptr);
    EXPECT_EQ(view->device(), 0);
    EXPECT_TRUE(view->Verify().ok());
    std::string back(bytes.size(), '\0');
    ASSERT_EQ(cudaMemcpy(back.data(), view->device_data(), back.size(), cudaMemcpyDeviceToHost),
              cudaSuccess);
    EXPECT_TRUE(back == bytes);
    // A host view of the same object still works beside it (the clean dram copy).
    auto host = (*client)->GetView("t");
    ASSERT_TRUE(host.ok());
    EXPECT_EQ(std::memcmp(host->data(), bytes.data(), bytes.size()), 0);
  }
  EXPECT_TRUE(server.WaitFor([](const ServerStats& s) { return s.counter("leases_open") == 0; }));
  // Without `device`, a get that wants hbm makes sure of the device copy and maps a host one.
  auto view = (*client)->GetView("t", {.tier = TierKind::kHbm});
  ASSERT_TRUE(view.ok());
  EXPECT_EQ(view->device_data(), nullptr);
  EXPECT_TRUE(view->Verify().ok());
}

// A device reservation: the client writes a put into the server's GPU memory itself (here by
// cudaMemcpy, where a kernel's output would land), commits it, and hbm holds the only copy;
// reading it on the host brings it off the device, checked.
TEST(CudaHbm, AClientWritesAPutIntoDeviceMemoryItself) {
  REQUIRE_DEVICE();
  testing::ServerProcess server(DeviceServerFlags());
  ASSERT_TRUE(server.started());
  auto client = server.Connect();
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  const std::string bytes = testing::Pattern(5, (2 << 20) + 5);
  {
    auto r = (*client)->Reserve("d", bytes.size(), {.tier = TierKind::kHbm, .device = true});
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(r->tier(), TierKind::kHbm);
    EXPECT_EQ(r->data(), nullptr);
    ASSERT_NE(r->device_data(), nullptr);
    EXPECT_EQ(r->device(), 0);
    ASSERT_EQ(cudaMemcpy(r->device_data(), bytes.data(), bytes.size(), cudaMemcpyHostToDevice),
              cudaSuccess);
    ASSERT_TRUE(r->Commit().ok());
  }
  EXPECT_EQ((*client)->Stat("d")->tier, TierKind::kHbm);
  auto view = (*client)->GetView("d", {.tier = TierKind::kHbm, .device = true});
  ASSERT_TRUE(view.ok());
  ASSERT_NE(view->device_data(), nullptr);
  EXPECT_TRUE(view->Verify().ok());
  view->Release();
  // A device view of a copy that is only on the device made no host copy of it.
  auto stats = (*client)->ServerStat();
  ASSERT_TRUE(stats.ok());
  EXPECT_EQ(stats->counter("link_hbm_dram_bytes"), 0u);
  auto back = (*client)->GetBytes("d");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  ASSERT_EQ(back->size(), bytes.size());
  EXPECT_EQ(std::memcmp(back->data(), bytes.data(), bytes.size()), 0);
  // Reading it on the host copied it off the device once, and left the device copy in place.
  stats = (*client)->ServerStat();
  ASSERT_TRUE(stats.ok());
  EXPECT_EQ(stats->counter("link_hbm_dram_bytes"), bytes.size());
  view = (*client)->GetView("d", {.tier = TierKind::kHbm, .device = true});
  ASSERT_TRUE(view.ok());
  EXPECT_NE(view->device_data(), nullptr);
  view->Release();
  // An aborted device reservation gives its room back.
  {
    auto r = (*client)->Reserve("e", 1 << 20, {.tier = TierKind::kHbm, .device = true});
    ASSERT_TRUE(r.ok());
    EXPECT_TRUE(r->Abort().ok());
  }
  EXPECT_FALSE((*client)->Stat("e").ok());
  // Put (the bytes are the caller's host memory) ignores `device`: it lands in dram and is
  // copied up.
  ASSERT_TRUE((*client)
                  ->Put("f", bytes.data(), bytes.size(), {.tier = TierKind::kHbm, .device = true})
                  .ok());
  auto f = (*client)->GetBytes("f");
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(std::memcmp(f->data(), bytes.data(), bytes.size()), 0);
}

// Run by the test below in a process of its own: takes a device view and dies holding it.
TEST(CudaHbm, DiesHoldingADeviceView) {
  const char* socket = std::getenv("TIERPOOL_TEST_DEVICE_SOCKET");
  if (socket == nullptr) GTEST_SKIP() << "run by ADyingClientsDeviceViewIsReleased";
  ClientOptions options;
  options.socket_path = socket;
  auto client = Client::Connect(options);
  ASSERT_TRUE(client.ok());
  auto view = (*client)->GetView("t", {.tier = TierKind::kHbm, .device = true});
  ASSERT_TRUE(view.ok()) << view.status().ToString();
  ASSERT_NE(view->device_data(), nullptr);
  std::raise(SIGKILL);
}

TEST(CudaHbm, ADyingClientsDeviceViewIsReleasedAndTheObjectKept) {
  REQUIRE_DEVICE();
  testing::ServerProcess server(DeviceServerFlags());
  ASSERT_TRUE(server.started());
  auto client = server.Connect();
  ASSERT_TRUE(client.ok());
  const std::string bytes = testing::Pattern(4, 1 << 20);
  ASSERT_TRUE((*client)->Put("t", bytes.data(), bytes.size()).ok());
  ASSERT_TRUE((*client)->Promote("t", TierKind::kHbm).ok());
  int rc = 0;
  const std::string out = testing::RunShell(
      "TIERPOOL_TEST_DEVICE_SOCKET=" + server.socket() + " /proc/" + std::to_string(::getpid()) +
          "/exe --gtest_filter=CudaHbm.DiesHoldingADeviceView 2>&1",
      &rc);
  EXPECT_NE(rc, 0) << "the child was to die by SIGKILL: " << out;
  EXPECT_TRUE(server.alive());
  EXPECT_TRUE(server.WaitFor([](const ServerStats& s) { return s.counter("leases_open") == 0; }));
  auto view = (*client)->GetView("t", {.tier = TierKind::kHbm, .device = true});
  ASSERT_TRUE(view.ok()) << view.status().ToString();
  EXPECT_TRUE(view->Verify().ok());
}
#endif  // TIERPOOL_HAVE_CUDA

}  // namespace
}  // namespace tierpool
