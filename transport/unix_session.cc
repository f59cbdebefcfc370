#include "transport/unix_session.h"

#include <sys/socket.h>

#include <cerrno>
#include <chrono>
#include <cstring>

#include "common/logging.h"

namespace tierpool::transport {

namespace asio = boost::asio;

namespace {
// A frame's buffer starts at this size and doubles as its bytes arrive, so a header alone
// costs the server no more than this; buffers up to it are kept for the connection's next frame.
constexpr std::size_t kFirstChunk = 64 * 1024;
// Reads that wait for the server-wide frame-buffer bound try again after this.
constexpr auto kBufferRetry = std::chrono::milliseconds(2);
}  // namespace

PeerTable::Admit PeerTable::Add(const PeerCredentials& peer, const UnixServerConfig& config) {
  std::lock_guard lock(mu_);
  std::uint32_t& process = per_process_[peer.pid];
  std::uint32_t& user = per_user_[peer.uid];
  Admit admit = Admit::kOk;
  if (config.max_connections_per_process != 0 && process >= config.max_connections_per_process) {
    admit = Admit::kProcessLimit;
  } else if (config.max_connections_per_user != 0 && user >= config.max_connections_per_user) {
    admit = Admit::kUserLimit;
  }
  if (admit == Admit::kOk) {
    ++process;
    ++user;
  } else {
    if (process == 0) per_process_.erase(peer.pid);
    if (user == 0) per_user_.erase(peer.uid);
  }
  return admit;
}

void PeerTable::Remove(const PeerCredentials& peer) {
  std::lock_guard lock(mu_);
  if (auto it = per_process_.find(peer.pid); it != per_process_.end() && --it->second == 0) {
    per_process_.erase(it);
  }
  if (auto it = per_user_.find(peer.uid); it != per_user_.end() && --it->second == 0) {
    per_user_.erase(it);
  }
}

UnixSession::UnixSession(Socket socket, std::uint64_t id, PeerCredentials peer,
                         ServerShared* shared)
    : socket_(std::move(socket)),
      timer_(socket_.get_executor()),
      id_(id),
      peer_(peer),
      shared_(shared) {}

UnixSession::~UnixSession() {
  if (charged_ != 0) shared_->counters.buffered -= charged_;
}

void UnixSession::Start() {
  boost::system::error_code ignored;
  socket_.native_non_blocking(true, ignored);  // SendWithFds writes with sendmsg
  accepted_ = std::chrono::steady_clock::now();
  ReadHeader();  // its SetState arms the handshake timer
}

void UnixSession::SetState(State state) {
  state_ = state;
  since_ = std::chrono::steady_clock::now();
  // The timer is re-armed here only when it is not running (every timeout was off for the
  // state before, or it has fired): otherwise it looks at the new state when it wakes.
  if (!timer_armed_ && !closed_) {
    if (auto due = Deadline()) ArmTimer(*due);
  }
}

std::optional<std::chrono::steady_clock::time_point> UnixSession::Deadline() const {
  using std::chrono::milliseconds;
  const UnixServerConfig& c = shared_->config;
  if (!spoke_) {
    // Until the first frame is in, the handshake deadline holds whatever the state.
    if (c.handshake_timeout_ms != 0) return accepted_ + milliseconds(c.handshake_timeout_ms);
    if (state_ == State::kIdle) return std::nullopt;
  }
  switch (state_) {
    case State::kIdle:
      if (c.idle_timeout_ms == 0) return std::nullopt;
      return since_ + milliseconds(c.idle_timeout_ms);
    case State::kReading:
    case State::kWriting:
      if (c.frame_timeout_ms == 0) return std::nullopt;
      return since_ + milliseconds(c.frame_timeout_ms);
    case State::kBusy:
      return std::nullopt;
  }
  return std::nullopt;
}

void UnixSession::ReadHeader() {
  SetState(State::kIdle);
  asio::async_read(socket_, asio::buffer(header_),
                   [self = shared_from_this()](boost::system::error_code ec, std::size_t) {
                     if (ec) return self->Close();
                     self->OnHeader();
                   });
}

void UnixSession::OnHeader() {
  auto h = DecodeFrameHeader(header_, shared_->config.max_frame_bytes);
  if (!h.ok()) {
    ++shared_->counters.bad_frames;
    spdlog::debug("session {}: {}; closing", id_, h.status().ToString());
    // Tell the peer why, then close: the stream cannot be resynchronized.
    return CloseAfterWrite(h.status());
  }
  SetState(State::kReading);
  expected_ = h->length;
  received_ = 0;
  if (expected_ == 0) return OnBody();
  ReadBody();
}

bool UnixSession::Grow(std::size_t want) {
  if (want <= body_.size()) return true;
  const std::size_t delta = want - charged_;
  const std::uint64_t before = shared_->counters.buffered.fetch_add(delta);
  // A connection with nothing buffered may always start: someone must make progress.
  if (before + delta > shared_->config.max_buffered_bytes && charged_ != 0) {
    shared_->counters.buffered -= delta;
    return false;
  }
  body_.resize(want);
  charged_ = want;
  return true;
}

void UnixSession::ReleaseBuffer() {
  if (body_.size() <= kFirstChunk) return;
  shared_->counters.buffered -= charged_;
  charged_ = 0;
  std::string().swap(body_);
}

void UnixSession::ReadBody() {
  if (received_ == body_.size()) {
    const std::size_t want =
        std::min<std::size_t>(expected_, std::max(kFirstChunk, 2 * body_.size()));
    if (!Grow(want)) {
      ++shared_->counters.buffer_waits;
      auto retry = std::make_shared<asio::steady_timer>(socket_.get_executor(), kBufferRetry);
      retry->async_wait([self = shared_from_this(), retry](boost::system::error_code) {
        if (!self->closed_) self->ReadBody();
      });
      return;
    }
  }
  const std::size_t room = std::min<std::size_t>(expected_, body_.size()) - received_;
  socket_.async_read_some(asio::buffer(body_.data() + received_, room),
                          [self = shared_from_this()](boost::system::error_code ec, std::size_t n) {
                            if (ec) return self->Close();
                            self->received_ += n;
                            if (self->received_ == self->expected_) return self->OnBody();
                            self->ReadBody();
                          });
}

void UnixSession::OnBody() {
  ++shared_->counters.frames;
  spoke_ = true;
  SetState(State::kBusy);
  const bool parsed = messages_.request().ParseFromArray(body_.data(), static_cast<int>(expected_));
  ReleaseBuffer();
  if (!parsed) {
    ++shared_->counters.malformed;
    ToWire(Status::InvalidArgument("malformed request: payload is not a tierpool Request"),
           messages_.response().mutable_status());
    return Reply(true);
  }
  if (messages_.request().body_case() == wire::Request::BODY_NOT_SET) {
    ++shared_->counters.unknown;
    ToWire(Status::Unimplemented("unknown message type (this server speaks protocol " +
                                 std::to_string(kProtocolVersion) + ")"),
           messages_.response().mutable_status());
    return Reply(true);
  }
  if (shared_->handler->MayBlock(id_, messages_.request())) {
    ++shared_->counters.on_workers;
    asio::post(*shared_->workers, [self = shared_from_this()] {
      const bool reply =
          self->shared_->handler->Handle(self->id_, self->peer_, self->messages_.request(),
                                         &self->messages_.response(), &self->fds_);
      asio::post(self->socket_.get_executor(), [self, reply] { self->Reply(reply); });
    });
    return;
  }
  Reply(shared_->handler->Handle(id_, peer_, messages_.request(), &messages_.response(), &fds_));
}

void UnixSession::Reply(bool reply) {
  if (closed_) return;
  if (!reply) {
    messages_.Reset();
    fds_.clear();
    return ReadHeader();
  }
  wire::Response& response = messages_.response();
  response.set_id(messages_.request().id());
  // out_ keeps its capacity from the last reply (WriteOut lets go of large ones).
  if (Status s = EncodeFrameInto(response, shared_->config.max_frame_bytes, &out_); !s.ok()) {
    wire::Response err;
    err.set_id(messages_.request().id());
    ToWire(Status::ResourceExhausted("reply too large for one frame: " + s.message()),
           err.mutable_status());
    (void)EncodeFrameInto(err, shared_->config.max_frame_bytes, &out_);
    fds_.clear();
  }
  // What a large message needed beyond the arena's first block goes back here.
  messages_.Reset();
  SetState(State::kWriting);
  if (!fds_.empty()) return SendWithFds();
  WriteOut();
}

void UnixSession::WriteOut() {
  asio::async_write(socket_, asio::buffer(out_),
                    [self = shared_from_this()](boost::system::error_code ec, std::size_t) {
                      if (ec) return self->Close();
                      if (self->out_.size() > kFirstChunk) std::string().swap(self->out_);
                      self->ReadHeader();
                    });
}

// Descriptors ride on the first byte of the frame (SCM_RIGHTS); Asio has no API for that, so
// this sends with sendmsg on the non-blocking socket and waits for writability through Asio
// when the socket is full. The rest of the frame goes out with async_write.
void UnixSession::SendWithFds() {
  std::vector<char> control(CMSG_SPACE(sizeof(int) * fds_.size()));
  iovec iov{out_.data(), out_.size()};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control.data();
  msg.msg_controllen = control.size();
  cmsghdr* c = CMSG_FIRSTHDR(&msg);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int) * fds_.size());
  std::memcpy(CMSG_DATA(c), fds_.data(), sizeof(int) * fds_.size());
  ssize_t n;
  do {
    n = ::sendmsg(socket_.native_handle(), &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
  } while (n < 0 && errno == EINTR);
  if (n < 0) {
    if (errno != EAGAIN && errno != EWOULDBLOCK) return Close();
    socket_.async_wait(Socket::wait_write,
                       [self = shared_from_this()](boost::system::error_code ec) {
                         if (ec) return self->Close();
                         self->SendWithFds();
                       });
    return;
  }
  fds_.clear();
  out_.erase(0, static_cast<std::size_t>(n));
  WriteOut();  // the rest, if any; an empty write completes at once
}

