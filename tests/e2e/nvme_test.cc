// A real tierpoold with a small dram tier and an nvme directory: it holds and returns far more
// than its DRAM, byte for byte.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <thread>

#include "tests/e2e/server_process.h"

namespace tierpool::testing {
namespace {

TEST(NvmeE2E, HoldsFourTimesDramAndReadsItAllBack) {
  std::string dir = ::testing::TempDir() + "/tierpool-nvme-" + std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  ServerProcess server({"--dram", "32M", "--hbm", "0", "--nvme-path", dir, "--nvme-bytes", "512M"});
  ASSERT_TRUE(server.started());
  auto client = server.Connect();
  ASSERT_TRUE(client.ok());
  // 128 MiB of retained tensors through a 32 MiB dram tier, while readers hammer the first ones.
  std::atomic<bool> stop{false};
  std::atomic<int> bad{0};
  ASSERT_TRUE((*client)->Put("hot", Pattern(999, 1 << 20).data(), 1 << 20).ok());
  std::thread reader([&] {
    auto c = server.Connect();
    if (!c.ok()) {
      ++bad;
      return;
    }
    std::string want = Pattern(999, 1 << 20), out(1 << 20, '\0');
    while (!stop) {
      auto r = (*c)->Get("hot", out.data(), out.size());
      if (!r.ok() || out != want) ++bad;
    }
  });
  for (int i = 0; i < 64; ++i) {
    std::string b = Pattern(static_cast<std::uint64_t>(i), 2 << 20);
    ASSERT_TRUE((*client)->Put("t" + std::to_string(i), b.data(), b.size()).ok()) << i;
  }
  stop = true;
  reader.join();
  EXPECT_EQ(bad.load(), 0);
  auto stats = (*client)->ServerStat();
  ASSERT_TRUE(stats.ok());
  EXPECT_GT(stats->counter("spills"), 40u);
  bool saw_nvme = false;
  for (const auto& t : stats->tiers) {
    if (t.tier == TierKind::kNvme) {
      saw_nvme = true;
      EXPECT_EQ(t.state, "ok");
      EXPECT_GT(t.object_count, 40u);
    }
  }
  EXPECT_TRUE(saw_nvme);
  for (int i = 0; i < 64; ++i) {
    auto got = (*client)->GetBytes("t" + std::to_string(i));
    ASSERT_TRUE(got.ok()) << i << ": " << got.status().ToString();
    std::string want = Pattern(static_cast<std::uint64_t>(i), 2 << 20);
    ASSERT_EQ(got->size(), want.size());
    EXPECT_EQ(std::memcmp(got->data(), want.data(), want.size()), 0) << i;
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace tierpool::testing
