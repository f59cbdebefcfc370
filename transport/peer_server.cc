#include "transport/peer_server.h"

#include "transport/ucx_peer_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include <cerrno>
#include <utility>

#include <spdlog/spdlog.h>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>

#include "transport/peer_connection.h"
#include "transport/peer_wire.h"

namespace tierpool::transport {

namespace asio = boost::asio;

Status PeerServerConfig::validate() const {
  if (max_connections == 0 || max_connections_per_peer == 0 || max_handshakes_per_address == 0) {
    return Status::InvalidArgument("peer connection limits must be positive");
  }
  if (handshake_timeout_ms == 0 || io_timeout_ms == 0) {
    return Status::InvalidArgument("peer timeouts must be positive");
  }
  if (max_payload_bytes == 0) return Status::InvalidArgument("peer payload limit must be positive");
  return Status::Ok();
}

PeerServer::PeerServer(PeerServerConfig config, PeerAuth auth, PeerIdentity self,
                       PeerHandler* handler)
    : config_(std::move(config)),
      auth_(std::move(auth)),
      self_node_(std::move(self.node_id)),
      incarnation_(self.incarnation),
      handler_(handler) {}

PeerServer::~PeerServer() { Stop(); }

Status PeerServer::Start() {
  TIERPOOL_RETURN_IF_ERROR(config_.validate());
  if (config_.ucx) {
    auto ucx = UcxPeerServer::Create(config_.max_payload_bytes, handler_,
                                     [this] { return incarnation_.load(); });
    if (!ucx.ok())
      return Status(ucx.status().code(), "--peer-transport ucx: " + ucx.status().message());
    ucx_ = std::move(ucx).value();
  }
  std::string host, port;
  TIERPOOL_RETURN_IF_ERROR(SplitHostPort(config_.listen, &host, &port));
  // Asio parses the address and binds; the accept loop then polls the descriptor so that Stop
  // can end it without touching the acceptor from another thread.
  asio::io_context io;
  boost::system::error_code ec;
  const auto address = asio::ip::make_address(host, ec);
  if (ec) return Status::InvalidArgument("--peer-listen " + config_.listen + ": " + ec.message());
  int port_number = 0;
  try {
    port_number = std::stoi(port);
  } catch (...) {
    port_number = -1;
  }
  if (port_number < 0 || port_number > 65535) {
    return Status::InvalidArgument("--peer-listen " + config_.listen + ": bad port");
  }
  asio::ip::tcp::acceptor acceptor(io);
  const asio::ip::tcp::endpoint endpoint(address, static_cast<std::uint16_t>(port_number));
  acceptor.open(endpoint.protocol(), ec);
  if (!ec) acceptor.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) acceptor.bind(endpoint, ec);
  if (!ec) acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec)
    return Status::Unavailable("cannot listen for peers on " + config_.listen + ": " +
                               ec.message());
  port_ = acceptor.local_endpoint().port();
  listener_ = UniqueFd(acceptor.release(ec));
  if (ec) return Status::Internal("peer listener: " + ec.message());
  acceptor_ = std::thread([this] { AcceptLoop(); });
  return Status::Ok();
}

void PeerServer::Stop() {
  if (stopping_.exchange(true)) return;
  if (acceptor_.joinable()) acceptor_.join();
  listener_.reset();
  {
    std::lock_guard lock(mu_);
    for (auto& s : sessions_) ::shutdown(s->fd.get(), SHUT_RDWR);
  }
  Reap(/*all=*/true);
  ucx_.reset();  // its thread calls the handler too
}

void PeerServer::Reap(bool all) {
  std::list<std::unique_ptr<Session>> finished;
  {
    std::lock_guard lock(mu_);
    for (auto it = sessions_.begin(); it != sessions_.end();) {
      if (all || (*it)->done.load()) {
        finished.push_back(std::move(*it));
        it = sessions_.erase(it);
      } else {
        ++it;
      }
    }
  }
  for (auto& s : finished) s->thread.join();
}

void PeerServer::AcceptLoop() {
  while (!stopping_.load()) {
    pollfd p{listener_.get(), POLLIN, 0};
    const int rc = ::poll(&p, 1, 200);
    Reap(/*all=*/false);
    if (rc <= 0) continue;
    sockaddr_storage from{};
    socklen_t from_len = sizeof from;
    UniqueFd fd(
        ::accept4(listener_.get(), reinterpret_cast<sockaddr*>(&from), &from_len, SOCK_CLOEXEC));
    if (!fd.valid()) continue;
    std::string address = AddressOf(from);
    std::lock_guard lock(mu_);
    auto& handshaking = handshakes_[address];
    if (sessions_.size() >= config_.max_connections ||
        handshaking >= config_.max_handshakes_per_address) {
      ++refused_;
      if (handshaking == 0) handshakes_.erase(address);
      continue;  // closed: over a limit
    }
    ++handshaking;
    auto session = std::make_unique<Session>();
    session->fd = std::move(fd);
    session->address = std::move(address);
    Session* raw = session.get();
    sessions_.push_back(std::move(session));
    raw->thread = std::thread([this, raw] { Serve(raw); });
  }
}