void UnixSession::CloseAfterWrite(const Status& why) {
  wire::Response resp;
  ToWire(why, resp.mutable_status());
  auto frame = EncodeFrame(resp, shared_->config.max_frame_bytes);
  if (!frame.ok()) return Close();
  out_ = std::move(frame).value();
  SetState(State::kWriting);
  asio::async_write(
      socket_, asio::buffer(out_),
      [self = shared_from_this()](boost::system::error_code, std::size_t) { self->Close(); });
}

void UnixSession::ArmTimer(std::chrono::steady_clock::time_point when) {
  // The state may change to one with a nearer deadline before this wakes (idle, then a frame
  // that trickles in): wake at least every shortest timeout so that none is overrun by more
  // than itself.
  const UnixServerConfig& c = shared_->config;
  std::uint32_t step = 0;
  for (std::uint32_t t : {c.frame_timeout_ms, c.idle_timeout_ms}) {
    if (t != 0 && (step == 0 || t < step)) step = t;
  }
  if (step != 0) {
    when = std::min(when, std::chrono::steady_clock::now() + std::chrono::milliseconds(step));
  }
  timer_armed_ = true;
  timer_.expires_at(when);
  timer_.async_wait([self = shared_from_this()](boost::system::error_code ec) {
    self->timer_armed_ = false;
    if (ec || self->closed_) return;
    self->OnTimer();
  });
}

