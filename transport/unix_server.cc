#include "transport/unix_server.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>

#include <boost/asio.hpp>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>

#include "common/logging.h"

namespace tierpool::transport {

namespace asio = boost::asio;
using UnixSocket = asio::local::stream_protocol::socket;

Status UnixServerConfig::validate() const {
  if (socket_path.empty()) return Status::InvalidArgument("socket path is empty");
  if (socket_path.size() >= sizeof(sockaddr_un::sun_path)) {
    return Status::InvalidArgument("socket path longer than " +
                                   std::to_string(sizeof(sockaddr_un::sun_path) - 1) +
                                   " bytes: " + socket_path);
  }
  if (socket_mode > 0777) return Status::InvalidArgument("socket mode must be <= 0777");
  if (max_frame_bytes < 4096) return Status::InvalidArgument("max frame bytes must be >= 4096");
  if (io_threads < 1 || io_threads > 64) {
    return Status::InvalidArgument("io threads must be in [1, 64]");
  }
  if (max_connections == 0) return Status::InvalidArgument("max connections must be > 0");
  if (busy_poll_us > 10'000) return Status::InvalidArgument("busy poll must be at most 10000 us");
  return Status::Ok();
}

struct Counters {
  std::atomic<std::uint64_t> accepted{0}, active{0}, refused{0}, frames{0}, bad_frames{0},
      malformed{0}, unknown{0};
};

class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(UnixSocket socket, std::uint64_t id, const UnixServerConfig& config,
          RequestHandler* handler, Counters* counters)
      : socket_(std::move(socket)),
        id_(id),
        config_(config),
        handler_(handler),
        counters_(counters) {}

  void Start() { ReadHeader(); }

 private:
  void ReadHeader() {
    asio::async_read(socket_, asio::buffer(header_),
                     [self = shared_from_this()](boost::system::error_code ec, std::size_t) {
                       if (ec) return self->Close();
                       self->OnHeader();
                     });
  }

  void OnHeader() {
    auto h = DecodeFrameHeader(header_, config_.max_frame_bytes);
    if (!h.ok()) {
      ++counters_->bad_frames;
      spdlog::debug("session {}: {}; closing", id_, h.status().ToString());
      // Best effort: tell the peer why, then close. The stream cannot be resynchronized.
      wire::Response resp;
      ToWire(h.status(), resp.mutable_status());
      auto frame = EncodeFrame(resp, config_.max_frame_bytes);
      if (frame.ok()) {
        boost::system::error_code ignored;
        asio::write(socket_, asio::buffer(*frame), ignored);
      }
      return Close();
    }
    body_.resize(h->length);
    if (h->length == 0) return OnBody();
    asio::async_read(socket_, asio::buffer(body_),
                     [self = shared_from_this()](boost::system::error_code ec, std::size_t) {
                       if (ec) return self->Close();
                       self->OnBody();
                     });
  }

  void OnBody() {
    ++counters_->frames;
    wire::Request request;
    wire::Response response;
    std::vector<int> fds;
    if (!request.ParseFromArray(body_.data(), static_cast<int>(body_.size()))) {
      ++counters_->malformed;
      ToWire(Status::InvalidArgument("malformed request: payload is not a tierpool Request"),
             response.mutable_status());
    } else if (request.body_case() == wire::Request::BODY_NOT_SET) {
      ++counters_->unknown;
      ToWire(Status::Unimplemented("unknown message type (this server speaks protocol " +
                                   std::to_string(kProtocolVersion) + ")"),
             response.mutable_status());
    } else {
      bool reply = handler_->Handle(id_, request, &response, &fds);
      if (!reply) return ReadHeader();
    }
    response.set_id(request.id());
    auto frame = EncodeFrame(response, config_.max_frame_bytes);
    if (!frame.ok()) {
      wire::Response err;
      err.set_id(request.id());
      ToWire(
          Status::ResourceExhausted("reply too large for one frame: " + frame.status().message()),
          err.mutable_status());
      frame = EncodeFrame(err, config_.max_frame_bytes);
      fds.clear();
    }
    out_ = std::move(frame).value();
    if (!fds.empty()) {
      if (!SendWithFds(fds)) return Close();
      return ReadHeader();
    }
    asio::async_write(socket_, asio::buffer(out_),
                      [self = shared_from_this()](boost::system::error_code ec, std::size_t) {
                        if (ec) return self->Close();
                        self->ReadHeader();
                      });
  }

  // Descriptors ride on the first byte of the frame (SCM_RIGHTS); Asio has no API for that, so
  // this writes synchronously. Only the small handshake reply carries descriptors.
  bool SendWithFds(const std::vector<int>& fds) {
    int sock = socket_.native_handle();
    std::size_t sent = 0;
    bool fds_sent = false;
    std::vector<char> control(CMSG_SPACE(sizeof(int) * fds.size()));
    while (sent < out_.size()) {
      iovec iov{out_.data() + sent, out_.size() - sent};
      msghdr msg{};
      msg.msg_iov = &iov;
      msg.msg_iovlen = 1;
      if (!fds_sent) {
        msg.msg_control = control.data();
        msg.msg_controllen = control.size();
        cmsghdr* c = CMSG_FIRSTHDR(&msg);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
        std::memcpy(CMSG_DATA(c), fds.data(), sizeof(int) * fds.size());
      }
      ssize_t n = ::sendmsg(sock, &msg, MSG_NOSIGNAL);
      if (n < 0) {
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) {
          pollfd p{sock, POLLOUT, 0};
          if (::poll(&p, 1, 5000) <= 0) return false;
          continue;
        }
        return false;
      }
      fds_sent = true;
      sent += static_cast<std::size_t>(n);
    }
    return true;
  }

