// The monitoring endpoint: HTTP on a loopback (or chosen) TCP address, serving GET /metrics
// (Prometheus text) and GET /health (200 or 503 with a JSON body). Boost.Beast on one thread
// of its own: a scrape never touches the transport's I/O threads.
//
// Hostile input: a request must arrive within request_timeout_ms and fit max_request_bytes;
// at most max_connections are served at once (others are closed at accept). Only GET and HEAD.
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
  std::uint32_t request_timeout_ms = 5000;
  std::uint32_t max_request_bytes = 8192;
  std::uint32_t max_connections = 16;
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
