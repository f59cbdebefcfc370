#include "store/server_config.h"

#include <gtest/gtest.h>
#include <sched.h>

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

// The I/O threads follow the CPUs the process may run on: a quarter of them, 1 to 4.
TEST(ServerConfig, IoThreadsAreAQuarterOfTheCpusUnlessGiven) {
  EXPECT_EQ(AutoIoThreads(1), 1);
  EXPECT_EQ(AutoIoThreads(2), 1);
  EXPECT_EQ(AutoIoThreads(7), 1);
  EXPECT_EQ(AutoIoThreads(8), 2);
  EXPECT_EQ(AutoIoThreads(16), 4);
  EXPECT_EQ(AutoIoThreads(192), 4);
  cpu_set_t set;
  CPU_ZERO(&set);
  ASSERT_EQ(sched_getaffinity(0, sizeof(set), &set), 0);
  bool exit_now;
  auto defaults = Parse({}, &exit_now);
  ASSERT_TRUE(defaults.ok()) << defaults.status().ToString();
  EXPECT_EQ(defaults->transport.io_threads, AutoIoThreads(CPU_COUNT(&set)));
  auto given = Parse({"--io-threads", "3"}, &exit_now);
  ASSERT_TRUE(given.ok()) << given.status().ToString();
  EXPECT_EQ(given->transport.io_threads, 3);
  auto named = Parse({"--io-threads", "auto"}, &exit_now);
  ASSERT_TRUE(named.ok()) << named.status().ToString();
  EXPECT_EQ(named->transport.io_threads, defaults->transport.io_threads);
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
  EXPECT_EQ(c->hbm_device, -1);
  auto gpu = Parse({"--hbm-device", "1", "--hbm-checksum-threads", "6", "--mover-inflight", "1G",
                    "--hbm-check", "host", "--hbm-completion-group", "4M"},
                   &exit_now);
  ASSERT_TRUE(gpu.ok()) << gpu.status().ToString();
  EXPECT_EQ(gpu->hbm_device, 1);
  EXPECT_EQ(gpu->hbm_checksum_threads, 6);
  EXPECT_EQ(gpu->store.mover.max_inflight_bytes_per_link, 1ull << 30);
  EXPECT_EQ(gpu->hbm_check, "host");
  EXPECT_EQ(c->hbm_check, "device");
  EXPECT_EQ(gpu->hbm_completion_group_bytes, 4ull << 20);
  EXPECT_EQ(c->hbm_completion_group_bytes, 16ull << 20);
}

TEST(ServerConfig, SpillOrder) {
  bool exit_now;
  auto defaults = Parse({}, &exit_now);
  ASSERT_TRUE(defaults.ok());
  EXPECT_EQ(defaults->store.spill_order, (std::vector{TierKind::kRemote, TierKind::kNvme}));
  auto nvme_first = Parse({"--spill-order", "nvme,remote"}, &exit_now);
  ASSERT_TRUE(nvme_first.ok()) << nvme_first.status().ToString();
  EXPECT_EQ(nvme_first->store.spill_order, (std::vector{TierKind::kNvme, TierKind::kRemote}));
  auto bad = Parse({"--spill-order", "nvme,flash"}, &exit_now);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("'flash'"), std::string::npos) << bad.status().ToString();
}

