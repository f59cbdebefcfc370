#include "transport/blocking_connection.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/un.h>

#include <cerrno>
#include <cstring>

#include "transport/spin_yield.h"

namespace tierpool::transport {

Result<std::unique_ptr<BlockingConnection>> BlockingConnection::Connect(
    const std::string& socket_path) {
  sockaddr_un addr{};
  if (socket_path.size() >= sizeof(addr.sun_path)) {
    return Status::InvalidArgument("socket path too long: " + socket_path);
  }
  UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return ErrnoStatus("socket", errno);
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, socket_path.c_str(), socket_path.size() + 1);
  if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    int err = errno;
    return Status::Unavailable("cannot connect to tierpoold at " + socket_path + ": " +
                               std::strerror(err) + " (is tierpoold running?)");
  }
  return std::unique_ptr<BlockingConnection>(new BlockingConnection(std::move(fd)));
}

Status BlockingConnection::SendRaw(const void* data, std::size_t size) {
  const auto* p = static_cast<const char*>(data);
  while (size > 0) {
    ssize_t n = ::send(fd_.get(), p, size, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      broken_ = true;
      return ErrnoStatus("send to tierpoold", errno);
    }
    p += n;
    size -= static_cast<std::size_t>(n);
    socket_sent_ += static_cast<std::uint64_t>(n);
  }
  return Status::Ok();
}

Status BlockingConnection::Send(const wire::Request& request) {
  if (broken_) return Status::Unavailable("connection to tierpoold is broken");
  // After a one-way request in the ring, the server must take it before this frame.
  TIERPOOL_RETURN_IF_ERROR(SettleRing());
  TIERPOOL_RETURN_IF_ERROR(EncodeFrameInto(request, max_frame_bytes_, &send_buffer_));
  Status s = SendRaw(send_buffer_.data(), send_buffer_.size());
  if (send_buffer_.size() > kKeptBufferBytes) std::string().swap(send_buffer_);
  return s;
}

Status BlockingConnection::ReadFull(void* data, std::size_t size, std::vector<UniqueFd>* fds,
                                    bool spin) {
  auto* p = static_cast<char*>(data);
  const auto spin_from = SteadyClock::now();
  const auto spin_until = spin_from + std::chrono::microseconds(spin ? busy_poll_us_ : 0);
  while (size > 0) {
    iovec iov{p, size};
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * 64)];
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof(control);
    int flags = MSG_CMSG_CLOEXEC;
    const auto now = spin ? SteadyClock::now() : spin_until;
    if (now < spin_until) flags |= MSG_DONTWAIT;
    ssize_t n = ::recvmsg(fd_.get(), &msg, flags);
    if (n < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        GiveWayAfter(now - spin_from);
        continue;
      }
      if (errno == EINTR) continue;
      broken_ = true;
      return ErrnoStatus("receive from tierpoold", errno);
    }
    for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
      if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
        std::size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (std::size_t i = 0; i < count; ++i) {
          int passed;
          std::memcpy(&passed, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
          if (fds != nullptr) {
            fds->emplace_back(passed);
          } else {
            ::close(passed);
          }
        }
      }
    }
    if (n == 0) {
      broken_ = true;
      return Status::Unavailable("tierpoold closed the connection");
    }
    p += n;
    size -= static_cast<std::size_t>(n);
  }
  return Status::Ok();
}

Status BlockingConnection::Receive(wire::Response* response, std::vector<UniqueFd>* fds) {
  if (broken_) return Status::Unavailable("connection to tierpoold is broken");
  std::uint8_t header[kFrameHeaderSize];
  TIERPOOL_RETURN_IF_ERROR(ReadFull(header, sizeof(header), fds, busy_poll_us_ > 0));
  auto h = DecodeFrameHeader(header, max_frame_bytes_);
  if (!h.ok()) {
    broken_ = true;
    return h.status();
  }
  buffer_.resize(h->length);
  TIERPOOL_RETURN_IF_ERROR(ReadFull(buffer_.data(), h->length, fds, false));
  const bool parsed = response->ParseFromArray(buffer_.data(), static_cast<int>(h->length));
  if (buffer_.size() > kKeptBufferBytes) std::string().swap(buffer_);
  if (!parsed) {
    broken_ = true;
    return Status::DataLoss("malformed response from tierpoold");
  }
  return Status::Ok();
}

Status BlockingConnection::Call(const wire::Request& request, wire::Response* response,
                                std::vector<UniqueFd>* fds) {
  if (ring_) {
    const std::size_t size = request.ByteSizeLong();
    if (size <= kRingAreaBytes) return RingCall(request, size, response, fds);
  }
  TIERPOOL_RETURN_IF_ERROR(Send(request));
  return ReceiveReply(request, response, fds);
}

Status BlockingConnection::EnableRing(UniqueFd fd, const wire::OpenRingReply& reply) {
  if (reply.layout_version() != kRingLayoutVersion ||
      reply.request_offset() != kRingRequestOffset || reply.reply_offset() != kRingReplyOffset ||
      reply.area_bytes() != kRingAreaBytes) {
    return Status::FailedPrecondition(
        "the server's request ring has a layout this client does "
        "not know");
  }
  auto ring = RequestRing::Map(std::move(fd), reply.ring_bytes());
  if (!ring.ok()) return ring.status();
  ring_ = std::make_unique<RequestRing>(std::move(ring).value());
  ring_seq_ = ring_->control().request_seq.load();
  return Status::Ok();
}

