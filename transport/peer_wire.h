// Blocking frame I/O on a peer TCP socket, and the handshake both sides run. A frame is the Unix
// protocol's 8-byte header (transport/framing.h) and a peer protobuf message; a region's bytes
// follow it raw (never copied into a message), written with one gather write.
//
// Thread safety: none; one thread uses a socket at a time. Every call may block up to the
// socket's timeouts (SetSocketTimeouts), after which it fails with DEADLINE_EXCEEDED.
#pragma once

#include <cstdint>
#include <string>

#include "common/status.h"
#include "proto/peer.pb.h"
#include "transport/peer_auth.h"

namespace tierpool::transport {

inline constexpr std::uint32_t kPeerProtocolVersion = 1;
// Peer messages are small: the bytes of a region travel after them.
inline constexpr std::uint32_t kMaxPeerMessageBytes = 64u << 10;

Status SetSocketTimeouts(int fd, std::uint32_t timeout_ms);
// TCP_NODELAY, keepalive, and socket buffers sized for bulk transfers.
void TunePeerSocket(int fd);

// Writes the frame and then `payload_length` bytes of payload (may be null when 0).
Status SendPeerMessage(int fd, const google::protobuf::MessageLite& message, const void* payload,
                       std::uint64_t payload_length);
Status ReceivePeerMessage(int fd, google::protobuf::MessageLite* message);
// Exactly `length` bytes into dst.
Status ReceiveExactly(int fd, void* dst, std::uint64_t length);
// Reads and drops `length` bytes (a payload whose request was refused), in bounded pieces.
Status DiscardBytes(int fd, std::uint64_t length);

// The listener's half of the handshake: challenge, check the proof, prove itself. Returns who
// connected; any failure means the connection must be closed.
Result<PeerIdentity> AcceptHandshake(int fd, const PeerAuth& auth, const PeerIdentity& self);
// The connecting half. Returns who the listener is (checked against its proof).
Result<PeerIdentity> ConnectHandshake(int fd, const PeerAuth& auth, const PeerIdentity& self);

}  // namespace tierpool::transport
