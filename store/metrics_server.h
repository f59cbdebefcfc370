// The monitoring endpoint: HTTP on a loopback (or chosen) TCP address, serving GET /metrics
// (Prometheus text) and GET /health (200 or 503 with a JSON body). Boost.Beast on one thread
// of its own: a scrape never touches the transport's I/O threads.
//
// Hostile input: a request must arrive within request_timeout_ms (1 s: a probe or a scraper
// sends its request at once) and fit max_request_bytes. At most max_connections are open at
// once and max_connections_per_address from one address (more from it are closed at accept);
// when every slot is taken, the connection that has waited longest without sending its request
// makes room for the new one. Silent connections, however many and however often reopened,
// cannot keep a liveness probe from an answer. Only GET and HEAD.
//
// Locking: Start/Stop from one thread. The stat source is called on the server's thread and
// must be thread-safe (StoreService::Stat is); set_shutting_down is safe from any thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "common/status.h"
#include "proto/tierpool.pb.h"

namespace tierpool {

struct MetricsServerConfig {
  // host:port ("127.0.0.1:9464", "[::1]:9464", "0.0.0.0:9464"; port 0 picks a free one), or
  // "off".
  std::string listen = "127.0.0.1:9464";
  std::uint32_t request_timeout_ms = 1000;  // from accept to the whole request read
  std::uint32_t write_timeout_ms = 10000;   // to send the reply (a large /metrics)
  std::uint32_t max_request_bytes = 8192;
  std::uint32_t max_connections = 16;
  std::uint32_t max_connections_per_address = 4;
  bool enabled() const { return listen != "off"; }
  Status validate() const;
};

// Splits "host:port" / "[v6]:port"; INVALID_ARGUMENT naming what is wrong.
Status ParseListenAddress(const std::string& listen, std::string* host, std::uint16_t* port);

class MetricsServer {
 public:
  using StatSource = std::function<void(wire::StatReply*)>;
  MetricsServer(MetricsServerConfig config, StatSource source);
  ~MetricsServer();
  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;

  // Binds and starts serving; an address in use or a bad host is an error.
  Status Start();
  void Stop();
  // The bound port (the chosen one when the config said 0).
  std::uint16_t port() const { return port_; }
  // /health answers 503 "shutting_down" from now on.
  void set_shutting_down() { shutting_down_ = true; }

  struct Counters {
    std::uint64_t served = 0;     // requests answered
    std::uint64_t refused = 0;    // closed at accept: their address had its share, or no slot
                                  // held a connection still waiting for its request
    std::uint64_t evicted = 0;    // closed before their request came, to make room for a newer one
    std::uint64_t timed_out = 0;  // their request did not come in time
  };
  Counters counters() const;

 private:
  struct Impl;
  MetricsServerConfig config_;
  StatSource source_;
  std::unique_ptr<Impl> impl_;
  std::thread thread_;
  std::uint16_t port_ = 0;
  std::atomic<bool> shutting_down_{false};
};

}  // namespace tierpool
