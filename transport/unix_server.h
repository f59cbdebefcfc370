// The server side of the transport: a Boost.Asio acceptor on a Unix socket and one session per
// connection. A session reads a frame, hands the request to the RequestHandler, writes the reply,
// then reads the next frame. Framing errors close the connection; request errors are replies.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/status.h"
#include "transport/framing.h"

namespace tierpool::transport {

class RequestHandler {
 public:
  virtual ~RequestHandler() = default;
  // Fills response and may add descriptors to pass with it. Returns false when the request is
  // one-way (no reply is sent). Called from I/O threads; must be thread-safe.
  virtual bool Handle(std::uint64_t session_id, const wire::Request& request,
                      wire::Response* response, std::vector<int>* fds) = 0;
  // The connection is gone: release what it held.
  virtual void OnDisconnect(std::uint64_t session_id) = 0;
};

struct UnixServerConfig {
  std::string socket_path;
  std::uint32_t socket_mode = 0600;
  std::uint32_t max_frame_bytes = kDefaultMaxFrameBytes;
  int io_threads = 1;
  std::uint32_t max_connections = 1024;
  // After each burst of work, an I/O thread polls for this long before it blocks, so a client's
  // next request does not pay a thread wakeup. 0 turns it off.
  std::uint32_t busy_poll_us = 50;
  Status validate() const;
};

struct TransportStats {
  std::uint64_t connections_accepted = 0;
  std::uint64_t connections_active = 0;
  std::uint64_t connections_refused = 0;
  std::uint64_t frames_received = 0;
  std::uint64_t bad_frames = 0;          // bad magic, wrong version, oversized length
  std::uint64_t malformed_messages = 0;  // framing fine, payload not a Request
  std::uint64_t unknown_messages = 0;    // a Request of a type this server does not know
};

class UnixServer {
 public:
  UnixServer(UnixServerConfig config, RequestHandler* handler);
  ~UnixServer();
  UnixServer(const UnixServer&) = delete;
  UnixServer& operator=(const UnixServer&) = delete;

  // Binds (replacing a stale socket file, refusing a live one), listens, starts the I/O threads.
  Status Start();
  void Stop();
  TransportStats stats() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace tierpool::transport
