#include "transport/unix_server.h"

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>

#include <algorithm>
#include <boost/asio.hpp>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <optional>

#include "common/logging.h"
#include "transport/io_loop.h"
#include "transport/unix_session.h"

namespace tierpool::transport {

bool PeerCredentials::InGroup(gid_t g) const {
  return gid == g || std::find(groups.begin(), groups.end(), g) != groups.end();
}

namespace {

// The peer's supplementary groups as the kernel recorded them at connect (SO_PEERGROUPS, Linux
// 4.13+); empty when unavailable, or when the peer is in more than kMaxPeerGroups groups (it is
// then matched by its primary group only: refusing is the safe side).
std::vector<gid_t> PeerGroups(int fd) {
  std::vector<gid_t> groups(64);
  for (int attempt = 0; attempt < 2; ++attempt) {
    socklen_t len = static_cast<socklen_t>(groups.size() * sizeof(gid_t));
    if (::getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, groups.data(), &len) == 0) {
      groups.resize(len / sizeof(gid_t));
      return groups;
    }
    if (errno != ERANGE) return {};
    groups.resize(std::min<std::size_t>(len / sizeof(gid_t), kMaxPeerGroups));
  }
  return {};
}

}  // namespace

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
  if (busy_poll_max_us > 10'000) {
    return Status::InvalidArgument("busy poll max must be at most 10000 us");
  }
  if (max_request_rings > 65'536) {
    return Status::InvalidArgument("max request rings must be at most 65536");
  }
  if (worker_threads < 1 || worker_threads > 256) {
    return Status::InvalidArgument("worker threads must be in [1, 256]");
  }
  if (max_buffered_bytes < max_frame_bytes) {
    return Status::InvalidArgument("the frame-buffer bound must hold at least one largest frame");
  }
  return Status::Ok();
}

struct UnixServer::Impl {
  ServerShared shared;
  // One per I/O thread (io_loop.h); the acceptor runs on the first.
  std::vector<std::unique_ptr<IoLoop>> loops;
  std::optional<asio::local::stream_protocol::acceptor> acceptor;
  std::atomic<std::uint64_t> next_session{1};
  bool started = false;

  // The loop a new connection goes to: the one with the fewest sessions.
  IoLoop* LeastBusyLoop() {
    IoLoop* best = loops.front().get();
    for (const auto& loop : loops) {
      if (loop->sessions().load() < best->sessions().load()) best = loop.get();
    }
    return best;
  }

  // Tells a refused peer why (best effort: a fresh socket has room for one small frame), then
  // closes it.
  static void Refuse(UnixSocket& socket, const Status& why) {
    wire::Response resp;
    ToWire(why, resp.mutable_status());
    auto frame = EncodeFrame(resp, kDefaultMaxFrameBytes);
    if (frame.ok()) {
      (void)::send(socket.native_handle(), frame->data(), frame->size(),
                   MSG_DONTWAIT | MSG_NOSIGNAL);
    }
    boost::system::error_code ignored;
    socket.close(ignored);
  }

