// The Unix server's I/O loops (transport/io_loop.h), in process so that the sanitizers see both
// ends: connections spread over the loops, each served on its own loop through its socket and its
// ring, requests that may wait run on workers and come back to their loop, and connections that
// close in the middle of it all leave the others served.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "transport/blocking_connection.h"
#include "transport/unix_server.h"

namespace tierpool::transport {
namespace {

// Answers a Stat request with the request's id and the session's in `uptime_ms` (id * 1000 +
// session) and notes the thread that ran it; every third request is said to maybe wait, so
// that it runs on a worker.
class EchoHandler : public RequestHandler {
 public:
  bool Handle(std::uint64_t session_id, const PeerCredentials&, const wire::Request& request,
              wire::Response* response, std::vector<int>*) override {
    response->mutable_stat()->set_uptime_ms(request.id() * 1000 + session_id);
    std::lock_guard lock(mu_);
    threads_.insert(std::this_thread::get_id());
    ++handled_;
    return true;
  }
  bool MayBlock(std::uint64_t, const wire::Request& request) override {
    return request.id() % 3 == 0;
  }
  void OnDisconnect(std::uint64_t) override { ++disconnects_; }

  std::size_t threads() {
    std::lock_guard lock(mu_);
    return threads_.size();
  }
  std::atomic<int> disconnects_{0};

 private:
  std::mutex mu_;
  std::set<std::thread::id> threads_;  // guarded by mu_
  std::uint64_t handled_ = 0;          // guarded by mu_
};

// A socket path in a directory of its own, removed with it.
struct TempSocket {
  explicit TempSocket(const char* name)
      : dir(std::filesystem::temp_directory_path() /
            ("tierpool-io-loops-" + std::to_string(getpid()) + "-" + name)) {
    std::filesystem::create_directories(dir);
  }
  ~TempSocket() { std::filesystem::remove_all(dir); }
  std::string path() const { return dir / "s"; }
  std::filesystem::path dir;
};

// A connection with a ring, when the server gives one.
std::unique_ptr<BlockingConnection> Connect(const std::string& path, bool ring) {
  auto conn = BlockingConnection::Connect(path);
  if (!conn.ok()) return nullptr;
  (*conn)->set_busy_poll_us(50);
  if (ring) {
    wire::Request req;
    req.set_id(1);
    req.mutable_open_ring();
    wire::Response resp;
    std::vector<UniqueFd> fds;
    if (!(*conn)->Call(req, &resp, &fds).ok()) return nullptr;
    if (resp.has_ring() && fds.size() == 1) {
      if (!(*conn)->EnableRing(std::move(fds[0]), resp.ring()).ok()) return nullptr;
    }
  }
  return std::move(conn).value();
}

TEST(IoLoops, ClientsOnEveryLoopAreEachAnsweredTheirOwnRequests) {
  EchoHandler handler;
  TempSocket socket("spread");
  UnixServerConfig config;
  config.socket_path = socket.path();
  config.io_threads = 3;
  config.worker_threads = 2;
  UnixServer server(config, &handler);
  ASSERT_TRUE(server.Start().ok());

  constexpr int kClients = 6, kRounds = 300;
  std::vector<std::string> failures(kClients);
  std::vector<std::thread> clients;
  for (int c = 0; c < kClients; ++c) {
    clients.emplace_back([&, c] {
      // Half through their rings, half through the socket; the last one hangs up half way.
      auto conn = Connect(config.socket_path, c % 2 == 0);
      if (!conn) {
        failures[c] = "connect failed";
        return;
      }
      if ((c % 2 == 0) != conn->has_ring()) {
        failures[c] = "ring not as asked";
        return;
      }
      for (int i = 0; i < kRounds; ++i) {
        if (c == kClients - 1 && i == kRounds / 2) return;  // closes with the connection
        wire::Request req;
        req.set_id(static_cast<std::uint64_t>(100 + i));
        req.mutable_stat();
        wire::Response resp;
        if (Status s = conn->Call(req, &resp); !s.ok()) {
          failures[c] = "call " + std::to_string(i) + ": " + s.ToString();
          return;
        }
        if (resp.stat().uptime_ms() / 1000 != req.id()) {
          failures[c] = "reply " + std::to_string(i) + " is not this request's";
          return;
        }
      }
    });
  }
  for (auto& t : clients) t.join();
  for (int c = 0; c < kClients; ++c) EXPECT_EQ(failures[c], "") << "client " << c;

  // Each session closes when its loop reads the hang-up (within 5 s).
  for (int i = 0; i < 500 && handler.disconnects_.load() < kClients; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(handler.disconnects_.load(), kClients);
  const TransportStats stats = server.stats();
  EXPECT_EQ(stats.connections_accepted, static_cast<std::uint64_t>(kClients));
  EXPECT_EQ(stats.connections_active, 0u);
  EXPECT_EQ(stats.request_rings_open, 0u);  // every ring closed with its connection
  EXPECT_GT(stats.ring_requests, static_cast<std::uint64_t>(kRounds));
  EXPECT_GT(stats.requests_on_workers, 0u);
  // Three I/O threads served inline and two workers the rest: the work was spread over more
  // than one I/O thread (six connections over three loops, two each).
  EXPECT_GE(handler.threads(), 3u);
  server.Stop();
}

// A new connection goes to the loop with the fewest: three loops, three connections, each
// served by a different thread.
TEST(IoLoops, EachNewConnectionGoesToTheLoopWithFewest) {
  class ThreadNoter : public RequestHandler {
   public:
    bool Handle(std::uint64_t session_id, const PeerCredentials&, const wire::Request&,
                wire::Response* response, std::vector<int>*) override {
      std::lock_guard lock(mu);
      by_session[session_id] = std::this_thread::get_id();
      response->mutable_stat();
      return true;
    }
    void OnDisconnect(std::uint64_t) override {}
    std::mutex mu;
    std::map<std::uint64_t, std::thread::id> by_session;  // guarded by mu
  } handler;
  TempSocket socket("fewest");
  UnixServerConfig config;
  config.socket_path = socket.path();
  config.io_threads = 3;
  UnixServer server(config, &handler);
  ASSERT_TRUE(server.Start().ok());
  std::vector<std::unique_ptr<BlockingConnection>> conns;
  for (int c = 0; c < 3; ++c) {
    conns.push_back(Connect(config.socket_path, true));
    ASSERT_NE(conns.back(), nullptr);
    wire::Request req;
    req.set_id(2);
    req.mutable_stat();
    wire::Response resp;
    ASSERT_TRUE(conns.back()->Call(req, &resp).ok());
  }
  std::set<std::thread::id> threads;
  {
    std::lock_guard lock(handler.mu);
    ASSERT_EQ(handler.by_session.size(), 3u);
    for (const auto& [session, thread] : handler.by_session) threads.insert(thread);
  }
  EXPECT_EQ(threads.size(), 3u);
  server.Stop();
}

}  // namespace
}  // namespace tierpool::transport
