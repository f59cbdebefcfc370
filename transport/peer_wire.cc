#include "transport/peer_wire.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <algorithm>
#include <cerrno>
#include <vector>

#include "transport/framing.h"

namespace tierpool::transport {
namespace {

Status IoStatus(const char* what, int err) {
  if (err == EAGAIN || err == EWOULDBLOCK) {
    return Status::DeadlineExceeded(std::string("peer ") + what + " timed out");
  }
  return ErrnoStatus(std::string("peer ") + what, err);
}

Status WriteAll(int fd, iovec* iov, int count, const PeerDeadline& deadline) {
  while (count > 0) {
    TIERPOOL_RETURN_IF_ERROR(deadline.Arm(fd, /*sending=*/true));
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = static_cast<std::size_t>(count);
    const ssize_t n = ::sendmsg(fd, &msg, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      return IoStatus("send", errno);
    }
    auto left = static_cast<std::size_t>(n);
    while (count > 0 && left >= iov->iov_len) {
      left -= iov->iov_len;
      ++iov;
      --count;
    }
    if (count > 0) {
      iov->iov_base = static_cast<char*>(iov->iov_base) + left;
      iov->iov_len -= left;
    }
  }
  return Status::Ok();
}

// One of the socket's timeouts (SO_RCVTIMEO or SO_SNDTIMEO); `timeout` is positive (0 would
// mean none).
Status SetTimeout(int fd, int option, std::chrono::microseconds timeout) {
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(timeout.count() / 1'000'000);
  tv.tv_usec = static_cast<suseconds_t>(timeout.count() % 1'000'000);
  if (::setsockopt(fd, SOL_SOCKET, option, &tv, sizeof tv) != 0) {
    return ErrnoStatus("setsockopt timeout", errno);
  }
  return Status::Ok();
}

}  // namespace

Status SetSocketTimeouts(int fd, std::uint32_t timeout_ms) {
  const std::chrono::microseconds timeout = std::chrono::milliseconds(timeout_ms);
  TIERPOOL_RETURN_IF_ERROR(SetTimeout(fd, SO_RCVTIMEO, timeout));
  return SetTimeout(fd, SO_SNDTIMEO, timeout);
}

Status PeerDeadline::Arm(int fd, bool sending) const {
  if (!at_) return Status::Ok();
  auto left = std::chrono::ceil<std::chrono::microseconds>(*at_ - std::chrono::steady_clock::now());
  if (left.count() <= 0) return Status::DeadlineExceeded("peer exchange ran past its deadline");
  // A blocking call returns what moved once its timeout passes; the next call is armed anew, so
  // only a stall as long as this fails the exchange early.
  if (stall_) left = std::min<std::chrono::microseconds>(left, *stall_);
  return SetTimeout(fd, sending ? SO_SNDTIMEO : SO_RCVTIMEO, left);
}

void TunePeerSocket(int fd) {
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  ::setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
  int buf = 4 << 20;
  ::setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &buf, sizeof buf);
  ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &buf, sizeof buf);
}

Status SendPeerMessage(int fd, const google::protobuf::MessageLite& message, const void* payload,
                       std::uint64_t payload_length, const PeerDeadline& deadline) {
  const std::size_t size = message.ByteSizeLong();
  if (size > kMaxPeerMessageBytes) return Status::InvalidArgument("peer message too large");
  std::string frame(kFrameHeaderSize + size, '\0');
  EncodeFrameHeader(static_cast<std::uint32_t>(size),
                    reinterpret_cast<std::uint8_t*>(frame.data()));
  if (!message.SerializeToArray(frame.data() + kFrameHeaderSize, static_cast<int>(size))) {
    return Status::Internal("cannot serialize a peer message");
  }
  iovec iov[2] = {{frame.data(), frame.size()},
                  {const_cast<void*>(payload), static_cast<std::size_t>(payload_length)}};
  return WriteAll(fd, iov, payload_length > 0 ? 2 : 1, deadline);
}

Status ReceiveExactly(int fd, void* dst, std::uint64_t length, const PeerDeadline& deadline) {
  auto* p = static_cast<char*>(dst);
  while (length > 0) {
    TIERPOOL_RETURN_IF_ERROR(deadline.Arm(fd, /*sending=*/false));
    const ssize_t n = ::recv(fd, p, static_cast<std::size_t>(length), MSG_WAITALL);
    if (n < 0) {
      if (errno == EINTR) continue;
      return IoStatus("receive", errno);
    }
    if (n == 0) return Status::Unavailable("peer closed the connection");
    p += n;
    length -= static_cast<std::uint64_t>(n);
  }
  return Status::Ok();
}

Status DiscardBytes(int fd, std::uint64_t length, const PeerDeadline& deadline) {
  std::vector<char> sink(std::min<std::uint64_t>(length, 1u << 20));
  while (length > 0) {
    const std::uint64_t n = std::min<std::uint64_t>(length, sink.size());
    TIERPOOL_RETURN_IF_ERROR(ReceiveExactly(fd, sink.data(), n, deadline));
    length -= n;
  }
  return Status::Ok();
}

