// Blocking frame I/O on a peer TCP socket, and the handshake both sides run. A frame is the Unix
// protocol's 8-byte header (transport/framing.h) and a peer protobuf message; a region's bytes
// follow it raw (never copied into a message), written with one gather write.
//
// Thread safety: none; one thread uses a socket at a time. Every call may block up to the
// socket's timeouts (SetSocketTimeouts), after which it fails with DEADLINE_EXCEEDED; given a
// PeerDeadline, it also fails once that passes, however the bytes trickle in.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

#include "common/status.h"
#include "proto/peer.pb.h"
#include "transport/peer_auth.h"

namespace tierpool::transport {

inline constexpr std::uint32_t kPeerProtocolVersion = 2;
// Regions one Info may ask about (Info.regions): the reply stays far below a message's limit.
inline constexpr int kMaxInfoRegions = 4096;
// Peer messages are small: the bytes of a region travel after them.
inline constexpr std::uint32_t kMaxPeerMessageBytes = 64u << 10;

Status SetSocketTimeouts(int fd, std::uint32_t timeout_ms);

// When a whole exchange (a handshake; a request, its payload and its reply) must be over. A
// socket's timeouts bound each call only: a peer that sends a byte just within each would hold
// the connection, and the thread serving it, forever. A deadline made ForBytes also fails when
// nothing moves for its stall time (each blocking call is armed with at most that), and gives
// the whole exchange the time its bytes need at kPeerFloorBytesPerSecond: a slow link (a few
// MB/s, shared by a borrower's I/O threads) finishes a 16 MiB piece, and a trickling peer is
// still cut within a bound (a second per MiB).
inline constexpr std::uint64_t kPeerFloorBytesPerSecond = 1u << 20;

class PeerDeadline {
 public:
  PeerDeadline() = default;  // none: the socket's timeouts alone
  static PeerDeadline After(std::uint32_t ms) {
    PeerDeadline d;
    d.at_ = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
    return d;
  }
  static PeerDeadline ForBytes(std::uint32_t stall_ms, std::uint64_t bytes) {
    PeerDeadline d;
    d.stall_ = std::chrono::milliseconds(stall_ms);
    d.at_ = std::chrono::steady_clock::now() + std::chrono::milliseconds(stall_ms) +
            std::chrono::milliseconds(bytes * 1000 / kPeerFloorBytesPerSecond);
    return d;
  }
  // Sets the socket's receive (or send) timeout to the time left before one call blocks (at
  // most the stall time); DEADLINE_EXCEEDED when none is left.
  Status Arm(int fd, bool sending) const;
  // When the exchange as a whole must be over (none: no deadline).
  std::optional<std::chrono::steady_clock::time_point> at() const { return at_; }

 private:
  std::optional<std::chrono::steady_clock::time_point> at_;
  std::optional<std::chrono::milliseconds> stall_;
};

// TCP_NODELAY, keepalive, and socket buffers sized for bulk transfers.
void TunePeerSocket(int fd);

// Writes the frame and then `payload_length` bytes of payload (may be null when 0).
Status SendPeerMessage(int fd, const google::protobuf::MessageLite& message, const void* payload,
                       std::uint64_t payload_length, const PeerDeadline& deadline = {});
Status ReceivePeerMessage(int fd, google::protobuf::MessageLite* message,
                          const PeerDeadline& deadline = {});
// Exactly `length` bytes into dst.
Status ReceiveExactly(int fd, void* dst, std::uint64_t length, const PeerDeadline& deadline = {});
// Reads and drops `length` bytes (a payload whose request was refused), in bounded pieces.
Status DiscardBytes(int fd, std::uint64_t length, const PeerDeadline& deadline = {});

// The listener's half of the handshake: challenge, check the proof, prove itself. Returns who
// connected; any failure means the connection must be closed.
Result<PeerIdentity> AcceptHandshake(int fd, const PeerAuth& auth, const PeerIdentity& self,
                                     const PeerDeadline& deadline = {});
// The connecting half. Returns who the listener is (checked against its proof). With `expected`
// (the member this node meant to reach), a listener that says it is anyone else gets no proof:
// UNAVAILABLE, before this side proves anything.
Result<PeerIdentity> ConnectHandshake(int fd, const PeerAuth& auth, const PeerIdentity& self,
                                      const PeerDeadline& deadline = {},
                                      const PeerIdentity* expected = nullptr);

}  // namespace tierpool::transport
