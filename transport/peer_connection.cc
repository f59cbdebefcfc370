#include "transport/peer_connection.h"

#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>

namespace tierpool::transport {

Status SplitHostPort(const std::string& address, std::string* host, std::string* port) {
  std::size_t colon = address.rfind(':');
  if (colon == std::string::npos || colon + 1 == address.size()) {
    return Status::InvalidArgument("peer address \"" + address + "\" is not host:port");
  }
  *host = address.substr(0, colon);
  *port = address.substr(colon + 1);
  if (host->size() >= 2 && host->front() == '[' && host->back() == ']') {
    *host = host->substr(1, host->size() - 2);
  }
  if (host->empty()) return Status::InvalidArgument("peer address \"" + address + "\" has no host");
  return Status::Ok();
}

namespace {

// A non-blocking connect bounded by timeout_ms, then back to blocking mode.
Result<UniqueFd> ConnectTcp(const std::string& address, std::uint32_t timeout_ms, bool* refused) {
  std::string host, port;
  TIERPOOL_RETURN_IF_ERROR(SplitHostPort(address, &host, &port));
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (int rc = ::getaddrinfo(host.c_str(), port.c_str(), &hints, &found); rc != 0) {
    return Status::Unavailable("cannot resolve peer " + address + ": " + ::gai_strerror(rc));
  }
  Status last = Status::Unavailable("no address for peer " + address);
  for (addrinfo* ai = found; ai != nullptr; ai = ai->ai_next) {
    UniqueFd fd(
        ::socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol));
    if (!fd.valid()) {
      last = ErrnoStatus("socket", errno);
      continue;
    }
    int rc = ::connect(fd.get(), ai->ai_addr, ai->ai_addrlen);
    if (rc != 0 && errno == EINPROGRESS) {
      pollfd p{fd.get(), POLLOUT, 0};
      rc = ::poll(&p, 1, static_cast<int>(timeout_ms));
      if (rc == 0) {
        last = Status::DeadlineExceeded("connecting to peer " + address + " timed out");
        continue;
      }
      int err = 0;
      socklen_t len = sizeof err;
      ::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len);
      rc = err == 0 ? 0 : -1;
      errno = err;
    }
    if (rc != 0) {
      if (errno == ECONNREFUSED && refused != nullptr) *refused = true;
      last = Status::Unavailable("cannot connect to peer " + address + ": " + std::strerror(errno));
      continue;
    }
    const int flags = ::fcntl(fd.get(), F_GETFL);
    ::fcntl(fd.get(), F_SETFL, flags & ~O_NONBLOCK);
    ::freeaddrinfo(found);
    return fd;
  }
  ::freeaddrinfo(found);
  return last;
}

}  // namespace

Result<std::unique_ptr<PeerConnection>> PeerConnection::Connect(
    const std::string& address, const PeerAuth& auth, const PeerIdentity& self,
    std::uint32_t timeout_ms, const PeerIdentity* expected, bool* refused) {
  if (refused != nullptr) *refused = false;
  auto fd = ConnectTcp(address, timeout_ms, refused);
  if (!fd.ok()) return fd.status();
  TunePeerSocket(fd->get());  // (the timeouts are the handshake's and then each call's deadline)
  auto server = ConnectHandshake(fd->get(), auth, self, PeerDeadline::After(timeout_ms), expected);
  if (!server.ok()) return server.status();
  return std::unique_ptr<PeerConnection>(
      new PeerConnection(std::move(fd).value(), std::move(server).value(), self, timeout_ms));
}

Status PeerConnection::Call(wire::peer::Request* request, const void* payload,
                            std::uint64_t payload_length, wire::peer::Response* response,
                            void* read_dst, std::uint64_t read_capacity) {
  if (broken_) return Status::Unavailable("peer connection is broken");
  request->set_id(next_id_++);
  auto fail = [this](Status s) {
    broken_ = true;
    return s;
  };
  // A slow link is not a dead one: each call may take as long as its bytes need at a floor rate,
  // as long as bytes keep moving (none for timeout_ms fails it).
  const PeerDeadline deadline = PeerDeadline::ForBytes(timeout_ms_, payload_length + read_capacity);
  if (Status s = SendPeerMessage(fd_.get(), *request, payload, payload_length, deadline); !s.ok()) {
    return fail(s);
  }
  if (Status s = ReceivePeerMessage(fd_.get(), response, deadline); !s.ok()) return fail(s);
  if (response->id() != request->id()) {
    return fail(Status::Internal("peer answered another request"));
  }
  if (response->payload_length() > 0) {
    if (read_dst == nullptr || response->payload_length() != read_capacity) {
      return fail(Status::Internal("peer sent bytes that were not asked for"));
    }
    if (Status s = ReceiveExactly(fd_.get(), read_dst, read_capacity, deadline); !s.ok()) {
      return fail(s);
    }
  }
  if (response->code() != 0) {
    const auto code = std::min<std::uint32_t>(
        response->code(), static_cast<std::uint32_t>(StatusCode::kPermissionDenied));
    return Status(static_cast<StatusCode>(code), response->message());
  }
  if (read_dst != nullptr && response->payload_length() != read_capacity) {
    return fail(Status::Internal("peer sent fewer bytes than asked for"));
  }
  return Status::Ok();
}

}  // namespace tierpool::transport
