// Memory pressure and dead clients against a real tierpoold.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <thread>

#include "tests/e2e/server_process.h"

namespace tierpool::testing {
namespace {

const TierInfo* Find(const ServerStats& s, TierKind k) {
  for (const auto& t : s.tiers) {
    if (t.tier == k) return &t;
  }
  return nullptr;
}

TEST(Pressure, HbmAboveHighWatermarkIsDemotedToDram) {
  ServerProcess server({"--dram", "64M", "--hbm", "4M", "--hbm-high-watermark", "0.5",
                        "--hbm-low-watermark", "0.25"});
  ASSERT_TRUE(server.started());
  auto client = server.Connect();
  ASSERT_TRUE(client.ok());
  PutOptions o;
  o.tier = TierKind::kHbm;
  for (int i = 0; i < 7; ++i) {
    std::string b = Pattern(static_cast<std::uint64_t>(i), 512 << 10);
    ASSERT_TRUE((*client)->Put("t" + std::to_string(i), b.data(), b.size(), o).ok());
  }
  // 3.5 MiB in a 4 MiB hbm is above the 2 MiB high watermark. Demotion may start in the middle
  // of the burst, so how far it went varies; it must end at or under the high watermark.
  ASSERT_TRUE(server.WaitFor([](const ServerStats& s) {
    const TierInfo* h = Find(s, TierKind::kHbm);
    return h && h->used_bytes <= (2u << 20) && s.counter("demotions") >= 3;
  })) << "hbm was not demoted under its watermark";
  int in_dram = 0;
  for (int i = 0; i < 7; ++i) {
    std::string want = Pattern(static_cast<std::uint64_t>(i), 512 << 10);
    std::string out(want.size(), '\0');
    ASSERT_TRUE((*client)->Get("t" + std::to_string(i), out.data(), out.size()).ok());
    EXPECT_TRUE(out == want) << i;
    in_dram += (*client)->Stat("t" + std::to_string(i))->tier == TierKind::kDram;
  }
  EXPECT_GE(in_dram, 3);
  EXPECT_EQ((*client)->Stat("t0")->tier, TierKind::kDram);  // least recently used went first
  // The most recently written ones stayed in hbm.
  EXPECT_EQ((*client)->Stat("t6")->tier, TierKind::kHbm);
}

TEST(Pressure, RetainedPutThatCannotFitIsResourceExhausted) {
  ServerProcess server({"--dram", "8M", "--hbm", "0"});
  ASSERT_TRUE(server.started());
  auto client = server.Connect();
  ASSERT_TRUE(client.ok());
  std::string b = Pattern(9, 3 << 20);
  ASSERT_TRUE((*client)->Put("r1", b.data(), b.size()).ok());
  ASSERT_TRUE((*client)->Put("r2", b.data(), b.size()).ok());
  Status s = (*client)->Put("r3", b.data(), b.size());
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted) << s.ToString();
  EXPECT_NE(s.message().find("no room"), std::string::npos) << s.message();
  // Cache puts do not evict retained objects either.
  PutOptions cache;
  cache.durability = Durability::kCache;
  EXPECT_EQ((*client)->Put("c1", b.data(), b.size(), cache).code(), StatusCode::kResourceExhausted);
  for (const char* k : {"r1", "r2"}) {
    auto got = (*client)->GetBytes(k);
    ASSERT_TRUE(got.ok());
    EXPECT_EQ(std::memcmp(got->data(), b.data(), b.size()), 0);
  }
  // The server keeps serving.
  EXPECT_TRUE((*client)->Put("small", "x", 1).ok());
}

TEST(Pressure, CacheObjectsMakeRoomLeastRecentlyUsedFirst) {
  ServerProcess server({"--dram", "8M", "--hbm", "0"});
  ASSERT_TRUE(server.started());
  auto client = server.Connect();
  ASSERT_TRUE(client.ok());
  PutOptions cache;
  cache.durability = Durability::kCache;
  std::string b = Pattern(3, 2 << 20);
  for (int i = 0; i < 10; ++i) {
    ASSERT_TRUE((*client)->Put("c" + std::to_string(i), b.data(), b.size(), cache).ok()) << i;
  }
  auto stats = (*client)->ServerStat();
  ASSERT_TRUE(stats.ok());
  EXPECT_GE(stats->counter("evictions"), 6u);
  EXPECT_TRUE((*client)->Stat("c9").ok());
  EXPECT_EQ((*client)->Stat("c0").status().code(), StatusCode::kNotFound);
}

// A client that dies in the middle of a put (and one that dies holding a view) leaves nothing
// reserved or pinned.
TEST(Pressure, KilledClientLeavesNothingReservedOrPinned) {
  ServerProcess server({"--dram", "32M", "--hbm", "0"});
  ASSERT_TRUE(server.started());
  {
    auto client = server.Connect();
    ASSERT_TRUE(client.ok());
    ASSERT_TRUE((*client)->Put("pinned-by-child", "abc", 3).ok());
  }
  pid_t child = ::fork();
  if (child == 0) {
    auto client = Client::Connect(server.options());
    if (!client.ok()) ::_exit(3);
    auto view = (*client)->GetView("pinned-by-child");
    auto r = (*client)->Reserve("half-written", 24 << 20);
    if (!view.ok() || !r.ok()) ::_exit(4);
    std::memset(r->data(), 0x5a, 12 << 20);
    ::raise(SIGKILL);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFSIGNALED(status)) << "child exited with " << WEXITSTATUS(status);
  ASSERT_TRUE(server.WaitFor([](const ServerStats& s) {
    return s.counter("reservations_open") == 0 && s.counter("leases_open") == 0;
  })) << "the dead client's reservation or pin is still held";
  auto client = server.Connect();
  ASSERT_TRUE(client.ok());
  EXPECT_EQ((*client)->Stat("half-written").status().code(), StatusCode::kNotFound);
  std::string b(24 << 20, 'y');
  EXPECT_TRUE((*client)->Put("room-is-back", b.data(), b.size()).ok());
  EXPECT_EQ((*client)->Stat("pinned-by-child")->pins, 0u);
}

// A get that must wait (an object only on nvme, wanted in hbm) runs on a worker thread; its
// client is killed while it waits. The connection closes before the pin is made, and the pin
// made after must go with it: before the fix, the server released the connection's holdings
// when its socket closed and the worker then pinned for it, a pin nobody could release.
TEST(Pressure, ClientKilledWhileItsGetWaitsOnAWorkerLeavesNothingPinned) {
  const std::string dir =
      ::testing::TempDir() + "/tierpool-killed-wait-" + std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  ServerProcess server(
      {"--dram", "32M", "--hbm", "16M", "--nvme-path", dir, "--nvme-bytes", "512M"});
  ASSERT_TRUE(server.started());
  auto client = server.Connect();
  ASSERT_TRUE(client.ok());
  const std::size_t size = 8 << 20;
  int next = 0;
  // A key whose only copy is on nvme: puts push the oldest objects there.
  auto on_nvme = [&]() -> std::string {
    for (int tries = 0; tries < 64; ++tries) {
      for (int i = 0; i < next; ++i) {
        auto m = (*client)->Stat("big" + std::to_string(i));
        if (m.ok() && m->tier == TierKind::kNvme) return "big" + std::to_string(i);
      }
      const std::string b = Pattern(static_cast<std::uint64_t>(next), size);
      if (!(*client)->Put("big" + std::to_string(next++), b.data(), b.size()).ok()) break;
    }
    return "";
  };
  for (int attempt = 0; attempt < 12; ++attempt) {
    const std::string key = on_nvme();
    ASSERT_FALSE(key.empty());
    pid_t child = ::fork();
    if (child == 0) {
      auto c = Client::Connect(server.options());
      if (!c.ok()) ::_exit(3);
      std::thread([&] {
        GetViewOptions o;
        o.tier = TierKind::kHbm;
        auto view = (*c)->GetView(key, o);
        ::_exit(view.ok() ? 5 : 6);  // the kill came too late (or the get failed)
      }).detach();
      // Killed 0.2 to 2.4 ms into the wait: the nvme read of 8 MiB takes longer here.
      std::this_thread::sleep_for(std::chrono::microseconds(200 + 200 * attempt));
      ::raise(SIGKILL);
    }
    int status = 0;
    ASSERT_EQ(::waitpid(child, &status, 0), child);
    ASSERT_TRUE(server.WaitFor([](const ServerStats& s) {
      return s.counter("leases_open") == 0 && s.counter("reservations_open") == 0;
    })) << "attempt "
        << attempt << ": the killed client's pin is still held";
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace tierpool::testing
