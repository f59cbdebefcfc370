#include "store/server_config.h"

#include <gtest/gtest.h>

#include <fstream>

namespace tierpool {
namespace {

Result<ServerConfig> Parse(std::vector<const char*> args, bool* exit_now) {
  args.insert(args.begin(), "tierpoold");
  return ParseServerFlags(static_cast<int>(args.size()), args.data(), exit_now);
}

TEST(ServerConfig, DefaultsAreSensible) {
  bool exit_now;
  auto c = Parse({}, &exit_now);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_FALSE(exit_now);
  EXPECT_EQ(c->dram.capacity, 1ull << 30);
  EXPECT_EQ(c->hbm.capacity, 256ull << 20);
  EXPECT_EQ(c->transport.socket_mode, 0600u);
  EXPECT_FALSE(c->transport.socket_path.empty());
}

TEST(ServerConfig, FlagsOverride) {
  bool exit_now;
  auto c = Parse({"--dram", "64M", "--hbm", "0", "--socket", "/tmp/x.sock", "--socket-mode", "0660",
                  "--log-level", "debug"},
                 &exit_now);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->dram.capacity, 64ull << 20);
  EXPECT_EQ(c->hbm.capacity, 0u);
  EXPECT_EQ(c->transport.socket_path, "/tmp/x.sock");
  EXPECT_EQ(c->transport.socket_mode, 0660u);
}

TEST(ServerConfig, BadValuesGetClearErrors) {
  bool exit_now;
  for (std::vector<const char*> bad :
       {std::vector<const char*>{"--dram", "lots"},
        {"--dram", "0"},
        {"--socket-mode", "999"},
        {"--hbm-high-watermark", "0.5", "--hbm-low-watermark", "0.9"},
        {"--bogus"},
        {"--max-frame", "2K"},
        {"--io-threads", "0"}}) {
    auto c = Parse(bad, &exit_now);
    EXPECT_FALSE(c.ok()) << bad[0];
    if (!c.ok()) {
      EXPECT_FALSE(c.status().message().empty());
    }
  }
}

TEST(ServerConfig, ReadsAConfigFile) {
  std::string path = ::testing::TempDir() + "/tierpoold.conf";
  std::ofstream(path) << "dram = 32M\nhbm = 8M\n";
  bool exit_now;
  auto c = Parse({"--config", path.c_str(), "--hbm", "4M"}, &exit_now);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->dram.capacity, 32ull << 20);
  EXPECT_EQ(c->hbm.capacity, 4ull << 20);  // the flag wins over the file
  EXPECT_FALSE(Parse({"--config", "/nonexistent/x.conf"}, &exit_now).ok());
}

// Found by fuzzing: Boost.Program_options' what() loops forever when a value or an option name
// holds one of its placeholders. The error must come back, and quickly.
TEST(ServerConfig, PlaceholdersInValuesAndNamesAreErrorsNotHangs) {
  std::string path = ::testing::TempDir() + "/placeholder.conf";
  bool exit_now;
  for (const char* text : {"io-threads = %value%\n", "%canonical_option% = 1\n",
                           "max-connections = %original_token%\n", "%prefix%x = 2\n"}) {
    std::ofstream(path) << text;
    auto c = Parse({"--config", path.c_str()}, &exit_now);
    EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument) << text;
  }
  auto flag = Parse({"--io-threads", "%value%"}, &exit_now);
  EXPECT_EQ(flag.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(flag.status().message().find("io-threads"), std::string::npos);
}

}  // namespace
}  // namespace tierpool