TEST(ServerConfig, BadValuesGetClearErrors) {
  bool exit_now;
  for (std::vector<const char*> bad :
       {std::vector<const char*>{"--dram", "lots"},
        {"--dram", "0"},
        {"--socket-mode", "999"},
        {"--socket-mode", "4777"},
        // Cut to 32 bits before, that is 0: a socket no one but root could connect to.
        {"--socket-mode", "100000000000"},
        {"--hbm-high-watermark", "0.5", "--hbm-low-watermark", "0.9"},
        {"--bogus"},
        {"--max-frame", "2K"},
        {"--io-threads", "0"},
        {"--io-threads", "65"},
        {"--io-threads", "2x"},
        {"--io-threads", "-1"},
        {"--io-threads", ""},
        {"--busy-poll-max-us", "20000"},
        {"--max-request-rings", "70000"},
        {"--spill-order", "nvme,nvme"},
        {"--spill-order", "dram"},
        {"--spill-order", ""},
        {"--spill-order", "remote,"},
        {"--hbm-device", "-2"},
        {"--hbm-checksum-threads", "-1"},
        {"--mover-inflight", "0"},
        {"--hbm-check", "gpu"},
        {"--hbm-completion-group", "2G"},
        {"--hbm-completion-group", "lots"}}) {
    auto c = Parse(bad, &exit_now);
    EXPECT_FALSE(c.ok()) << bad[0];
    if (!c.ok()) {
      EXPECT_FALSE(c.status().message().empty());
    }
  }
}

TEST(ServerConfig, TheLendersReservedShareIsAFraction) {
  bool exit_now;
  auto cluster = [&](const char* share) {
    return Parse({"--etcd", "http://127.0.0.1:2379", "--peer-listen", "127.0.0.1:0", "--peer-auth",
                  "/nonexistent/secret", "--lend", "64M", "--lend-reserved-share", share},
                 &exit_now);
  };
  auto ok = cluster("0.25");
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_DOUBLE_EQ(ok->cluster.lender.reserved_share, 0.25);
  auto defaults = Parse({}, &exit_now);
  ASSERT_TRUE(defaults.ok());
  EXPECT_DOUBLE_EQ(defaults->cluster.lender.reserved_share, 0.5);
  for (const char* bad : {"1.5", "-0.1", "nan"}) {
    auto c = cluster(bad);
    ASSERT_FALSE(c.ok()) << bad;
    EXPECT_NE(c.status().message().find("--lend-reserved-share"), std::string::npos)
        << c.status().ToString();
  }
}

TEST(ServerConfig, ReadsATomlConfigFile) {
  std::string path = ::testing::TempDir() + "/tierpoold.toml";
  std::ofstream(path)
      << "# a comment\ndram = \"32M\"\nhbm = \"8M\"\nio-threads = 3\n"
         "hbm-high-watermark = 0.8\nno-populate = true\n"
         "verify-commits = true\nmetrics-listen = \"off\"\nbusy-poll-max-us = 200\n";
  bool exit_now;
  auto c = Parse({"--config", path.c_str(), "--hbm", "4M"}, &exit_now);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->dram.capacity, 32ull << 20);
  EXPECT_EQ(c->hbm.capacity, 4ull << 20);  // the flag wins over the file
  EXPECT_EQ(c->transport.io_threads, 3u);
  EXPECT_EQ(c->transport.busy_poll_max_us, 200u);
  EXPECT_DOUBLE_EQ(c->hbm_watermarks.high, 0.8);
  EXPECT_FALSE(c->dram.populate);
  EXPECT_TRUE(c->store.verify_commits);
  EXPECT_FALSE(c->metrics.enabled());
  EXPECT_EQ(Parse({"--config", "/nonexistent/x.toml"}, &exit_now).status().code(),
            StatusCode::kNotFound);
}

TEST(ServerConfig, BadConfigFilesNameTheKeyOrLine) {
  std::string path = ::testing::TempDir() + "/bad.toml";
  bool exit_now;
  struct Case {
    const char* text;
    const char* says;
  };
  for (const Case& k :
       {Case{"dram = \"32M\"\ndramm = \"1G\"\n", "key 'dramm' is not"},
        Case{"io-threads = \"many\"\n", "io-threads"}, Case{"dram = \"lots\"\n", "--dram"},
        Case{"[dram]\ncapacity = 1\n", "key 'dram'"},
        Case{"dram = [1, 2]\n", "expected a string, a number"},
        Case{"no-populate = \"yes\"\n", "is a switch"},
        Case{"config = \"other.toml\"\n", "key 'config' is not"}, Case{"dram = 32M\n", "line 1"},
        Case{"socket = \"s\"\ndram = 64G  # a size\n",
             "line 2: Error while parsing decimal integer: expected digit, saw 'G'; sizes are "
             "strings in TOML: dram = \"64G\""},
        Case{"socket = \"a\"\nsocket = \"b\"\n", "line 2"}}) {
    std::ofstream(path, std::ios::trunc) << k.text;
    auto c = Parse({"--config", path.c_str()}, &exit_now);
    ASSERT_FALSE(c.ok()) << k.text;
    EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument) << k.text;
    EXPECT_NE(c.status().message().find(k.says), std::string::npos)
        << k.text << " -> " << c.status().ToString();
  }
}