void UnixSession::OnTimer() {
  const auto now = std::chrono::steady_clock::now();
  const auto due = Deadline();
  if (!due) {
    // Nothing is due in this state (a request running, or a timeout off): look again later,
    // when one of the timeouts that are on could first run out.
    const UnixServerConfig& c = shared_->config;
    const std::uint32_t later = std::max(c.idle_timeout_ms, c.frame_timeout_ms);
    if (later != 0) ArmTimer(now + std::chrono::milliseconds(later));
    return;
  }
  if (now < *due) return ArmTimer(*due);
  if (!spoke_) {
    ++shared_->counters.handshake_timeouts;
    spdlog::debug("session {}: no complete request within the handshake timeout; closing", id_);
    return Close();
  }
  if (state_ == State::kIdle) {
    if (shared_->handler->Holds(id_)) {
      since_ = now;  // holding a pin or a reservation: idle is allowed
      return ArmTimer(now + std::chrono::milliseconds(shared_->config.idle_timeout_ms));
    }
    ++shared_->counters.idle_timeouts;
    spdlog::debug("session {}: idle and holding nothing; closing", id_);
    return Close();
  }
  ++shared_->counters.frame_timeouts;
  spdlog::debug("session {}: a frame took longer than allowed; closing", id_);
  Close();
}

void UnixSession::Close() {
  if (closed_) return;
  closed_ = true;
  timer_.cancel();
  boost::system::error_code ignored;
  socket_.close(ignored);
  shared_->counters.buffered -= charged_;
  charged_ = 0;
  std::string().swap(body_);
  --shared_->counters.active;
  shared_->peers.Remove(peer_);
  shared_->handler->OnDisconnect(id_);
}

}  // namespace tierpool::transport