  void Accept() {
    // The socket is made on its loop's io_context, where every handler of its session runs.
    IoLoop* loop = LeastBusyLoop();
    acceptor->async_accept(loop->io(), [this, loop](boost::system::error_code ec,
                                                    UnixSocket socket) {
      if (ec) {
        if (ec == asio::error::operation_aborted) return;
        spdlog::warn("accept failed: {}", ec.message());
        return Accept();
      }
      PeerCredentials peer;
      ucred cred{};
      socklen_t len = sizeof(cred);
      if (::getsockopt(socket.native_handle(), SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0) {
        peer.pid = cred.pid;
        peer.uid = cred.uid;
        peer.gid = cred.gid;
        peer.groups = PeerGroups(socket.native_handle());
      }
      TransportCounters& c = shared.counters;
      // Refusals are logged at 1, 2, 4, 8... so that a flood of them cannot flood the log.
      auto log_refusal = [&c](const std::string& why) {
        const std::uint64_t n = c.refused.load();
        if ((n & (n - 1)) == 0) spdlog::warn("refused {} connection(s) so far; latest: {}", n, why);
      };
      if (c.active.load() >= shared.config.max_connections) {
        ++c.refused;
        log_refusal("pid " + std::to_string(peer.pid) + ": " +
                    std::to_string(shared.config.max_connections) + " already open");
        Refuse(socket, Status::ResourceExhausted("tierpoold serves at most " +
                                                 std::to_string(shared.config.max_connections) +
                                                 " connections"));
        return Accept();
      }
      switch (shared.peers.Add(peer, shared.config)) {
        case PeerTable::Admit::kProcessLimit:
          ++c.refused;
          ++c.refused_process;
          log_refusal("pid " + std::to_string(peer.pid) + ": per-process limit");
          Refuse(socket, Status::ResourceExhausted(
                             "this process already has " +
                             std::to_string(shared.config.max_connections_per_process) +
                             " connections to tierpoold (the per-process limit)"));
          return Accept();
        case PeerTable::Admit::kUserLimit:
          ++c.refused;
          ++c.refused_user;
          log_refusal("uid " + std::to_string(peer.uid) + ": per-user limit");
          Refuse(socket,
                 Status::ResourceExhausted("this user already has " +
                                           std::to_string(shared.config.max_connections_per_user) +
                                           " connections to tierpoold (the per-user limit)"));
          return Accept();
        case PeerTable::Admit::kOk:
          break;
      }
      ++c.accepted;
      ++c.active;
      const std::uint64_t id = next_session++;
      ++loop->sessions();
      // Started on its own loop's thread: this is the acceptor's.
      asio::post(loop->io(),
                 [session = std::make_shared<UnixSession>(std::move(socket), id, peer, &shared,
                                                          loop)] { session->Start(); });
      Accept();
    });
  }
};

UnixServer::UnixServer(UnixServerConfig config, RequestHandler* handler)
    : impl_(std::make_unique<Impl>()) {
  impl_->shared.config = std::move(config);
  impl_->shared.handler = handler;
}

UnixServer::~UnixServer() { Stop(); }

Status UnixServer::Start() {
  TIERPOOL_RETURN_IF_ERROR(impl_->shared.config.validate());
  const std::string& path = impl_->shared.config.socket_path;
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
  for (int i = 0; i < impl_->shared.config.io_threads; ++i) {
    impl_->loops.push_back(std::make_unique<IoLoop>(
        impl_->shared.config, &impl_->shared.counters.io_wakeups, &impl_->shared.rings_open));
  }
  impl_->acceptor.emplace(impl_->loops.front()->io());
  boost::system::error_code ec;
  asio::local::stream_protocol::endpoint endpoint(path);
  impl_->acceptor->open(endpoint.protocol(), ec);
  if (ec) return Status::IoError("open socket: " + ec.message());
  // Create the socket file with no permissions for others, then set the configured mode.
  mode_t old_mask = ::umask(0077);
  impl_->acceptor->bind(endpoint, ec);
  ::umask(old_mask);
  if (ec) return Status::IoError("bind " + path + ": " + ec.message());
  if (::chmod(path.c_str(), impl_->shared.config.socket_mode) != 0) {
    return ErrnoStatus("chmod " + path, errno);
  }
  impl_->acceptor->listen(asio::socket_base::max_listen_connections, ec);
  if (ec) return Status::IoError("listen " + path + ": " + ec.message());
  impl_->shared.workers = std::make_unique<asio::thread_pool>(impl_->shared.config.worker_threads);
  impl_->Accept();
  for (auto& loop : impl_->loops) loop->Start();
  impl_->started = true;
  return Status::Ok();
}

void UnixServer::Stop() {
  if (!impl_->started) return;
  impl_->started = false;
  for (auto& loop : impl_->loops) loop->Stop();
  boost::system::error_code ignored;
  impl_->acceptor->close(ignored);
  // Requests still running on workers finish (their replies are never written).
  impl_->shared.workers->join();
  ::unlink(impl_->shared.config.socket_path.c_str());
}

TransportStats UnixServer::stats() const {
  const TransportCounters& c = impl_->shared.counters;
  TransportStats s;
  s.connections_accepted = c.accepted.load();
  s.connections_active = c.active.load();
  s.connections_refused = c.refused.load();
  s.connections_refused_per_process = c.refused_process.load();
  s.connections_refused_per_user = c.refused_user.load();
  s.frames_received = c.frames.load();
  s.bad_frames = c.bad_frames.load();
  s.malformed_messages = c.malformed.load();
  s.unknown_messages = c.unknown.load();
  s.handshake_timeouts = c.handshake_timeouts.load();
  s.idle_timeouts = c.idle_timeouts.load();
  s.frame_timeouts = c.frame_timeouts.load();
  s.requests_on_workers = c.on_workers.load();
  s.requests_moved_to_workers = c.moved_to_workers.load();
  s.frame_bytes_buffered = c.buffered.load();
  s.frame_buffer_waits = c.buffer_waits.load();
  s.io_wakeups = c.io_wakeups.load();
  s.request_rings_open = impl_->shared.rings_open.load();
  s.ring_requests = c.ring_requests.load();
  s.ring_doorbells = c.ring_doorbells.load();
  return s;
}

}  // namespace tierpool::transport
