// The borrowing side of a peer connection: a blocking, authenticated TCP connection to another
// sidecar's peer listener, one request at a time. Each call (with its payload and reply) fails
// when no byte moves for the connection's timeout, and in any case once its bytes have had the
// time they need at a floor rate (PeerDeadline::ForBytes): a slow link finishes, and a lender
// that trickles its reply costs a bounded wait.
// tiers/remote_tier.h keeps a pool of these per peer and calls them from its own I/O threads.
//
// Thread safety: none; one thread uses a connection at a time. Every call is bounded by the
// timeout given to Connect.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "common/posix.h"
#include "transport/peer_auth.h"
#include "transport/peer_wire.h"

namespace tierpool::transport {

class PeerConnection {
 public:
  // Connects to "host:port" ("[v6]:port" for IPv6), runs the handshake, and bounds every later
  // send and receive by timeout_ms. UNAVAILABLE when nobody listens, or when the listener is
  // not `expected` (the member meant; null: anyone with the secret); PERMISSION_DENIED when
  // either side fails the other's proof. *refused (when given) says whether the address refused
  // the connection outright: nothing listens there, so the process that did is gone.
  static Result<std::unique_ptr<PeerConnection>> Connect(
      const std::string& address, const PeerAuth& auth, const PeerIdentity& self,
      std::uint32_t timeout_ms, const PeerIdentity* expected = nullptr, bool* refused = nullptr);

  // Sends the request (and payload_length bytes of payload after it), then reads the reply. A
  // reply that carries bytes (a read) puts them in read_dst, which has room for read_capacity.
  // The reply's own error comes back as its Status with the connection still usable; I/O errors
  // and protocol violations mark the connection broken.
  Status Call(wire::peer::Request* request, const void* payload, std::uint64_t payload_length,
              wire::peer::Response* response, void* read_dst = nullptr,
              std::uint64_t read_capacity = 0);

  // The listener, as it proved itself in the handshake.
  const PeerIdentity& server() const { return server_; }
  // Who this side proved to be: a connection made as an earlier incarnation is not reused.
  const PeerIdentity& client() const { return client_; }
  bool broken() const { return broken_; }

 private:
  PeerConnection(UniqueFd fd, PeerIdentity server, PeerIdentity client, std::uint32_t timeout_ms)
      : fd_(std::move(fd)),
        server_(std::move(server)),
        client_(std::move(client)),
        timeout_ms_(timeout_ms) {}
  UniqueFd fd_;
  PeerIdentity server_;
  PeerIdentity client_;
  std::uint32_t timeout_ms_;  // with no byte moving, in a call (and the floor rate's base)
  std::uint64_t next_id_ = 1;
  bool broken_ = false;
};

// Splits "host:port" / "[v6]:port"; INVALID_ARGUMENT when malformed.
Status SplitHostPort(const std::string& address, std::string* host, std::string* port);

}  // namespace tierpool::transport