  void Close() {
    if (closed_) return;
    closed_ = true;
    boost::system::error_code ignored;
    socket_.close(ignored);
    --counters_->active;
    handler_->OnDisconnect(id_);
  }

  UnixSocket socket_;
  std::uint64_t id_;
  const UnixServerConfig& config_;
  RequestHandler* handler_;
  Counters* counters_;
  std::uint8_t header_[kFrameHeaderSize];
  std::string body_;
  std::string out_;
  bool closed_ = false;
};

struct UnixServer::Impl {
  UnixServerConfig config;
  RequestHandler* handler;
  asio::io_context io;
  asio::local::stream_protocol::acceptor acceptor{io};
  std::vector<std::thread> threads;
  std::atomic<std::uint64_t> next_session{1};
  Counters counters;
  bool started = false;

  // io.run(), with a bounded busy-poll after each handler (see busy_poll_us).
  void RunLoop() {
    if (config.busy_poll_us == 0) {
      io.run();
      return;
    }
    const auto window = std::chrono::microseconds(config.busy_poll_us);
    auto last_work = std::chrono::steady_clock::now();
    while (!io.stopped()) {
      if (io.poll_one() > 0) {
        last_work = std::chrono::steady_clock::now();
        continue;
      }
      if (std::chrono::steady_clock::now() - last_work < window) continue;
      if (io.run_one() == 0) return;
      last_work = std::chrono::steady_clock::now();
    }
  }

  void Accept() {
    acceptor.async_accept([this](boost::system::error_code ec, UnixSocket socket) {
      if (ec) {
        if (ec == asio::error::operation_aborted) return;
        spdlog::warn("accept failed: {}", ec.message());
      } else if (counters.active.load() >= config.max_connections) {
        ++counters.refused;
        spdlog::warn("refusing a connection: {} already open", config.max_connections);
      } else {
        ++counters.accepted;
        ++counters.active;
        std::make_shared<Session>(std::move(socket), next_session++, config, handler, &counters)
            ->Start();
      }
      Accept();
    });
  }
};

UnixServer::UnixServer(UnixServerConfig config, RequestHandler* handler)
    : impl_(std::make_unique<Impl>()) {
  impl_->config = std::move(config);
  impl_->handler = handler;
}

UnixServer::~UnixServer() { Stop(); }

Status UnixServer::Start() {
  TIERPOOL_RETURN_IF_ERROR(impl_->config.validate());
  const std::string& path = impl_->config.socket_path;
  struct stat st {};
  if (::lstat(path.c_str(), &st) == 0) {
    if (!S_ISSOCK(st.st_mode)) {
      return Status::AlreadyExists(path + " exists and is not a socket; refusing to replace it");
    }
    // A live server answers a connect; a stale file from a crashed one does not.
    int probe = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
    bool live = ::connect(probe, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
    ::close(probe);
    if (live) return Status::AlreadyExists("another tierpoold is listening on " + path);
    ::unlink(path.c_str());
  }
  boost::system::error_code ec;
  asio::local::stream_protocol::endpoint endpoint(path);
  impl_->acceptor.open(endpoint.protocol(), ec);
  if (ec) return Status::IoError("open socket: " + ec.message());
  // Create the socket file with no permissions for others, then set the configured mode.
  mode_t old_mask = ::umask(0077);
  impl_->acceptor.bind(endpoint, ec);
  ::umask(old_mask);
  if (ec) return Status::IoError("bind " + path + ": " + ec.message());
  if (::chmod(path.c_str(), impl_->config.socket_mode) != 0) {
    return ErrnoStatus("chmod " + path, errno);
  }
  impl_->acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) return Status::IoError("listen " + path + ": " + ec.message());
  impl_->Accept();
  for (int i = 0; i < impl_->config.io_threads; ++i) {
    impl_->threads.emplace_back([this] { impl_->RunLoop(); });
  }
  impl_->started = true;
  return Status::Ok();
}

void UnixServer::Stop() {
  if (!impl_->started) return;
  impl_->started = false;
  asio::post(impl_->io, [this] {
    boost::system::error_code ignored;
    impl_->acceptor.close(ignored);
  });
  impl_->io.stop();
  for (auto& t : impl_->threads) t.join();
  impl_->threads.clear();
  ::unlink(impl_->config.socket_path.c_str());
}

TransportStats UnixServer::stats() const {
  const Counters& c = impl_->counters;
  return {c.accepted.load(),   c.active.load(),    c.refused.load(), c.frames.load(),
          c.bad_frames.load(), c.malformed.load(), c.unknown.load()};
}

}  // namespace tierpool::transport
