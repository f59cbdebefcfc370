// The client side of a connection: blocking I/O on a Unix stream socket, one frame at a time,
// receiving file descriptors passed with a frame (SCM_RIGHTS); with a request ring
// (request_ring.h), Call goes through shared memory instead when the request fits. Not
// thread-safe: callers serialize.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "common/posix.h"
#include "transport/framing.h"
#include "transport/request_ring.h"

namespace tierpool::transport {

class BlockingConnection {
 public:
  // Connects to a Unix socket path. UNAVAILABLE when nobody listens there.
  static Result<std::unique_ptr<BlockingConnection>> Connect(const std::string& socket_path);

  Status Send(const wire::Request& request);
  // A request with no reply: through the ring when there is one and it fits (the next use of
  // the connection first waits for the server to have taken it), else Send.
  Status SendOneWay(const wire::Request& request);
  // Reads one frame. Descriptors passed with it are appended to fds (when fds is not null; else
  // closed).
  Status Receive(wire::Response* response, std::vector<UniqueFd>* fds = nullptr);
  // Send, then ReceiveReply; through the ring when there is one and the request fits it (the
  // reply then comes through the ring, or as a frame when the server says so).
  Status Call(const wire::Request& request, wire::Response* response,
              std::vector<UniqueFd>* fds = nullptr);
  // Receive, checking that the reply answers `request` (sent earlier: requests may be sent back
  // to back and their replies read in the same order, as the server answers them).
  Status ReceiveReply(const wire::Request& request, wire::Response* response,
                      std::vector<UniqueFd>* fds = nullptr);

  // Raw bytes, for tests that speak a broken protocol on purpose.
  Status SendRaw(const void* data, std::size_t size);

  void set_max_frame_bytes(std::uint32_t v) { max_frame_bytes_ = v; }
  // Before blocking for a reply, poll for this long: a blocked thread's wakeup costs tens of
  // microseconds on virtual machines, more than the whole request. 0 turns it off.
  void set_busy_poll_us(std::uint32_t v) { busy_poll_us_ = v; }
  int fd() const { return fd_.get(); }
  // The socket's send buffer (SO_SNDBUF, read at connect; 0 if unknown): how many request bytes
  // may be in flight before a send blocks until the server reads.
  std::size_t send_buffer_bytes() const { return send_buffer_bytes_; }
  bool broken() const { return broken_; }
  // Calls go through this ring (the server's OpenRingReply and the memfd passed with it) from
  // now on. FAILED_PRECONDITION for a layout this client does not know (the socket stays).
  Status EnableRing(UniqueFd fd, const wire::OpenRingReply& reply);
  bool has_ring() const { return ring_ != nullptr; }
  // True when the server has closed its end (an idle connection it timed out): a poll, no
  // blocking. A connection found closed is marked broken.
  bool PeerClosed();

 private:
  explicit BlockingConnection(UniqueFd fd);
  Status ReadFull(void* data, std::size_t size, std::vector<UniqueFd>* fds, bool spin);
  // The reply's status, once it is checked to answer `request` (else the connection breaks).
  Status Answer(const wire::Request& request, const wire::Response& response);
  Status RingCall(const wire::Request& request, std::size_t size, wire::Response* response,
                  std::vector<UniqueFd>* fds);
  // Writes a request into the ring and rings the doorbell when no server thread polls.
  Status RingPost(const wire::Request& request, std::size_t size);
  // Waits until the server has answered ring request `seq`.
  Status AwaitRing(std::uint32_t seq);
  // Waits for a one-way ring request to be taken, if one is outstanding.
  Status SettleRing() { return ring_unsettled_ ? AwaitRing(ring_seq_) : Status::Ok(); }
  // The server's end is closed (a poll, no blocking; pending reply bytes do not count).
  bool HungUp();

  UniqueFd fd_;
  std::uint32_t max_frame_bytes_ = kDefaultMaxFrameBytes + (1u << 20);
  // Frame buffers up to this size are kept for the connection's next frame; larger ones go.
  static constexpr std::size_t kKeptBufferBytes = 256 * 1024;
  std::string buffer_;       // the frame being received
  std::string send_buffer_;  // the frame being sent
  std::size_t send_buffer_bytes_ = 0;
  bool broken_ = false;
  std::uint32_t busy_poll_us_ = 0;
  std::uint64_t socket_sent_ = 0;  // bytes sent on the socket (the ring's socket_bytes)
  std::unique_ptr<RequestRing> ring_;
  std::uint32_t ring_seq_ = 0;
  bool ring_unsettled_ = false;  // the last ring request was one-way and may not be taken yet
};

}  // namespace tierpool::transport