Status ReceivePeerMessage(int fd, google::protobuf::MessageLite* message,
                          const PeerDeadline& deadline) {
  std::uint8_t header[kFrameHeaderSize];
  TIERPOOL_RETURN_IF_ERROR(ReceiveExactly(fd, header, sizeof header, deadline));
  auto h = DecodeFrameHeader(header, kMaxPeerMessageBytes);
  if (!h.ok()) return h.status();
  std::string body(h->length, '\0');
  TIERPOOL_RETURN_IF_ERROR(ReceiveExactly(fd, body.data(), body.size(), deadline));
  if (!message->ParseFromString(body)) return Status::InvalidArgument("malformed peer message");
  return Status::Ok();
}

Result<PeerIdentity> AcceptHandshake(int fd, const PeerAuth& auth, const PeerIdentity& self,
                                     const PeerDeadline& deadline) {
  wire::peer::ServerHello hello;
  hello.set_protocol_version(kPeerProtocolVersion);
  hello.set_nonce(PeerNonce());
  hello.set_node_id(self.node_id);
  hello.set_incarnation(self.incarnation);
  TIERPOOL_RETURN_IF_ERROR(SendPeerMessage(fd, hello, nullptr, 0, deadline));
  wire::peer::ClientHello client;
  TIERPOOL_RETURN_IF_ERROR(ReceivePeerMessage(fd, &client, deadline));
  wire::peer::ServerProof proof;
  const PeerIdentity who{client.node_id(), client.incarnation()};
  Status refused;
  if (client.protocol_version() != kPeerProtocolVersion) {
    refused = Status::FailedPrecondition(
        "peer protocol version " + std::to_string(client.protocol_version()) +
        " is not spoken here (" + std::to_string(kPeerProtocolVersion) + ")");
  } else if (client.nonce().size() != kPeerNonceBytes || client.node_id().empty() ||
             client.node_id().size() > 255 || client.incarnation() == 0 ||
             !auth.Verify(client.mac(), "client", hello.nonce(), client.nonce(), who, self)) {
    refused = Status::PermissionDenied("peer authentication failed");
  }
  if (!refused.ok()) {
    proof.set_code(static_cast<std::uint32_t>(refused.code()));
    proof.set_message(refused.message());
    (void)SendPeerMessage(fd, proof, nullptr, 0, deadline);
    return refused;
  }
  proof.set_mac(auth.Mac("server", client.nonce(), hello.nonce(), self, who));
  TIERPOOL_RETURN_IF_ERROR(SendPeerMessage(fd, proof, nullptr, 0, deadline));
  return who;
}

Result<PeerIdentity> ConnectHandshake(int fd, const PeerAuth& auth, const PeerIdentity& self,
                                      const PeerDeadline& deadline, const PeerIdentity* expected) {
  wire::peer::ServerHello hello;
  TIERPOOL_RETURN_IF_ERROR(ReceivePeerMessage(fd, &hello, deadline));
  if (hello.nonce().size() != kPeerNonceBytes) {
    return Status::PermissionDenied("the peer's challenge is malformed");
  }
  const PeerIdentity server{hello.node_id(), hello.incarnation()};
  if (expected != nullptr &&
      (server.node_id != expected->node_id || server.incarnation != expected->incarnation)) {
    // A restarted peer at that address, or a relay passing another node's challenge through:
    // either way not the member meant, and this node proves nothing to it.
    return Status::Unavailable("the peer says it is " + server.node_id + " incarnation " +
                               std::to_string(server.incarnation) + ", not " + expected->node_id +
                               " incarnation " + std::to_string(expected->incarnation));
  }
  wire::peer::ClientHello client;
  client.set_protocol_version(kPeerProtocolVersion);
  client.set_nonce(PeerNonce());
  client.set_node_id(self.node_id);
  client.set_incarnation(self.incarnation);
  client.set_mac(auth.Mac("client", hello.nonce(), client.nonce(), self, server));
  TIERPOOL_RETURN_IF_ERROR(SendPeerMessage(fd, client, nullptr, 0, deadline));
  wire::peer::ServerProof proof;
  TIERPOOL_RETURN_IF_ERROR(ReceivePeerMessage(fd, &proof, deadline));
  if (proof.code() != 0) {
    return Status(static_cast<StatusCode>(std::min<std::uint32_t>(
                      proof.code(), static_cast<std::uint32_t>(StatusCode::kPermissionDenied))),
                  "peer refused us: " + proof.message());
  }
  if (!auth.Verify(proof.mac(), "server", client.nonce(), hello.nonce(), server, self)) {
    return Status::PermissionDenied("the peer did not prove it knows the secret");
  }
  return server;
}

}  // namespace tierpool::transport
