#include "store/metrics.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include <utility>  // before Boost.Asio

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <nlohmann/json.hpp>

#include "store/metrics_server.h"
#include "tierpool/types.h"

namespace tierpool {
namespace {

wire::StatReply SampleStat() {
  wire::StatReply s;
  s.set_server_version("9.9.9");
  s.set_uptime_ms(1500);
  auto* t = s.add_tiers();
  t->set_tier(wire::Tier(static_cast<int>(TierKind::kDram)));
  t->set_capacity(1 << 20);
  t->set_used_bytes(4096);
  t->set_state("ok");
  auto add = [&s](const std::string& n, std::uint64_t v) {
    auto* c = s.add_counters();
    c->set_name(n);
    c->set_value(v);
  };
  add("puts", 7);
  add("bytes_put", 28672);
  add("objects", 5);
  add("remote_peers", 3);
  add("lent_bytes", 1048576);
  add("remote_replicas_repaired", 4);
  add("link_dram_nvme_bytes", 100);
  add("link_dram_nvme_queued", 2);
  add("ns_team_a_quota_bytes", 1000);
  add("ns_team_a_bytes", 10);
  auto* j = s.add_jobs();
  j->set_id(3);
  j->set_name("gpt \"small\"");
  j->set_ns("train");
  auto* c = j->add_counters();
  c->set_name("late_wait_us");
  c->set_value(2500000);
  c = j->add_counters();
  c->set_name("hits");
  c->set_value(11);
  auto* h = s.add_latencies();
  h->set_op("get");
  h->set_size_le_bytes(4096);
  for (std::uint64_t b : {10, 100}) h->add_bounds_us(b);
  for (std::uint64_t n : {3, 2, 1}) h->add_counts(n);
  h->set_sum_us(250);
  h->set_count(6);
  h = s.add_latencies();
  h->set_op("move");
  h->set_from_tier("dram");
  h->set_to_tier("nvme");
  h->add_bounds_us(1000);
  h->add_counts(0);
  h->add_counts(1);
  h->set_sum_us(2000);
  h->set_count(1);
  return s;
}

TEST(Metrics, NamesFollowPrometheusConventions) {
  const std::string text = PrometheusText(SampleStat());
  // The cluster's levels are gauges (they were exported as _total counters), its events counters.
  EXPECT_NE(text.find("# TYPE tierpool_remote_peers gauge\ntierpool_remote_peers 3\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("# TYPE tierpool_lent_bytes gauge\ntierpool_lent_bytes 1048576\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("tierpool_remote_replicas_repaired_total 4\n"), std::string::npos) << text;
  EXPECT_NE(text.find("# TYPE tierpool_puts_total counter\ntierpool_puts_total 7\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("tierpool_put_bytes_total 28672\n"), std::string::npos) << text;
  EXPECT_NE(text.find("# TYPE tierpool_objects gauge\ntierpool_objects 5\n"), std::string::npos);
  EXPECT_NE(text.find("tierpool_tier_used_bytes{tier=\"dram\"} 4096\n"), std::string::npos);
  EXPECT_NE(text.find("tierpool_tier_state{tier=\"dram\",state=\"ok\"} 1\n"), std::string::npos);
  EXPECT_NE(text.find("tierpool_link_bytes_total{from=\"dram\",to=\"nvme\"} 100\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("# TYPE tierpool_link_queued gauge\n"), std::string::npos);
  EXPECT_NE(text.find("tierpool_namespace_quota_bytes{namespace=\"team_a\"} 1000\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("tierpool_namespace_bytes{namespace=\"team_a\"} 10\n"), std::string::npos);
  // Microseconds become seconds; label values are escaped.
  EXPECT_NE(text.find("tierpool_job_late_wait_seconds_total{job=\"gpt \\\"small\\\"\","
                      "namespace=\"train\",id=\"3\"} 2.5\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("tierpool_build_info{version=\"9.9.9\"} 1\n"), std::string::npos);
  EXPECT_NE(text.find("tierpool_uptime_seconds 1.5\n"), std::string::npos);
  // Histograms: cumulative buckets in seconds, +Inf equal to the count.
  EXPECT_NE(
      text.find("# TYPE tierpool_request_duration_seconds histogram\n"
                "tierpool_request_duration_seconds_bucket{op=\"get\",size_le_bytes=\"4096\","
                "le=\"1e-05\"} 3\n"
                "tierpool_request_duration_seconds_bucket{op=\"get\",size_le_bytes=\"4096\","
                "le=\"1e-04\"} 5\n"
                "tierpool_request_duration_seconds_bucket{op=\"get\",size_le_bytes=\"4096\","
                "le=\"+Inf\"} 6\n"
                "tierpool_request_duration_seconds_sum{op=\"get\",size_le_bytes=\"4096\"} "
                "0.00025\n"
                "tierpool_request_duration_seconds_count{op=\"get\",size_le_bytes=\"4096\"} 6\n"),
      std::string::npos)
      << text;
  EXPECT_NE(text.find("tierpool_move_duration_seconds_count{from=\"dram\",to=\"nvme\"} 1\n"),
            std::string::npos)
      << text;
  // Each family's HELP and TYPE come once, before its samples.
  std::size_t first = text.find("# TYPE tierpool_tier_used_bytes");
  EXPECT_EQ(text.find("# TYPE tierpool_tier_used_bytes", first + 1), std::string::npos);
}

TEST(Metrics, HealthSaysWhy) {
  wire::StatReply s = SampleStat();
  Health h = CheckHealth(s, false);
  EXPECT_TRUE(h.ok);
  EXPECT_EQ(h.status, "ok");
  auto* nvme = s.add_tiers();
  nvme->set_tier(wire::Tier(static_cast<int>(TierKind::kNvme)));
  nvme->set_state("degraded");
  nvme->set_read_errors(3);
  h = CheckHealth(s, false);
  EXPECT_FALSE(h.ok);
  EXPECT_EQ(h.status, "degraded");
  ASSERT_EQ(h.reasons.size(), 1u);
  EXPECT_NE(h.reasons[0].find("nvme is degraded: 3 read errors"), std::string::npos);
  auto* remote = s.add_tiers();
  remote->set_tier(wire::Tier(static_cast<int>(TierKind::kRemote)));
  remote->set_state("degraded");
  remote->set_state_why("peer node-b at 10.0.0.2:7100 does not answer (5 failures)");
  h = CheckHealth(s, false);
  ASSERT_EQ(h.reasons.size(), 2u);
  EXPECT_NE(h.reasons[1].find("remote is degraded: peer node-b at 10.0.0.2:7100 does not answer"),
            std::string::npos)
      << h.reasons[1];
  h = CheckHealth(SampleStat(), true);
  EXPECT_FALSE(h.ok);
  EXPECT_EQ(nlohmann::json::parse(h.ToJson())["status"], "shutting_down");
}

TEST(Metrics, ListenAddresses) {
  std::string host;
  std::uint16_t port = 0;
  EXPECT_TRUE(ParseListenAddress("127.0.0.1:9464", &host, &port).ok());
  EXPECT_EQ(host, "127.0.0.1");
  EXPECT_EQ(port, 9464);
  EXPECT_TRUE(ParseListenAddress("[::1]:0", &host, &port).ok());
  EXPECT_EQ(host, "::1");
  for (const char* bad : {"9464", ":9464", "localhost:9464", "127.0.0.1:", "127.0.0.1:70000",
                          "127.0.0.1:x", "[::1]9464", "[::1"}) {
    EXPECT_FALSE(ParseListenAddress(bad, &host, &port).ok()) << bad;
  }
  EXPECT_TRUE(MetricsServerConfig{"off"}.validate().ok());
}

namespace http = boost::beast::http;

// A raw request to the server; returns the status line's code and the body (or -1 when the
// server closed without answering).
std::pair<int, std::string> Fetch(std::uint16_t port, const std::string& raw) {
  boost::asio::io_context io;
  boost::asio::ip::tcp::socket sock(io);
  sock.connect({boost::asio::ip::make_address("127.0.0.1"), port});
  boost::asio::write(sock, boost::asio::buffer(raw));
  boost::beast::flat_buffer buf;
  http::response<http::string_body> res;
  boost::beast::error_code ec;
  http::read(sock, buf, res, ec);
  if (ec) return {-1, ec.message()};
  return {static_cast<int>(res.result_int()), res.body()};
}

TEST(MetricsServer, ServesMetricsAndHealthAndRefusesTheRest) {
  int scrapes = 0;
  MetricsServer server(MetricsServerConfig{"127.0.0.1:0"}, [&](wire::StatReply* r) {
    ++scrapes;
    *r = SampleStat();
  });
  ASSERT_TRUE(server.Start().ok());
  ASSERT_NE(server.port(), 0);
  auto [code, body] = Fetch(server.port(), "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_EQ(code, 200);
  EXPECT_NE(body.find("tierpool_puts_total 7"), std::string::npos);
  std::tie(code, body) = Fetch(server.port(), "GET /health HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_EQ(code, 200);
  EXPECT_EQ(nlohmann::json::parse(body)["status"], "ok");
  EXPECT_EQ(Fetch(server.port(), "GET /nope HTTP/1.1\r\nHost: x\r\n\r\n").first, 404);
  EXPECT_EQ(
      Fetch(server.port(), "POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n").first,
      405);
  // A header past the request limit is refused; the server goes on serving.
  std::string huge =
      "GET /metrics HTTP/1.1\r\nHost: x\r\nX-Pad: " + std::string(20000, 'a') + "\r\n\r\n";
  EXPECT_NE(Fetch(server.port(), huge).first, 200);
  EXPECT_EQ(Fetch(server.port(), "garbage\r\n\r\n").first, 400);
  server.set_shutting_down();
  std::tie(code, body) = Fetch(server.port(), "GET /health HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_EQ(code, 503);
  EXPECT_EQ(nlohmann::json::parse(body)["status"], "shutting_down");
  EXPECT_GE(scrapes, 3);
  server.Stop();
}

// A TCP connection to 127.0.0.1:port from `source` (any 127.0.0.0/8 address); -1 on failure.
int ConnectFrom(const char* source, std::uint16_t port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in from{};
  from.sin_family = AF_INET;
  ::inet_pton(AF_INET, source, &from.sin_addr);
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  to.sin_port = htons(port);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&from), sizeof from) != 0 ||
      ::connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof to) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// A liveness probe as a kubelet makes it: GET /health, one second for the whole answer.
// Returns the HTTP status, or -1 when no answer came in time.
int Probe(std::uint16_t port) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(1);
  const int fd = ConnectFrom("127.0.0.1", port);
  if (fd < 0) return -1;
  const std::string req = "GET /health HTTP/1.1\r\nHost: x\r\n\r\n";
  if (::send(fd, req.data(), req.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(req.size())) {
    ::close(fd);
    return -1;
  }
  std::string got;
  char buf[4096];
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    pollfd p{fd, POLLIN, 0};
    if (left.count() <= 0 || ::poll(&p, 1, static_cast<int>(left.count())) <= 0) break;
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    got.append(buf, static_cast<std::size_t>(n));
  }
  ::close(fd);
  if (got.rfind("HTTP/1.1 ", 0) != 0 || got.size() < 12) return -1;
  return std::stoi(got.substr(9, 3));
}

// #76 item 3: 16 silent connections, reopened as they are closed, kept every /metrics and
// /health probe from an answer for 128 s (0 of 65), on a port the shipped Kubernetes manifest
// opens to the pod network with a liveness probe behind it.
TEST(MetricsServer, SilentConnectionsCannotKeepAProbeFromItsAnswer) {
  MetricsServer server(MetricsServerConfig{"127.0.0.1:0"},
                       [](wire::StatReply* r) { *r = SampleStat(); });
  ASSERT_TRUE(server.Start().ok());
  const std::uint16_t port = server.port();
  if (int fd = ConnectFrom("127.0.0.9", port); fd < 0) {
    GTEST_SKIP() << "cannot bind 127.0.0.9 here";
  } else {
    ::close(fd);
  }
  // Attackers on eight addresses, each keeping 8 silent connections open and reopening any the
  // server closes, as fast as it can.
  std::atomic<bool> stop{false};
  std::atomic<std::uint64_t> opened{0};
  std::vector<std::thread> attackers;
  for (int a = 2; a <= 9; ++a) {
    attackers.emplace_back([&, a] {
      const std::string source = "127.0.0." + std::to_string(a);
      std::vector<int> fds;
      while (!stop) {
        for (auto it = fds.begin(); it != fds.end();) {
          pollfd p{*it, POLLIN, 0};
          if (::poll(&p, 1, 0) > 0) {  // closed by the server
            ::close(*it);
            it = fds.erase(it);
          } else {
            ++it;
          }
        }
        while (fds.size() < 8 && !stop) {
          const int fd = ConnectFrom(source.c_str(), port);
          if (fd < 0) break;
          fds.push_back(fd);
          ++opened;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
      for (int fd : fds) ::close(fd);
    });
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // every slot taken by now
  int answered = 0;
  constexpr int kProbes = 12;
  for (int i = 0; i < kProbes; ++i) {
    if (Probe(port) == 200) ++answered;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  stop = true;
  for (auto& t : attackers) t.join();
  EXPECT_EQ(answered, kProbes) << "of " << kProbes << " probes (the attackers opened " << opened
                               << " connections)";
  const auto c = server.counters();
  EXPECT_GT(c.refused + c.evicted, 0u);
  EXPECT_EQ(Probe(port), 200);
}

TEST(MetricsServer, AnAddressInUseIsAnError) {
  MetricsServer a(MetricsServerConfig{"127.0.0.1:0"}, [](wire::StatReply*) {});
  ASSERT_TRUE(a.Start().ok());
  MetricsServer b(MetricsServerConfig{"127.0.0.1:" + std::to_string(a.port())},
                  [](wire::StatReply*) {});
  Status s = b.Start();
  EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s.ToString();
}

}  // namespace
}  // namespace tierpool
