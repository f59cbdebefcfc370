// The server side of the transport: a Boost.Asio acceptor on a Unix socket and one session per
// connection. A session reads a frame, hands the request to the RequestHandler, writes the reply,
// then reads the next frame. Framing errors close the connection; request errors are replies.
//
// No client can hold the others up: frames are read into buffers that grow as bytes arrive
// (never allocated at the declared length), within a server-wide bound; every reply, descriptors
// included, is written asynchronously; a request the handler says may wait runs on a worker
// thread, not an I/O thread; connections that say nothing, or trickle a frame, are closed; and
// one process or user may hold only so many connections.
//
// Threads: I/O threads run the sessions, each connection on one thread (its own io_context:
// io_loop.h); worker threads run the requests that may wait. A session handles one request at a
// time, so the handler never sees two calls for one session at once, and never OnDisconnect during
// Handle.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/status.h"
#include "transport/framing.h"

namespace tierpool::transport {

// Who is on the other end of a connection, from the kernel (SO_PEERCRED).
struct PeerCredentials {
  pid_t pid = 0;
  uid_t uid = 0;
  gid_t gid = 0;                // primary group
  std::vector<gid_t> groups;    // supplementary groups (SO_PEERGROUPS), at most kMaxPeerGroups
  bool InGroup(gid_t g) const;  // primary or supplementary
};
inline constexpr std::size_t kMaxPeerGroups = 4096;

class RequestHandler {
 public:
  virtual ~RequestHandler() = default;
  // Fills response and may add descriptors to pass with it. Returns false when the request is
  // one-way (no reply is sent). `peer` is who the kernel says is on the other end. Called from
  // I/O or worker threads; must be thread-safe.
  virtual bool Handle(std::uint64_t session_id, const PeerCredentials& peer,
                      const wire::Request& request, wire::Response* response,
                      std::vector<int>* fds) = 0;
  // True when Handle might wait (for a move, for room): the request then runs on a worker
  // thread. Called on an I/O thread; must be quick. Otherwise Handle runs on the I/O thread in a
  // NoWaitScope (common/no_wait_scope.h); where it refuses a wait there it is called again on a
  // worker with the same request and the response as it left it, and carries on from there.
  virtual bool MayBlock(std::uint64_t session_id, const wire::Request& request) {
    (void)session_id;
    (void)request;
    return false;
  }
  // True while the session holds something (a reservation, a pin) that an idle timeout must not
  // take from it.
  virtual bool Holds(std::uint64_t session_id) {
    (void)session_id;
    return false;
  }
  // The connection is gone: release what it held.
  virtual void OnDisconnect(std::uint64_t session_id) = 0;
};

struct UnixServerConfig {
  std::string socket_path;
  std::uint32_t socket_mode = 0600;
  std::uint32_t max_frame_bytes = kDefaultMaxFrameBytes;
  int io_threads = 1;
  // Requests that may wait (for a move or for room) run on these.
  int worker_threads = 4;
  std::uint32_t max_connections = 1024;
  std::uint32_t max_connections_per_process = 256;  // 0: no limit
  std::uint32_t max_connections_per_user = 0;       // 0: no limit
  // A connection that sends no complete first frame within this is closed (0: never).
  std::uint32_t handshake_timeout_ms = 5'000;
  // A connection idle this long that holds nothing is closed (0: never).
  std::uint32_t idle_timeout_ms = 300'000;
  // A frame must arrive, and a reply leave, within this once begun (0: no limit).
  std::uint32_t frame_timeout_ms = 30'000;
  // Bytes of partly read frames held across all connections; past it, reads wait.
  std::uint64_t max_buffered_bytes = 1ull << 30;
  // After each burst of work, an I/O thread polls for at least this long before it blocks, so a
  // client's next request does not pay a thread wakeup. 0 turns polling off.
  std::uint32_t busy_poll_us = 50;
  // ...and up to this long when the gaps between its bursts have been longer (a client copying
  // a large object between a reserve's reply and its commit: poll_window.h). At or below
  // busy_poll_us: a fixed window.
  std::uint32_t busy_poll_max_us = 500;
  // Connections that may have a shared-memory request ring (request_ring.h), each 132 KiB; past
  // it, clients keep to the socket. 0, or busy_poll_us 0 (nobody would poll them), turns rings
  // off.
  std::uint32_t max_request_rings = 256;
  Status validate() const;
};

struct TransportStats {
  std::uint64_t connections_accepted = 0;
  std::uint64_t connections_active = 0;
  std::uint64_t connections_refused = 0;  // all refusals, the per-client ones included
  std::uint64_t connections_refused_per_process = 0;
  std::uint64_t connections_refused_per_user = 0;
  std::uint64_t frames_received = 0;
  std::uint64_t bad_frames = 0;          // bad magic, wrong version, oversized length
  std::uint64_t malformed_messages = 0;  // framing fine, payload not a Request
  std::uint64_t unknown_messages = 0;    // a Request of a type this server does not know
  std::uint64_t handshake_timeouts = 0;
  std::uint64_t idle_timeouts = 0;
  std::uint64_t frame_timeouts = 0;       // a frame or a reply took longer than allowed
  std::uint64_t requests_on_workers = 0;  // requests the handler said may wait
  // Requests the handler said would not wait that found they must (a snapshot gone stale):
  // carried on on a worker instead of waiting on an I/O thread.
  std::uint64_t requests_moved_to_workers = 0;
  std::uint64_t frame_bytes_buffered = 0;  // now, across connections
  std::uint64_t frame_buffer_waits = 0;    // reads that waited for the server-wide bound
  std::uint64_t io_wakeups = 0;  // times an I/O thread blocked with no work and woke to some
  std::uint64_t request_rings_open = 0;
  std::uint64_t ring_requests = 0;   // requests that came through a ring
  std::uint64_t ring_doorbells = 0;  // of them, the ones whose client had to wake an I/O thread
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
