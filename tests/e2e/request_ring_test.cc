// Request rings (transport/request_ring.h): calls through shared memory beside the socket, in
// order with what goes through the socket, with both ends asleep or polling; and a client that
// writes anything at all into its ring gets errors while the server serves everyone else.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <future>
#include <random>
#include <thread>

#include "tests/e2e/server_process.h"
#include "transport/blocking_connection.h"
#include "transport/request_ring.h"

namespace tierpool::testing {
namespace {

using transport::BlockingConnection;
using transport::RequestRing;

void ExpectServes(const ServerProcess& server) {
  auto c = server.Connect();
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  ASSERT_TRUE((*c)->Put("canary", "alive", 5).ok());
  char buf[5];
  auto got = (*c)->Get("canary", buf, sizeof(buf));
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(std::string(buf, 5), "alive");
}

TEST(RequestRing, CallsGoThroughTheRingAndTheSocketStaysForTheRest) {
  ServerProcess server({"--dram", "64M", "--hbm", "0"});
  ASSERT_TRUE(server.started());
  ClientOptions options = server.options();
  options.max_connections = 1;
  auto client = Client::Connect(options);
  ASSERT_TRUE(client.ok());
  Client& c = **client;
  EXPECT_EQ(ServerCounter(c, "request_rings_open"), 1u);
  const std::uint64_t before = ServerCounter(c, "ring_requests");
  for (std::size_t size : {std::size_t{0}, std::size_t{100}, std::size_t{4096},
                           std::size_t{256 * 1024}, std::size_t{4 << 20}}) {
    const std::string key = "k" + std::to_string(size), data = Pattern(size, size);
    ASSERT_TRUE(c.Put(key, data.data(), size).ok()) << size;
    std::string out(size, '\0');
    auto got = c.Get(key, out.data(), size);
    ASSERT_TRUE(got.ok()) << size << ": " << got.status().ToString();
    EXPECT_EQ(*got, size);
    EXPECT_TRUE(out == data) << size;
    auto view = c.GetView(key);
    ASSERT_TRUE(view.ok());
    EXPECT_EQ(std::string(reinterpret_cast<const char*>(view->data()), view->size()), data);
  }
  // Each put, get and view (and the views' releases) went through the ring.
  EXPECT_GE(ServerCounter(c, "ring_requests") - before, 15u);

  // A client that asks for no ring gets none and keeps to the socket.
  ClientOptions plain = options;
  plain.request_ring = false;
  auto other = Client::Connect(plain);
  ASSERT_TRUE(other.ok());
  const std::uint64_t rings = ServerCounter(c, "ring_requests");
  ASSERT_TRUE((*other)->Put("plain", "bytes", 5).ok());
  char buf[5];
  ASSERT_TRUE((*other)->Get("plain", buf, 5).ok());
  EXPECT_EQ(ServerCounter(**other, "request_rings_open"), 1u);
  EXPECT_EQ(ServerCounter(c, "ring_requests") - rings, 1u);  // c's own stat
}

// A release sent one-way (a view's end) is served before the connection's next request,
// whether each goes through the ring or the socket, so the stat after it sees no lease.
TEST(RequestRing, OneWayMessagesAreServedInOrder) {
  ServerProcess server({"--dram", "64M", "--hbm", "0"});
  ASSERT_TRUE(server.started());
  ClientOptions options = server.options();
  options.max_connections = 1;
  auto client = Client::Connect(options);
  ASSERT_TRUE(client.ok());
  Client& c = **client;
  const std::string data = Pattern(7, 64 * 1024);
  ASSERT_TRUE(c.Put("v", data.data(), data.size()).ok());
  for (int i = 0; i < 200; ++i) {
    {
      auto view = c.GetView("v");
      ASSERT_TRUE(view.ok());
      ASSERT_EQ(ServerCounter(c, "leases_open"), 1u) << i;
    }
    ASSERT_EQ(ServerCounter(c, "leases_open"), 0u) << i;
  }
}

// The server's I/O thread sleeps between requests (no polling window) and the client sleeps on
// its reply (no client polling): every call rings the doorbell and every reply wakes the client.
TEST(RequestRing, BothEndsAsleepStillAnswer) {
  ServerProcess server(
      {"--dram", "64M", "--hbm", "0", "--busy-poll-us", "1", "--busy-poll-max-us", "1"});
  ASSERT_TRUE(server.started());
  ClientOptions options = server.options();
  options.max_connections = 1;
  options.busy_poll_us = 0;
  auto client = Client::Connect(options);
  ASSERT_TRUE(client.ok());
  Client& c = **client;
  const std::uint64_t doorbells = ServerCounter(c, "ring_doorbells");
  for (int i = 0; i < 100; ++i) {
    const std::string key = "k" + std::to_string(i), data = Pattern(i, 1000 + i);
    ASSERT_TRUE(c.Put(key, data.data(), data.size()).ok()) << i;
    if (i % 10 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(2));
    std::string out(data.size(), '\0');
    auto got = c.Get(key, out.data(), out.size());
    ASSERT_TRUE(got.ok()) << i << ": " << got.status().ToString();
    EXPECT_TRUE(out == data) << i;
  }
  EXPECT_GT(ServerCounter(c, "ring_doorbells"), doorbells);
}

// A ring's request is served where its I/O loop's poll finds it, each connection on one loop
// (transport/io_loop.h). With one loop or several, clients calling at once through their rings
// each get their own bytes back.
TEST(RequestRing, ConcurrentClientsAreServedWithOneOrSeveralIoThreads) {
  for (const char* io_threads : {"1", "2"}) {
    SCOPED_TRACE(std::string("--io-threads ") + io_threads);
    ServerProcess server({"--dram", "64M", "--hbm", "0", "--io-threads", io_threads});
    ASSERT_TRUE(server.started());
    auto probe = server.Connect();
    ASSERT_TRUE(probe.ok());
    const std::uint64_t before = ServerCounter(**probe, "ring_requests");
    constexpr int kClients = 3, kRounds = 200;
    std::vector<std::future<std::string>> failures;
    for (int t = 0; t < kClients; ++t) {
      failures.push_back(std::async(std::launch::async, [&server, t]() -> std::string {
        ClientOptions options = server.options();
        options.max_connections = 1;
        auto client = Client::Connect(options);
        if (!client.ok()) return client.status().ToString();
        for (int i = 0; i < kRounds; ++i) {
          const std::string key = std::to_string(t) + "-" + std::to_string(i % 16);
          const std::string data = Pattern(64 + (i * 37) % 8192, 100 * t + i);
          if (Status s = (*client)->Put(key, data.data(), data.size()); !s.ok()) {
            return "put " + key + ": " + s.ToString();
          }
          std::string out(data.size(), '\0');
          auto got = (*client)->Get(key, out.data(), out.size());
          if (!got.ok()) return "get " + key + ": " + got.status().ToString();
          if (out != data) return "get " + key + " returned other bytes";
        }
        return "";
      }));
    }
    for (auto& f : failures) EXPECT_EQ(f.get(), "");
    // Every client's calls went through its ring (two or three each round).
    EXPECT_GE(ServerCounter(**probe, "ring_requests") - before,
              static_cast<std::uint64_t>(2 * kClients * kRounds));
  }
}

// Replies larger than the ring's area (a long listing) come as frames on the socket.
TEST(RequestRing, RepliesLargerThanTheRingComeOnTheSocket) {
  ServerProcess server({"--dram", "64M", "--hbm", "0"});
  ASSERT_TRUE(server.started());
  auto client = server.Connect();
  ASSERT_TRUE(client.ok());
  Client& c = **client;
  std::vector<PutItem> puts;
  std::vector<std::string> keys;
  for (int i = 0; i < 150; ++i) keys.push_back(std::to_string(i) + "-" + std::string(900, 'x'));
  for (const auto& k : keys) puts.push_back({k, "b", 1, {}});
  for (const auto& s : c.PutBatch(puts)) ASSERT_TRUE(s.ok()) << s.ToString();
  auto list = c.List();  // some 140 KiB of reply
  ASSERT_TRUE(list.ok()) << list.status().ToString();
  EXPECT_EQ(list->size(), keys.size());
  ExpectServes(server);
}

// Limits: past --max-request-rings a client keeps to the socket; with rings off, all do. The
// limit is the server's, not each I/O loop's: with two loops the two clients' connections go one
// to each, and still only one gets a ring.
TEST(RequestRing, ClientsPastTheLimitKeepToTheSocket) {
  for (const auto& [limit, io_threads] : std::vector<std::pair<const char*, const char*>>{
           {"1", "1"}, {"0", "1"}, {"1", "2"}, {"0", "2"}}) {
    SCOPED_TRACE(std::string("--io-threads ") + io_threads);
    ServerProcess server(
        {"--dram", "64M", "--hbm", "0", "--max-request-rings", limit, "--io-threads", io_threads});
    ASSERT_TRUE(server.started());
    ClientOptions options = server.options();
    options.max_connections = 1;
    auto a = Client::Connect(options);
    auto b = Client::Connect(options);
    ASSERT_TRUE(a.ok() && b.ok());
    for (auto* c : {a->get(), b->get()}) {
      ASSERT_TRUE(c->Put("k", "bytes", 5).ok());
      char buf[5];
      ASSERT_TRUE(c->Get("k", buf, 5).ok());
    }
    EXPECT_EQ(ServerCounter(**a, "request_rings_open"), std::string(limit) == "1" ? 1u : 0u)
        << limit;
  }
}

// True once every thread of `pid` is stopped (within 5 s): a stop signal reaches a process's
// threads one by one, and a polling thread may serve a request meanwhile.
bool AllThreadsStopped(pid_t pid) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  const std::string tasks = "/proc/" + std::to_string(pid) + "/task";
  while (std::chrono::steady_clock::now() < deadline) {
    bool all = true;
    for (const auto& t : std::filesystem::directory_iterator(tasks)) {
      std::ifstream in(t.path() / "stat");
      std::string line;
      std::getline(in, line);
      const auto close = line.rfind(')');
      if (close == std::string::npos || close + 2 >= line.size() || line[close + 2] != 'T') {
        all = false;
      }
    }
    if (all) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return false;
}

// A client waiting on its ring for a server that dies gets UNAVAILABLE, not a hang.
TEST(RequestRing, AWaitingClientLearnsTheServerDied) {
  ServerProcess server({"--dram", "64M", "--hbm", "0"});
  ASSERT_TRUE(server.started());
  auto client = server.Connect();
  ASSERT_TRUE(client.ok());
  ASSERT_TRUE((*client)->Put("k", "bytes", 5).ok());
  ASSERT_EQ(::kill(server.pid(), SIGSTOP), 0);
  ASSERT_TRUE(AllThreadsStopped(server.pid()));
  auto call = std::async(std::launch::async, [&] { return (*client)->ServerStat().status(); });
  ASSERT_EQ(call.wait_for(std::chrono::milliseconds(100)), std::future_status::timeout)
      << call.get().ToString();
  ASSERT_EQ(::kill(server.pid(), SIGKILL), 0);
  ASSERT_TRUE(server.WaitGone());
  ASSERT_EQ(call.wait_for(std::chrono::seconds(5)), std::future_status::ready);
  const Status s = call.get();
  EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s.ToString();
}

// A hostile client owns its ring's memory: whatever it writes there, it gets errors (or
// nothing), the ring's size cannot change under the server, and everyone else is served.
TEST(RequestRing, HostileRingContentIsRefusedAndOthersAreServed) {
  ServerProcess server({"--dram", "64M", "--hbm", "0"});
  ASSERT_TRUE(server.started());
  auto conn = BlockingConnection::Connect(server.socket());
  ASSERT_TRUE(conn.ok());
  wire::Request open;
  open.set_id(1);
  open.mutable_open_ring();
  wire::Response opened;
  std::vector<UniqueFd> fds;
  ASSERT_TRUE((*conn)->Call(open, &opened, &fds).ok());
  ASSERT_TRUE(opened.has_ring());
  ASSERT_EQ(fds.size(), 1u);
  const int fd = fds[0].get();
  // Sealed: neither shrinking nor growing the memory the server reads is allowed.
  EXPECT_NE(::ftruncate(fd, 0), 0);
  EXPECT_NE(::ftruncate(fd, 1 << 20), 0);
  auto ring = RequestRing::Map(std::move(fds[0]), opened.ring().ring_bytes());
  ASSERT_TRUE(ring.ok());
  transport::RingControl& ctl = ring->control();
  std::uint32_t seq = 0;
  // Posts what is in the request area as request `len` and waits for the answer's status.
  auto post = [&](std::uint32_t len, std::uint64_t socket_bytes = 0) {
    ctl.request_len.store(len);
    ctl.socket_bytes.store(socket_bytes);
    ctl.request_seq.store(++seq);
    std::uint8_t doorbell[transport::kFrameHeaderSize];
    transport::EncodeFrameHeader(0, doorbell);
    EXPECT_TRUE((*conn)->SendRaw(doorbell, sizeof(doorbell)).ok());
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (ctl.reply_seq.load() != seq && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::yield();
    }
    EXPECT_EQ(ctl.reply_seq.load(), seq) << "no answer to a ring request of " << len << " bytes";
    wire::Response r;
    const std::uint32_t rlen = ctl.reply_len.load();
    EXPECT_LE(rlen, transport::kRingAreaBytes);
    EXPECT_TRUE(rlen <= transport::kRingAreaBytes &&
                r.ParseFromArray(ring->reply_area(), static_cast<int>(rlen)));
    return r.status().code();
  };
  // A length past the area, and garbage of every length.
  EXPECT_NE(post(0xffffffffu), 0u);
  EXPECT_NE(post(transport::kRingAreaBytes + 1), 0u);
  std::mt19937 rng(99);
  for (int round = 0; round < 50; ++round) {
    const std::uint32_t len = rng() % 2048;
    for (std::uint32_t i = 0; i < len; ++i) ring->request_area()[i] = std::byte(rng());
    EXPECT_NE(post(len), 0u) << round;
  }
  // Not a request the ring carries.
  wire::Request again;
  again.set_id(5);
  again.mutable_open_ring();
  const auto n = again.ByteSizeLong();
  again.SerializeToArray(ring->request_area(), static_cast<int>(n));
  EXPECT_EQ(post(static_cast<std::uint32_t>(n)),
            static_cast<std::uint32_t>(StatusCode::kUnimplemented));
  // A valid request is served as from the socket.
  wire::Request stat;
  stat.set_id(6);
  stat.mutable_stat();
  const auto sn = stat.ByteSizeLong();
  stat.SerializeToArray(ring->request_area(), static_cast<int>(sn));
  EXPECT_EQ(post(static_cast<std::uint32_t>(sn)), 0u);
  // The sequence bumped without end while others work.
  std::atomic<bool> stop{false};
  std::thread spam([&] {
    while (!stop.load()) ctl.request_seq.fetch_add(1 + static_cast<std::uint32_t>(rng() % 7));
  });
  // (Each bump used to queue another handler ahead of everyone's: five canaries took 27 to 137 s.
  // A liveness bound, far above the ~50 ms they take.)
  const auto spam_start = std::chrono::steady_clock::now();
  for (int i = 0; i < 5; ++i) ExpectServes(server);
  EXPECT_LT(std::chrono::steady_clock::now() - spam_start, std::chrono::seconds(20));
  stop = true;
  spam.join();
  // A request that claims socket bytes never sent waits forever, for its own connection only.
  ctl.request_len.store(static_cast<std::uint32_t>(sn));
  ctl.socket_bytes.store(~0ull);
  ctl.request_seq.fetch_add(1);
  ExpectServes(server);
  // Its ring goes with its connection.
  conn->reset();
  ASSERT_TRUE(server.WaitFor(
      [](const ServerStats& s) { return s.counter("request_rings_open") == 1; }));  // the probe's
  ExpectServes(server);
}

}  // namespace
}  // namespace tierpool::testing
