// The peer listener: accepts TCP connections from other sidecars, authenticates each
// (transport/peer_auth.h) before reading anything else, and serves its requests through a
// PeerHandler (the lender, store/lender.h). A region's bytes go straight between the socket and
// lent memory: a write's payload is received into the region, a read's is sent from it.
//
// Threads: one accepts; each connection has a thread of its own, which blocks only on its own
// socket (bounded by deadlines: the handshake's, then each request's), so a slow, frozen or
// trickling peer holds up nobody else. Connections are limited in number: in all, per peer node,
// and while unauthenticated per network address.
//
// Locking: mu_ guards the session list and the connection counts (per node, per address); the
// handler is called with no lock held.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include <sys/socket.h>

#include "common/posix.h"
#include "common/status.h"
#include "proto/peer.pb.h"
#include "transport/peer_auth.h"
#include "transport/peer_wire.h"

namespace tierpool::transport {

struct PeerServerConfig {
  std::string listen;  // host:port; port 0 picks a free one (see PeerServer::port)
  std::uint32_t max_connections = 256;
  std::uint32_t max_connections_per_peer = 16;
  // Connections from one network address still in their handshake (unauthenticated): one
  // host cannot hold every slot by connecting and saying nothing.
  std::uint32_t max_handshakes_per_address = 16;
  std::uint32_t handshake_timeout_ms = 5000;  // the whole handshake, however bytes trickle
  // A request's frame must arrive within this; its payload and reply may take what their bytes
  // need at the floor rate, and fail when nothing moves for this long (PeerDeadline::ForBytes).
  // An idle connection waits forever (TCP keepalive finds a dead peer).
  std::uint32_t io_timeout_ms = 10'000;
  std::uint64_t max_payload_bytes = 64ull << 20;  // one write or read; borrowers send pieces
  // Also serve writes and reads over UCX (transport/ucx_peer_server.h) to borrowers that ask
  // (Info.ucx_open); the handshake, grants and probes stay on this listener.
  bool ucx = false;
  Status validate() const;
};

// Stops a write's payload from landing any more (a fence, store/lender.h): on TCP the request's
// connection is shut down (never closed); over UCX its receive is canceled. Callable from any
// thread, more than once; it does not wait.
using TransferStop = std::function<void()>;

// Bytes of a region the handler lets a request touch: data stays valid until `hold` is reset.
struct PeerTransfer {
  std::byte* data = nullptr;
  std::shared_ptr<void> hold;
};

class PeerHandler {
 public:
  virtual ~PeerHandler() = default;
  // Grant, release and info requests; fills the response's code and fields.
  virtual void Handle(const PeerIdentity& peer, const wire::peer::Request& request,
                      wire::peer::Response* response) = 0;
  // A write's or read's range, checked against the peer's region; an error refuses it. While the
  // transfer is held the handler may call `stop` (empty: none) to keep a write's payload from
  // landing (a fence, store/lender.h).
  virtual Result<PeerTransfer> BeginTransfer(const PeerIdentity& peer,
                                             const wire::peer::RegionRange& range, bool write,
                                             TransferStop stop) = 0;
  // What every reply to `peer` says of the lender's room (the room that peer may ask for).
  virtual void FillRoom(const PeerIdentity& peer, wire::peer::Response* response) = 0;
  // A peer's connection went away (or failed its handshake, with an empty identity).
  virtual void Disconnected(const PeerIdentity&) {}
};

struct PeerServerCounters {
  std::uint64_t connections = 0;    // accepted and authenticated
  std::uint64_t auth_failures = 0;  // closed in the handshake
  // Handshakes and requests cut at their deadline (a peer too slow, or trickling on purpose).
  std::uint64_t timed_out = 0;
  std::uint64_t refused = 0;  // over a connection limit
  std::uint64_t requests = 0;
  std::uint64_t bytes_in = 0;
  std::uint64_t bytes_out = 0;
  // Over UCX (PeerServerConfig.ucx): requests, refusals and bytes.
  std::uint64_t ucx_requests = 0;
  std::uint64_t ucx_refused = 0;
  std::uint64_t ucx_bytes_in = 0;
  std::uint64_t ucx_bytes_out = 0;
};

class UcxPeerServer;

class PeerServer {
 public:
  PeerServer(PeerServerConfig config, PeerAuth auth, PeerIdentity self, PeerHandler* handler);
  ~PeerServer();
  Status Start();
  // Closes the listener and every connection, joins their threads.
  void Stop();
  std::uint16_t port() const { return port_; }
  PeerServerCounters counters() const;
  // For tests: the UCX data path's thread sleeps `ms` (PeerServerConfig.ucx).
  void StallUcxForTest(std::uint32_t ms);
  PeerIdentity self() const { return {self_node_, incarnation_.load()}; }

 private:
  struct Session {
    UniqueFd fd;
    std::thread thread;
    std::atomic<bool> done{false};
    std::string address;  // the remote address, counted in handshakes_ until authenticated
    PeerIdentity peer;
  };
  static std::string AddressOf(const sockaddr_storage& from);
  void AcceptLoop();
  void Serve(Session* session);
  // One request; false when the connection must close.
  bool ServeOne(Session* session, const wire::peer::Request& request);
  void Reap(bool all);

  const PeerServerConfig config_;
  const PeerAuth auth_;
  const std::string self_node_;
  std::atomic<std::uint64_t> incarnation_;
  PeerHandler* const handler_;
  std::unique_ptr<UcxPeerServer> ucx_;  // with config_.ucx, from Start
  UniqueFd listener_;
  std::uint16_t port_ = 0;
  std::thread acceptor_;
  std::atomic<bool> stopping_{false};
  mutable std::mutex mu_;
  std::list<std::unique_ptr<Session>> sessions_;     // guarded by mu_
  std::map<std::string, std::uint32_t> per_peer_;    // guarded by mu_: authenticated, by node
  std::map<std::string, std::uint32_t> handshakes_;  // guarded by mu_: by remote address
  std::atomic<std::uint64_t> connections_{0}, auth_failures_{0}, timed_out_{0}, refused_{0},
      requests_{0}, bytes_in_{0}, bytes_out_{0};
  // Counts s in timed_out_ when it says the exchange ran out of time.
  void CountTimeout(const Status& s) {
    if (s.code() == StatusCode::kDeadlineExceeded) ++timed_out_;
  }
};

}  // namespace tierpool::transport