void PeerServer::Serve(Session* session) {
  const int fd = session->fd.get();
  TunePeerSocket(fd);
  auto who = AcceptHandshake(fd, auth_, self(), PeerDeadline::After(config_.handshake_timeout_ms));
  {
    std::lock_guard lock(mu_);
    if (auto it = handshakes_.find(session->address);
        it != handshakes_.end() && --it->second == 0) {
      handshakes_.erase(it);
    }
  }
  if (!who.ok()) {
    ++auth_failures_;
    CountTimeout(who.status());
    spdlog::warn("peer connection refused: {}", who.status().ToString());
    handler_->Disconnected({});
    session->done = true;
    return;
  }
  bool admitted = false;
  {
    std::lock_guard lock(mu_);
    auto& n = per_peer_[who->node_id];
    if (n < config_.max_connections_per_peer) {
      ++n;
      admitted = true;
    }
  }
  if (!admitted) {
    ++refused_;
    session->done = true;
    return;
  }
  session->peer = *who;
  ++connections_;
  // Idle connections wait in poll without limit (keepalive finds dead peers, Stop's shutdown
  // wakes them); each request, once its frame starts, must be read within io_timeout_ms, and its
  // payload and reply must keep moving (ServeOne).
  while (!stopping_.load()) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, -1) < 0 && errno != EINTR) break;
    if ((p.revents & POLLIN) == 0 && (p.revents & (POLLHUP | POLLERR)) != 0) break;
    wire::peer::Request request;
    if (Status s = ReceivePeerMessage(fd, &request, PeerDeadline::After(config_.io_timeout_ms));
        !s.ok()) {
      CountTimeout(s);
      if (s.code() != StatusCode::kUnavailable) {
        spdlog::warn("peer {}: {}; closing", who->node_id, s.ToString());
      }
      break;
    }
    ++requests_;
    if (!ServeOne(session, request)) break;
  }
  {
    std::lock_guard lock(mu_);
    if (--per_peer_[who->node_id] == 0) per_peer_.erase(who->node_id);
  }
  handler_->Disconnected(*who);
  session->done = true;
}

bool PeerServer::ServeOne(Session* session, const wire::peer::Request& request) {
  const int fd = session->fd.get();
  wire::peer::Response response;
  response.set_id(request.id());
  auto refuse = [&](const Status& s) {
    response.set_code(static_cast<std::uint32_t>(s.code()));
    response.set_message(s.message());
  };
  const bool write = request.op_case() == wire::peer::Request::kWrite;
  const bool read = request.op_case() == wire::peer::Request::kRead;
  const std::uint64_t length = write  ? request.write().length()
                               : read ? request.read().length()
                                      : 0;
  if (length > config_.max_payload_bytes) {
    // Too large to drain safely: the stream cannot be trusted past it.
    spdlog::warn("peer {}: a {}-byte transfer is over the limit; closing", session->peer.node_id,
                 length);
    return false;
  }
  // The payload and the reply: as long as their bytes need on a slow link, while they move.
  const PeerDeadline deadline = PeerDeadline::ForBytes(config_.io_timeout_ms, length);
  PeerTransfer transfer;
  if (const std::uint64_t now = incarnation_.load(); request.lender_incarnation() != now) {
    refuse(Status::FailedPrecondition("this lender restarted since (incarnation " +
                                      std::to_string(now) + ")"));
  } else if (write || read) {
    auto t = handler_->BeginTransfer(session->peer, write ? request.write() : request.read(), write,
                                     [fd] { ::shutdown(fd, SHUT_RDWR); });
    if (t.ok()) {
      transfer = std::move(t).value();
    } else {
      refuse(t.status());
    }
  } else {
    handler_->Handle(session->peer, request, &response);
    if (ucx_ != nullptr && request.op_case() == wire::peer::Request::kInfo &&
        request.info().ucx_open() && response.code() == 0) {
      const UcxOffer offer = ucx_->Open(session->peer);
      response.set_ucx_address(offer.address);
      response.set_ucx_token(offer.token);
    }
  }
  if (write) {
    // The payload follows the frame whatever the answer: into the region, or dropped.
    Status in = transfer.data != nullptr ? ReceiveExactly(fd, transfer.data, length, deadline)
                                         : DiscardBytes(fd, length, deadline);
    if (!in.ok()) {
      CountTimeout(in);
      if (in.code() != StatusCode::kUnavailable) {
        spdlog::warn("peer {}: a write's payload: {}; closing", session->peer.node_id,
                     in.ToString());
      }
      return false;
    }
    if (transfer.data != nullptr) bytes_in_ += length;
  }
  handler_->FillRoom(session->peer, &response);
  const bool sends = read && transfer.data != nullptr && response.code() == 0;
  if (sends) response.set_payload_length(length);
  if (Status out = SendPeerMessage(fd, response, sends ? transfer.data : nullptr,
                                   sends ? length : 0, deadline);
      !out.ok()) {
    CountTimeout(out);
    return false;
  }
  if (sends) bytes_out_ += length;
  return true;
}

std::string PeerServer::AddressOf(const sockaddr_storage& from) {
  char text[INET6_ADDRSTRLEN] = {};
  if (from.ss_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(&from);
    ::inet_ntop(AF_INET, &in->sin_addr, text, sizeof text);
  } else if (from.ss_family == AF_INET6) {
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(&from);
    ::inet_ntop(AF_INET6, &in6->sin6_addr, text, sizeof text);
  }
  return text;
}

void PeerServer::StallUcxForTest(std::uint32_t ms) {
  if (ucx_ != nullptr) ucx_->StallForTest(ms);
}

PeerServerCounters PeerServer::counters() const {
  PeerServerCounters c;
  c.connections = connections_.load();
  c.auth_failures = auth_failures_.load();
  c.timed_out = timed_out_.load();
  c.refused = refused_.load();
  c.requests = requests_.load();
  c.bytes_in = bytes_in_.load();
  c.bytes_out = bytes_out_.load();
  if (ucx_ != nullptr) {
    const UcxPeerServerCounters u = ucx_->counters();
    c.ucx_requests = u.requests;
    c.ucx_refused = u.refused;
    c.ucx_bytes_in = u.bytes_in;
    c.ucx_bytes_out = u.bytes_out;
  }
  return c;
}

}  // namespace tierpool::transport