bool BlockingConnection::HungUp() {
  pollfd p{fd_.get(), POLLRDHUP, 0};
  return ::poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0;
}

Status BlockingConnection::SendOneWay(const wire::Request& request) {
  if (ring_) {
    const std::size_t size = request.ByteSizeLong();
    if (size <= kRingAreaBytes) {
      TIERPOOL_RETURN_IF_ERROR(RingPost(request, size));
      ring_unsettled_ = true;
      return Status::Ok();
    }
  }
  return Send(request);
}

Status BlockingConnection::RingPost(const wire::Request& request, std::size_t size) {
  if (broken_) return Status::Unavailable("connection to tierpoold is broken");
  TIERPOOL_RETURN_IF_ERROR(SettleRing());
  RingControl& c = ring_->control();
  request.SerializeWithCachedSizesToArray(reinterpret_cast<std::uint8_t*>(ring_->request_area()));
  c.request_len.store(static_cast<std::uint32_t>(size), std::memory_order_relaxed);
  c.socket_bytes.store(socket_sent_, std::memory_order_relaxed);
  c.request_seq.store(++ring_seq_);
  if (c.server_polling.load() == 0) {
    // No I/O thread polls rings: an empty frame wakes one.
    std::uint8_t doorbell[kFrameHeaderSize];
    EncodeFrameHeader(0, doorbell);
    TIERPOOL_RETURN_IF_ERROR(SendRaw(doorbell, sizeof(doorbell)));
  }
  return Status::Ok();
}

Status BlockingConnection::AwaitRing(std::uint32_t seq) {
  ring_unsettled_ = false;
  RingControl& c = ring_->control();
  // Poll for the reply as Receive does, then sleep on it; a closed socket ends the wait.
  const auto spin_from = SteadyClock::now();
  const auto spin_until = spin_from + std::chrono::microseconds(busy_poll_us_);
  while (c.reply_seq.load(std::memory_order_acquire) != seq) {
    if (const auto now = SteadyClock::now(); now < spin_until) {
      GiveWayAfter(now - spin_from);
      continue;
    }
    c.client_waiting.store(1);
    const std::uint32_t seen = c.reply_seq.load();
    if (seen != seq) FutexWait(&c.reply_seq, seen, 20'000);
    c.client_waiting.store(0);
    if (c.reply_seq.load(std::memory_order_acquire) != seq && HungUp()) {
      broken_ = true;
      return Status::Unavailable("tierpoold closed the connection");
    }
  }
  return Status::Ok();
}

Status BlockingConnection::RingCall(const wire::Request& request, std::size_t size,
                                    wire::Response* response, std::vector<UniqueFd>* fds) {
  TIERPOOL_RETURN_IF_ERROR(RingPost(request, size));
  TIERPOOL_RETURN_IF_ERROR(AwaitRing(ring_seq_));
  RingControl& c = ring_->control();
  const std::uint32_t len = c.reply_len.load(std::memory_order_relaxed);
  if (len == kReplyOnSocket) return ReceiveReply(request, response, fds);
  if (len > kRingAreaBytes ||
      !response->ParseFromArray(ring_->reply_area(), static_cast<int>(len))) {
    broken_ = true;
    return Status::DataLoss("malformed response from tierpoold in the request ring");
  }
  return Answer(request, *response);
}

Status BlockingConnection::ReceiveReply(const wire::Request& request, wire::Response* response,
                                        std::vector<UniqueFd>* fds) {
  TIERPOOL_RETURN_IF_ERROR(Receive(response, fds));
  return Answer(request, *response);
}

Status BlockingConnection::Answer(const wire::Request& request, const wire::Response& response) {
  if (response.id() == 0 && response.status().code() != 0 && request.id() != 0) {
    // The server's word on the connection itself (refused, or a frame it could not take).
    broken_ = true;
    return FromWire(response.status());
  }
  if (response.id() != request.id()) {
    broken_ = true;
    return Status::Internal("reply " + std::to_string(response.id()) + " does not answer request " +
                            std::to_string(request.id()));
  }
  return FromWire(response.status());
}

BlockingConnection::BlockingConnection(UniqueFd fd) : fd_(std::move(fd)) {
  int bytes = 0;
  socklen_t len = sizeof(bytes);
  if (::getsockopt(fd_.get(), SOL_SOCKET, SO_SNDBUF, &bytes, &len) == 0 && bytes > 0) {
    send_buffer_bytes_ = static_cast<std::size_t>(bytes);
  }
}

bool BlockingConnection::PeerClosed() {
  if (broken_) return true;
  pollfd p{fd_.get(), POLLIN | POLLRDHUP, 0};
  // Between requests nothing is due from the server: anything readable is its end closing (or a
  // last word before it closes).
  if (::poll(&p, 1, 0) > 0 && (p.revents & (POLLIN | POLLRDHUP | POLLHUP | POLLERR)) != 0) {
    broken_ = true;
  }
  return broken_;
}

}  // namespace tierpool::transport
