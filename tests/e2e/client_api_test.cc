// The client library's contract: thread safety, async forms, reservations, errors; and the CLI.
#include <gtest/gtest.h>

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <array>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string>

#include <thread>

#include "common/posix.h"
#include "tests/e2e/server_process.h"

namespace tierpool::testing {
namespace {

class ClientApi : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { server_ = new ServerProcess({"--dram", "128M", "--hbm", "16M"}); }
  static void TearDownTestSuite() { delete server_; }
  void SetUp() override {
    ASSERT_TRUE(server_->started());
    auto c = server_->Connect();
    ASSERT_TRUE(c.ok());
    client_ = std::move(c).value();
  }
  static ServerProcess* server_;
  std::unique_ptr<Client> client_;
};
ServerProcess* ClientApi::server_ = nullptr;

// Rss of this process's mappings of a dram arena of `size` bytes, read-write and read-only
// (client/arena_mappings.h), from /proc/self/smaps; -1 where there is no such mapping.
struct ArenaRss {
  long long write_kib = -1, read_kib = -1;
  long long write_page_kib = -1, read_page_kib = -1;  // KernelPageSize
  long long write_pmd_kib = -1, read_pmd_kib = -1;    // ShmemPmdMapped: in 2 MiB pages
  bool write_advised = false, read_advised = false;   // VmFlags hg: MADV_HUGEPAGE
};
ArenaRss DramArenaRss(std::uint64_t size) {
  ArenaRss out;
  FILE* f = std::fopen("/proc/self/smaps", "r");
  if (f == nullptr) return out;
  char line[512];
  long long* current = nullptr;
  long long* page = nullptr;
  long long* pmd = nullptr;
  bool* advised = nullptr;
  while (std::fgets(line, sizeof line, f) != nullptr) {
    unsigned long long from = 0, to = 0;
    char perms[8] = {0};
    if (std::sscanf(line, "%llx-%llx %7s", &from, &to, perms) == 3) {
      current = page = pmd = nullptr;
      advised = nullptr;
      if (to - from == size && std::strstr(line, "/memfd:tierpool-dram") != nullptr) {
        const bool w = perms[1] == 'w';
        current = w ? &out.write_kib : &out.read_kib;
        page = w ? &out.write_page_kib : &out.read_page_kib;
        pmd = w ? &out.write_pmd_kib : &out.read_pmd_kib;
        advised = w ? &out.write_advised : &out.read_advised;
      }
      continue;
    }
    long long kib = 0;
    if (current != nullptr && std::sscanf(line, "Rss: %lld kB", &kib) == 1) *current = kib;
    if (page != nullptr && std::sscanf(line, "KernelPageSize: %lld kB", &kib) == 1) *page = kib;
    if (pmd != nullptr && std::sscanf(line, "ShmemPmdMapped: %lld kB", &kib) == 1) *pmd = kib;
    if (advised != nullptr && std::strncmp(line, "VmFlags:", 8) == 0) {
      *advised = std::strstr(line, " hg") != nullptr;
    }
  }
  std::fclose(f);
  return out;
}

// Connecting maps the arenas without faulting them in (it took about 60 ms per GiB when it
// did, and gave every client page tables for the whole arena); a put faults in the 64 KiB
// granules it writes in one call, and a get those it reads, and no more (or, with transparent
// huge pages, the 2 MiB pages around them). Both mappings ask for transparent huge pages.
TEST(ClientArenas, ConnectFaultsNothingInAndEachCallOnlyTheGranulesItMeets) {
  constexpr std::uint64_t kDram = 200ull << 20;  // a size no other mapping here has
  ServerProcess server({"--dram", "200M", "--hbm", "16M"});
  ASSERT_TRUE(server.started());
  auto c = server.Connect();
  ASSERT_TRUE(c.ok());
  ArenaRss rss = DramArenaRss(kDram);
  ASSERT_GE(rss.write_kib, 0) << "no read-write mapping of the dram arena";
  ASSERT_GE(rss.read_kib, 0) << "no read-only mapping of the dram arena";
  EXPECT_LE(rss.write_kib, 1024) << "Connect faulted the arena in";
  EXPECT_LE(rss.read_kib, 1024);
  EXPECT_TRUE(rss.write_advised) << "the read-write mapping does not ask for huge pages";
  EXPECT_TRUE(rss.read_advised) << "the read-only mapping does not ask for huge pages";
  const long long most = ShmemHugePagesOnAdvice() ? 4096 : 192;

  // 100 KiB: faulted in page by page as the copy meets them it adds 100 KiB; by granules, the
  // two or three that hold it (128 or 192 KiB).
  std::vector<std::byte> bytes(100 << 10);
  for (std::size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<std::byte>(i * 7);
  ASSERT_TRUE(c.value()->Put("chunks/a", bytes.data(), bytes.size()).ok());
  ArenaRss put = DramArenaRss(kDram);
  EXPECT_GE(put.write_kib - rss.write_kib, 128) << "the put's granules were not faulted in";
  EXPECT_LE(put.write_kib - rss.write_kib, most) << "more than the put's granules faulted in";
  auto back = c.value()->GetBytes("chunks/a");
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(*back, bytes);
  ArenaRss got = DramArenaRss(kDram);
  EXPECT_GE(got.read_kib - rss.read_kib, 128) << "the get's granules were not faulted in";
  EXPECT_LE(got.read_kib - rss.read_kib, most) << "more than the get's granules faulted in";
}

// Where the kernel gives shared memory transparent huge pages on request (shmem_enabled
// "advise"; Debian's default is "never", so this skips on CI), the server's arena and both of
// a client's mappings of it are in 2 MiB pages, with no pool reserved (cf. --huge-pages).
TEST(ClientArenas, TransparentHugePagesWhereTheKernelGivesThem) {
  if (!ShmemHugePagesOnAdvice()) {
    GTEST_SKIP() << "shmem_enabled is " << ShmemHugePagesSetting()
                 << " (echo advise > /sys/kernel/mm/transparent_hugepage/shmem_enabled)";
  }
  constexpr std::uint64_t kDram = 202ull << 20;  // a size no other mapping here has
  ServerProcess server({"--dram", "202M", "--hbm", "16M"});
  ASSERT_TRUE(server.started());
  auto c = server.Connect();
  ASSERT_TRUE(c.ok());
  std::vector<std::byte> bytes(256 << 10);
  for (std::size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<std::byte>(i * 13);
  ASSERT_TRUE(c.value()->Put("chunks/huge", bytes.data(), bytes.size()).ok());
  auto back = c.value()->GetBytes("chunks/huge");
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(*back, bytes);
  ArenaRss rss = DramArenaRss(kDram);
  EXPECT_GE(rss.write_pmd_kib, 2048) << "the put's bytes are not in a 2 MiB page here";
  EXPECT_GE(rss.read_pmd_kib, 2048) << "the get's bytes are not in a 2 MiB page here";
}

// `tierpoold --huge-pages` (where the kernel's pool has the pages; CI machines have none, so
// this skips there): clients map the arenas of 2 MiB pages and round-trip bytes through them.
TEST(ClientArenas, ArenasOfHugePagesRoundTrip) {
  if (MeminfoValue("HugePages_Free") < 32)
    GTEST_SKIP() << "fewer than 32 free huge pages (vm.nr_hugepages)";
  ServerProcess server({"--dram", "64M", "--hbm", "16M", "--huge-pages"});
  ASSERT_TRUE(server.started());
  auto c = server.Connect();
  ASSERT_TRUE(c.ok());
  std::vector<std::byte> bytes((3 << 20) + 5);
  for (std::size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<std::byte>(i * 13 + 1);
  ASSERT_TRUE(c.value()->Put("huge/a", bytes.data(), bytes.size()).ok());
  auto back = c.value()->GetBytes("huge/a");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, bytes);
  // This process's mappings of the arena use 2 MiB pages.
  ArenaRss arena = DramArenaRss(64ull << 20);
  EXPECT_EQ(arena.write_page_kib, 2048);
  EXPECT_EQ(arena.read_page_kib, 2048);
}

TEST_F(ClientApi, ConnectToNothingIsUnavailable) {
  ClientOptions o;
  o.socket_path = "/tmp/no-such-tierpool.sock";
  auto c = Client::Connect(o);
  EXPECT_EQ(c.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(c.status().message().find("tierpoold"), std::string::npos);
}

TEST_F(ClientApi, OneClientManyThreads) {
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 50; ++i) {
        std::string key = "mt-" + std::to_string(t) + "-" + std::to_string(i);
        std::string b = Pattern(static_cast<std::uint64_t>(t * 1000 + i), 1000 + 997 * i);
        if (!client_->Put(key, b.data(), b.size()).ok()) ++failures;
        auto got = client_->GetBytes(key);
        if (!got.ok() || got->size() != b.size() ||
            std::memcmp(got->data(), b.data(), b.size()) != 0) {
          ++failures;
        }
        auto view = client_->GetView(key);
        if (!view.ok() || !view->Verify().ok()) ++failures;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
}

TEST_F(ClientApi, AsyncForms) {
  std::string a = Pattern(1, 100000), b = Pattern(2, 5000);
  auto f1 = client_->PutAsync("async-a", a.data(), a.size());
  auto f2 = client_->PutBatchAsync({{"async-b", b.data(), b.size(), {}}});
  ASSERT_TRUE(f1.get().ok());
  ASSERT_TRUE(f2.get()[0].ok());
  std::string out(a.size(), '\0');
  auto g = client_->GetAsync("async-a", out.data(), out.size());
  ASSERT_TRUE(g.get().ok());
  EXPECT_TRUE(out == a);
  std::string out2(b.size(), '\0');
  auto g2 = client_->GetBatchAsync({{"async-b", out2.data(), out2.size()}});
  ASSERT_TRUE(g2.get()[0].ok());
  EXPECT_TRUE(out2 == b);
}

TEST_F(ClientApi, DroppedReservationIsAborted) {
  {
    auto r = client_->Reserve("dropped", 1 << 20);
    ASSERT_TRUE(r.ok());
  }
  EXPECT_EQ(client_->Stat("dropped").status().code(), StatusCode::kNotFound);
  auto s = client_->ServerStat();
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->counter("reservations_open"), 0u);
}

TEST_F(ClientApi, SmallBufferSaysHowLargeTheObjectIs) {
  std::string b(5000, 'q');
  ASSERT_TRUE(client_->Put("big", b.data(), b.size()).ok());
  char small[10];
  auto r = client_->Get("big", small, sizeof(small));
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("5000"), std::string::npos);
  // The pin taken for the failed copy is released.
  EXPECT_TRUE(server_->WaitFor([](const ServerStats& s) { return s.counter("leases_open") == 0; }));
}

TEST_F(ClientApi, MetadataTravels) {
  PutOptions o;
  o.dtype = "bfloat16";
  o.shape = {2, 3, 4};
  o.kind = ObjectKind::kOptimizerState;
  std::string b(48, 'm');
  ASSERT_TRUE(client_->Put("meta", b.data(), b.size(), o).ok());
  auto m = client_->Stat("meta");
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->dtype, "bfloat16");
  EXPECT_EQ(m->shape, (std::vector<std::int64_t>{2, 3, 4}));
  EXPECT_EQ(m->kind, ObjectKind::kOptimizerState);
  EXPECT_EQ(m->durability, Durability::kRetained);
  EXPECT_EQ(m->ns, "test");
}

TEST_F(ClientApi, NamespacesAreSeparate) {
  ClientOptions o = server_->options();
  o.ns = "other-job";
  auto other = Client::Connect(o);
  ASSERT_TRUE(other.ok());
  ASSERT_TRUE(client_->Put("shared-name", "mine", 4).ok());
  EXPECT_EQ((*other)->Stat("shared-name").status().code(), StatusCode::kNotFound);
  ASSERT_TRUE((*other)->Put("shared-name", "theirs", 6).ok());
  EXPECT_EQ(client_->Stat("shared-name")->size, 4u);
}

TEST_F(ClientApi, CommandLineTool) {
  std::string cli = std::string(TIERPOOL_CLI_PATH) + " --socket " + server_->socket() + " ";
  std::string in = ::testing::TempDir() + "/cli-in.bin",
              out = ::testing::TempDir() + "/cli-out.bin";
  std::string data = Pattern(77, 300000);
  std::FILE* f = std::fopen(in.c_str(), "wb");
  std::fwrite(data.data(), 1, data.size(), f);
  std::fclose(f);
  int rc;
  std::string o = RunShell(cli + "put weights " + in, &rc);
  ASSERT_EQ(rc, 0) << o;
  EXPECT_NE(o.find("stored default/weights"), std::string::npos) << o;
  o = RunShell(cli + "get weights " + out, &rc);
  ASSERT_EQ(rc, 0) << o;
  std::string back(data.size() + 1, '\0');
  f = std::fopen(out.c_str(), "rb");
  back.resize(std::fread(back.data(), 1, back.size(), f));
  std::fclose(f);
  EXPECT_TRUE(back == data);
  o = RunShell(cli + "ls --json", &rc);
  ASSERT_EQ(rc, 0) << o;
  auto list = nlohmann::json::parse(o);
  ASSERT_EQ(list.size(), 1u);
  EXPECT_EQ(list[0]["key"], "weights");
  o = RunShell(cli + "stat --json", &rc);
  ASSERT_EQ(rc, 0) << o;
  auto stat = nlohmann::json::parse(o);
  EXPECT_EQ(stat["tiers"].size(), 2u);
  EXPECT_GE(stat["counters"]["objects"].get<int>(), 1);
  o = RunShell(cli + "rm weights", &rc);
  EXPECT_EQ(rc, 0) << o;
  o = RunShell(cli + "get weights " + out, &rc);
  EXPECT_NE(rc, 0);
  EXPECT_NE(o.find("NOT_FOUND"), std::string::npos) << o;
  o = RunShell(cli + "frobnicate", &rc);
  EXPECT_EQ(rc, 2);
}

// Global flags before the command reach the commands that run a sibling binary (they used to
// turn `bench nvme` into the tool's own usage message).
TEST_F(ClientApi, FlagsMayComeBeforeAnyCommand) {
  const std::string tool = TIERPOOL_CLI_PATH;
  const std::string sock = " --socket " + server_->socket() + " ";
  int rc;
  std::string o = RunShell(tool + sock + "--ns x bench nvme --help", &rc);
  EXPECT_EQ(rc, 0) << o;
  EXPECT_NE(o.find("--block-size"), std::string::npos) << o;  // nvme bench's own help
  o = RunShell(tool + sock + "schedule --help", &rc);
  EXPECT_EQ(rc, 0) << o;
  EXPECT_NE(o.find("from-onnx"), std::string::npos) << o;
  o = RunShell(tool + " --socket=" + server_->socket() + " plan --help", &rc);
  EXPECT_EQ(rc, 0) << o;
  EXPECT_NE(o.find("from-onnx"), std::string::npos) << o;
  o = RunShell(tool + sock + "--json stat", &rc);
  ASSERT_EQ(rc, 0) << o;
  EXPECT_TRUE(nlohmann::json::accept(o)) << o;
  o = RunShell(tool + " --version", &rc);
  EXPECT_EQ(rc, 0);
  EXPECT_EQ(o.rfind("tierpool ", 0), 0u) << o;
}

// `bench --compare redis`: every tierpool row carries its ratio to memcpy and to the redis row of
// the same size and operation, measured in the same run; the redis-server it started is gone
// afterwards, with its directory.
TEST(Bench, ComparesWithRedisInTheSameRun) {
  int rc = 0;
  RunShell("command -v redis-server", &rc);
  if (rc != 0)
    GTEST_SKIP() << "redis-server is not installed (scripts/install-deps.sh installs it)";
  ServerProcess server({"--dram", "512M", "--hbm", "16M"});
  ASSERT_TRUE(server.started());
  const std::string tmp = ::testing::TempDir() + "/bench-redis-" + std::to_string(::getpid());
  ASSERT_EQ(::mkdir(tmp.c_str(), 0700), 0);
  const std::string tool = "TMPDIR=" + tmp + " " + TIERPOOL_CLI_PATH + " --socket " +
                           server.socket() + " bench --seconds 0.01 --threads 2 ";
  auto redis_servers = [] {
    int ignored = 0;
    return RunShell("pgrep -c -x redis-server", &ignored);
  };
  const std::string running_before = redis_servers();
  std::string o = RunShell(tool + "--compare redis --json 2>&1", &rc);
  ASSERT_EQ(rc, 0) << o;
  auto rows = nlohmann::json::parse(o);
  int redis_rows = 0, compared = 0, scaled = 0;
  for (const auto& r : rows) {
    const std::string path = r["path"];
    if (path == "redis") ++redis_rows;
    EXPECT_EQ(r.value("client_verifies_checksums", false), true) << r.dump();  // the default
    // What backs the dram the rows went through, as `tierpool stat` names it.
    EXPECT_EQ(r.value("server_dram_backend", "").rfind("memfd/libnuma", 0), 0u) << r.dump();
    if (path != "copy" && path != "zero_copy") continue;
    EXPECT_GT(r.value("ratio_to_redis", 0.0), 0.0) << r.dump();
    if (r["threads"] == 1) {
      EXPECT_GT(r.value("ratio_to_redis_p50", 0.0), 0.0) << r.dump();
    }
    // Each ratio is against the reference measured in turns with the row (client/tool/measure.h),
    // whose rate the row carries.
    const double gbps = r["gbps"].get<double>();
    if (r["objects_per_op"] == 1) {
      EXPECT_GT(r.value("ratio_to_memcpy", 0.0), 0.0) << r.dump();
      EXPECT_NEAR(r.value("ratio_to_memcpy", 0.0), gbps / r.value("memcpy_gbps_alongside", 0.0),
                  1e-6 * gbps)
          << r.dump();
    }
    EXPECT_NEAR(r.value("ratio_to_redis", 0.0), gbps / r.value("redis_gbps_alongside", 0.0),
                1e-6 * gbps)
        << r.dump();
    if (r["threads"] == 2) scaled += r.contains("ratio_to_one_thread") ? 1 : 0;
    ++compared;
  }
  EXPECT_EQ(redis_rows, 6 * 2 + 2);  // put and get of six sizes, pipelined batches
  EXPECT_EQ(compared, 6 * 4 + 4);
  EXPECT_EQ(scaled, 2);
  EXPECT_EQ(redis_servers(), running_before) << "the benchmark's redis-server is still running";

  o = RunShell(tool + "--compare redis --redis-server /nonexistent/redis-server 2>&1", &rc);
  EXPECT_NE(rc, 0);
  EXPECT_NE(o.find("install Debian's redis-server"), std::string::npos) << o;
  o = RunShell(tool + "--compare memcached 2>&1", &rc);
  EXPECT_NE(rc, 0);
  EXPECT_NE(o.find("redis only"), std::string::npos) << o;
  RunShell("rmdir " + tmp, &rc);
  EXPECT_EQ(rc, 0) << "the benchmark left files in " << tmp;
}

// `bench --plain-copies`: the gets copy without the check, as a client with verify_checksums
// off, and the rows say so (by default they check, as every client does).
TEST(Bench, MeasuresPlainCopiesWhenAsked) {
  ServerProcess server({"--dram", "512M", "--hbm", "16M"});
  ASSERT_TRUE(server.started());
  int rc = 0;
  std::string o = RunShell(std::string(TIERPOOL_CLI_PATH) + " --socket " + server.socket() +
                               " bench --seconds 0.01 --threads 1 --plain-copies --json 2>&1",
                           &rc);
  ASSERT_EQ(rc, 0) << o;
  auto rows = nlohmann::json::parse(o);
  int gets = 0;
  for (const auto& r : rows) {
    EXPECT_EQ(r.value("client_verifies_checksums", true), false) << r.dump();
    if (r["op"] == "get" && r["path"] == "copy") ++gets;
  }
  EXPECT_EQ(gets, 6);
}

// `bench --cases`: the batch cases alone or the sizes alone, so that one can be profiled without
// the other; anything else is refused before a case runs.
TEST(Bench, RunsOnlyTheCasesAsked) {
  ServerProcess server({"--dram", "512M", "--hbm", "16M"});
  ASSERT_TRUE(server.started());
  const std::string bench = std::string(TIERPOOL_CLI_PATH) + " --socket " + server.socket() +
                            " bench --seconds 0.01 --threads 1 --json --cases ";
  for (const std::string cases : {"batches", "sizes"}) {
    int rc = 0;
    std::string o = RunShell(bench + cases + " 2>&1", &rc);
    ASSERT_EQ(rc, 0) << o;
    int batch_rows = 0, other_rows = 0;
    for (const auto& r : nlohmann::json::parse(o)) {
      const std::string op = r["op"];
      (op.ends_with("_batch") ? batch_rows : other_rows) += 1;
    }
    if (cases == "batches") {
      EXPECT_EQ(batch_rows, 2) << o;  // put and get batches from one thread
      EXPECT_EQ(other_rows, 0) << o;
    } else {
      EXPECT_EQ(batch_rows, 0) << o;
      EXPECT_GT(other_rows, 20) << o;
    }
  }
  int rc = 0;
  std::string o = RunShell(bench + "some 2>&1", &rc);
  EXPECT_NE(rc, 0);
  EXPECT_NE(o.find("all, sizes or batches"), std::string::npos) << o;
}

}  // namespace
}  // namespace tierpool::testing
