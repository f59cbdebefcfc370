// A client that outlives its daemon: tierpoold restarts on the same socket (an upgrade, a crash,
// a systemd restart) while a client holds connections, a reservation and a view of the old
// process. The client must meet the new process with the new process's arenas and never write
// or read an extent the new one names through the old one's mappings (#76, item 7).
#include <gtest/gtest.h>
#include <signal.h>

#include <cstring>
#include <map>
#include <memory>
#include <string>

#include "tests/e2e/server_process.h"

namespace tierpool::testing {
namespace {

std::string AsString(const std::vector<std::byte>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size());
}

class Restart : public ::testing::TestWithParam<int> {};

// GetParam(): how the old daemon goes, SIGKILL (a crash) or SIGTERM (a clean stop).
TEST_P(Restart, AClientMeetsTheNewDaemonAndNeverMixesTheTwo) {
  const std::vector<std::string> flags = {"--dram", "64M", "--hbm", "16M"};
  auto old_server = std::make_unique<ServerProcess>(flags);
  ASSERT_TRUE(old_server->started());
  const std::string socket = old_server->socket();
  auto client = old_server->Connect();
  ASSERT_TRUE(client.ok());
  Client& c = **client;
  const std::string before = Pattern(1, 1 << 20);
  ASSERT_TRUE(c.Put("before", before.data(), before.size()).ok());
  auto pending = c.Reserve("pending", 1 << 20);  // held across the restart, never committed
  ASSERT_TRUE(pending.ok());
  auto view = c.GetView("before");
  ASSERT_TRUE(view.ok());

  ::kill(old_server->pid(), GetParam());
  ASSERT_TRUE(old_server->WaitGone());
  ServerProcess new_server(flags, socket);
  ASSERT_TRUE(new_server.started());

  // Puts through reservations (64 KiB, 1 MiB), inline (4 KiB) and in a batch. A call may fail
  // once, on a pooled connection of the old process that the client had not yet seen close;
  // every put acknowledged must read back exactly through a fresh client.
  std::map<std::string, std::string> acked;
  int failed = 0;
  for (int i = 0; i < 8; ++i) {
    for (std::size_t size : {std::size_t{4096}, std::size_t{64} << 10, std::size_t{1} << 20}) {
      const std::string key = "after-" + std::to_string(i) + "-" + std::to_string(size);
      const std::string data = Pattern(100 + i, size);
      Status s = c.Put(key, data.data(), data.size());
      if (s.ok()) {
        acked[key] = data;
      } else {
        ++failed;
        EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s.ToString();
      }
    }
  }
  EXPECT_LE(failed, 1);
  const std::string batch_data = Pattern(7, 256 << 10);
  auto batch = c.PutBatch({PutItem{"batch-a", batch_data.data(), batch_data.size(), {}},
                           PutItem{"batch-b", batch_data.data(), 4096, {}}});
  ASSERT_TRUE(batch[0].ok() && batch[1].ok()) << batch[0].ToString() << batch[1].ToString();
  acked["batch-a"] = batch_data;
  acked["batch-b"] = batch_data.substr(0, 4096);

  auto fresh = new_server.Connect();
  ASSERT_TRUE(fresh.ok());
  for (const auto& [key, data] : acked) {
    auto got = (*fresh)->GetBytes(key);
    ASSERT_TRUE(got.ok()) << key << ": " << got.status().ToString();
    EXPECT_TRUE(AsString(*got) == data) << key << ": acknowledged, read back different";
  }
  // Its own gets and views, through the new process's arenas.
  for (const auto& [key, data] : acked) {
    auto got = c.GetBytes(key);
    ASSERT_TRUE(got.ok()) << key << ": " << got.status().ToString();
    EXPECT_TRUE(AsString(*got) == data) << key;
    auto v = c.GetView(key);
    ASSERT_TRUE(v.ok()) << key << ": " << v.status().ToString();
    EXPECT_EQ(std::memcmp(v->data(), data.data(), data.size()), 0) << key;
  }
  EXPECT_EQ((*fresh)->GetBytes("before").status().code(), StatusCode::kNotFound);

  // The old process's reservation fails clearly, and nothing of it reaches the new one.
  std::memset(pending->data(), 0x33, 1 << 20);
  Status committed = pending->Commit();
  EXPECT_EQ(committed.code(), StatusCode::kUnavailable) << committed.ToString();
  EXPECT_EQ((*fresh)->GetBytes("pending").status().code(), StatusCode::kNotFound);
  // The old view still shows the bytes it showed (the old memory stays mapped while it lives).
  EXPECT_EQ(std::memcmp(view->data(), before.data(), before.size()), 0);
  EXPECT_TRUE(view->Verify().ok());
  view = Status::Unavailable("dropped");  // its release goes nowhere, and nothing breaks
  EXPECT_TRUE(c.Put("last", "x", 1).ok());
}

std::string HowItStops(const ::testing::TestParamInfo<int>& param) {
  return param.param == SIGKILL ? "Crash" : "CleanStop";
}

INSTANTIATE_TEST_SUITE_P(, Restart, ::testing::Values(SIGKILL, SIGTERM), HowItStops);

}  // namespace
}  // namespace tierpool::testing