TEST(ServerConfig, PrintConfigReadsBackAsTheSameConfiguration) {
  bool exit_now;
  ::testing::internal::CaptureStdout();
  auto c = Parse({"--dram", "48M", "--hbm-low-watermark", "0.5", "--no-populate", "--print-config"},
                 &exit_now);
  std::string printed = ::testing::internal::GetCapturedStdout();
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_TRUE(exit_now);
  EXPECT_NE(printed.find("dram = '48M'"), std::string::npos) << printed;
  EXPECT_NE(printed.find("no-populate = true"), std::string::npos) << printed;
  EXPECT_NE(printed.find("max-pins-per-client = 262144"), std::string::npos) << printed;
  std::string path = ::testing::TempDir() + "/printed.toml";
  std::ofstream(path, std::ios::trunc) << printed;
  auto back = Parse({"--config", path.c_str()}, &exit_now);
  ASSERT_TRUE(back.ok()) << back.status().ToString() << "\n" << printed;
  EXPECT_FALSE(exit_now);
  EXPECT_EQ(back->dram.capacity, 48ull << 20);
  EXPECT_DOUBLE_EQ(back->hbm_watermarks.low, 0.5);
  EXPECT_FALSE(back->dram.populate);
  EXPECT_EQ(back->transport.socket_path, c->transport.socket_path);
  EXPECT_EQ(back->metrics.listen, c->metrics.listen);
}

// Found by fuzzing: Boost.Program_options' what() loops forever when a value or an option name
// holds one of its placeholders. The error must come back, and quickly.
TEST(ServerConfig, PlaceholdersInValuesAndNamesAreErrorsNotHangs) {
  std::string path = ::testing::TempDir() + "/placeholder.conf";
  bool exit_now;
  for (const char* text : {"io-threads = %value%\n", "%canonical_option% = 1\n",
                           "max-connections = %original_token%\n", "%prefix%x = 2\n",
                           "io-threads = \"%value%\"\n", "\"%canonical_option%\" = 1\n",
                           "max-connections = \"%original_token%\"\n", "\"%prefix%x\" = 2\n"}) {
    std::ofstream(path) << text;
    auto c = Parse({"--config", path.c_str()}, &exit_now);
    EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument) << text;
  }
  auto flag = Parse({"--io-threads", "%value%"}, &exit_now);
  EXPECT_EQ(flag.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(flag.status().message().find("io-threads"), std::string::npos);
}

// Found by fuzzing (2026-11-27): a key that is empty (`'' = 8`, or a table's `''.'' = 8`)
// matched every option as a prefix, and Boost.Program_options threw "ambiguous" past every
// handler: tierpoold died on the file instead of naming the key.
TEST(ServerConfig, EmptyKeysAreErrorsNotCrashes) {
  std::string path = ::testing::TempDir() + "/empty-key.conf";
  bool exit_now;
  for (const char* text : {"'' = 8\n", "''.'' = 8\n", "\"\" = \"x\"\n"}) {
    std::ofstream(path) << text;
    auto c = Parse({"--config", path.c_str()}, &exit_now);
    EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument) << text;
    EXPECT_NE(c.status().message().find("not a tierpoold option"), std::string::npos)
        << c.status().ToString();
  }
}

}  // namespace
}  // namespace tierpool
