// The client side of a connection: blocking I/O on a Unix stream socket, one frame at a time,
// receiving file descriptors passed with a frame (SCM_RIGHTS). Not thread-safe: callers serialize.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "common/posix.h"
#include "transport/framing.h"

namespace tierpool::transport {

class BlockingConnection {
 public:
  // Connects to a Unix socket path. UNAVAILABLE when nobody listens there.
  static Result<std::unique_ptr<BlockingConnection>> Connect(const std::string& socket_path);

  Status Send(const wire::Request& request);
  // Reads one frame. Descriptors passed with it are appended to fds (when fds is not null; else
  // closed).
  Status Receive(wire::Response* response, std::vector<UniqueFd>* fds = nullptr);
  // Send, then ReceiveReply.
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
  // True when the server has closed its end (an idle connection it timed out): a poll, no
  // blocking. A connection found closed is marked broken.
  bool PeerClosed();

 private:
  explicit BlockingConnection(UniqueFd fd);
  Status ReadFull(void* data, std::size_t size, std::vector<UniqueFd>* fds, bool spin);

  UniqueFd fd_;
  std::uint32_t max_frame_bytes_ = kDefaultMaxFrameBytes + (1u << 20);
  // Frame buffers up to this size are kept for the connection's next frame; larger ones go.
  static constexpr std::size_t kKeptBufferBytes = 256 * 1024;
  std::string buffer_;       // the frame being received
  std::string send_buffer_;  // the frame being sent
  std::size_t send_buffer_bytes_ = 0;
  bool broken_ = false;
  std::uint32_t busy_poll_us_ = 0;
};

}  // namespace tierpool::transport
