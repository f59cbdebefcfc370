#include "transport/unix_session.h"

#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>

#include "common/logging.h"
#include "common/no_wait_scope.h"
#include "transport/request_ring.h"

namespace tierpool::transport {

namespace asio = boost::asio;

namespace {
// A frame's buffer starts at this size and doubles as its bytes arrive, so a header alone
// costs the server no more than this; buffers up to it are kept for the connection's next frame.
constexpr std::size_t kFirstChunk = 64 * 1024;
// Each read from the socket asks for up to this much: a small request's header and body come in
// one recv, and a pipelined client's next requests with them (a batch's second reserve, its
// commits), each then served with no syscall. Frames larger than what is read ahead continue
// into body_.
constexpr std::size_t kReadAhead = 16 * 1024;
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
                         ServerShared* shared, IoLoop* loop)
    : socket_(std::move(socket)),
      timer_(socket_.get_executor()),
      id_(id),
      peer_(peer),
      shared_(shared),
      loop_(loop) {}

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
  if (ahead_end_ - ahead_begin_ >= kFrameHeaderSize) {
    // Read already: served from the executor's queue, not from here (one-way requests in a row
    // would otherwise each call the next).
    asio::post(socket_.get_executor(), [self = shared_from_this()] {
      if (!self->closed_) self->OnHeader();
    });
  } else {
    ReadAhead();
  }
  if (ring_) TakeRing();  // one that waited for the socket's request
}

void UnixSession::ReadAhead() {
  if (ahead_.empty()) ahead_.resize(kReadAhead);
  if (ahead_begin_ == ahead_end_) {
    ahead_begin_ = ahead_end_ = 0;
  } else if (ahead_begin_ > 0) {
    // Less than a header is left: it moves to the front, for the rest to follow it.
    std::memmove(ahead_.data(), ahead_.data() + ahead_begin_, ahead_end_ - ahead_begin_);
    ahead_end_ -= ahead_begin_;
    ahead_begin_ = 0;
  }
  socket_.async_read_some(asio::buffer(ahead_.data() + ahead_end_, ahead_.size() - ahead_end_),
                          [self = shared_from_this()](boost::system::error_code ec, std::size_t n) {
                            if (ec) return self->Close();
                            self->ahead_end_ += n;
                            if (self->ahead_end_ - self->ahead_begin_ < kFrameHeaderSize) {
                              return self->ReadAhead();
                            }
                            self->OnHeader();
                          });
}

std::size_t UnixSession::TakeAhead(void* to, std::size_t most) {
  const std::size_t n = std::min(most, ahead_end_ - ahead_begin_);
  std::memcpy(to, ahead_.data() + ahead_begin_, n);
  ahead_begin_ += n;
  socket_read_ += n;
  return n;
}

void UnixSession::OnHeader() {
  std::uint8_t header[kFrameHeaderSize];
  TakeAhead(header, sizeof(header));
  auto h = DecodeFrameHeader(header, shared_->config.max_frame_bytes);
  if (!h.ok()) {
    ++shared_->counters.bad_frames;
    spdlog::debug("session {}: {}; closing", id_, h.status().ToString());
    // Tell the peer why, then close: the stream cannot be resynchronized.
    return CloseAfterWrite(h.status());
  }
  SetState(State::kReading);
  expected_ = h->length;
  received_ = 0;
  frame_ = nullptr;
  if (ahead_end_ - ahead_begin_ >= expected_) {
    // The whole body is read ahead: parsed where it lies (nothing reads into the buffer again
    // until this request's reply is written).
    frame_ = ahead_.data() + ahead_begin_;
    ahead_begin_ += expected_;
    socket_read_ += expected_;
    received_ = expected_;
    return OnBody();
  }
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
  if (ahead_begin_ < ahead_end_) {
    // The body's first bytes came with its header.
    received_ += TakeAhead(body_.data() + received_, room);
    if (received_ == expected_) return OnBody();
    return ReadBody();
  }
  socket_.async_read_some(asio::buffer(body_.data() + received_, room),
                          [self = shared_from_this()](boost::system::error_code ec, std::size_t n) {
                            if (ec) return self->Close();
                            self->received_ += n;
                            self->socket_read_ += n;
                            if (self->received_ == self->expected_) return self->OnBody();
                            self->ReadBody();
                          });
}

void UnixSession::OnBody() {
  ++shared_->counters.frames;
  spoke_ = true;
  if (ring_ && expected_ == 0) {
    // An empty frame on a session with a ring is its doorbell: a request is in the ring and no
    // I/O thread was polling.
    ++shared_->counters.ring_doorbells;
    ReadHeader();  // which takes it
    return;
  }
  SetState(State::kBusy);
  if (ring_busy_) {
    frame_waiting_ = true;  // served when the ring's request is done
    return;
  }
  Serve();
}

void UnixSession::Serve() {
  const char* data = frame_ != nullptr ? frame_ : body_.data();
  const bool parsed = messages_.request().ParseFromArray(data, static_cast<int>(expected_));
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
  if (messages_.request().body_case() == wire::Request::kOpenRing) return OpenRing();
  Handle(&UnixSession::Reply);
}

void UnixSession::Handle(void (UnixSession::*done)(bool reply)) {
  if (shared_->handler->MayBlock(id_, messages_.request())) {
    ++shared_->counters.on_workers;
    return HandleOnWorker(done);
  }
  bool reply;
  {
    // MayBlock is a snapshot: a request that finds it must wait after all gives up instead of
    // holding this thread (and every connection it serves), and a worker carries it on from
    // where it stopped, in the same response.
    NoWaitScope no_wait;
    reply = shared_->handler->Handle(id_, peer_, messages_.request(), &messages_.response(), &fds_);
    if (no_wait.refused()) {
      ++shared_->counters.moved_to_workers;
      return HandleOnWorker(done);
    }
  }
  (this->*done)(reply);
}

void UnixSession::HandleOnWorker(void (UnixSession::*done)(bool reply)) {
  on_worker_ = true;
  asio::post(*shared_->workers, [self = shared_from_this(), done] {
    const bool reply =
        self->shared_->handler->Handle(self->id_, self->peer_, self->messages_.request(),
                                       &self->messages_.response(), &self->fds_);
    asio::post(self->socket_.get_executor(), [self, done, reply] {
      self->on_worker_ = false;
      if (self->closed_) {  // closed while it ran (Close left this): released with what it took
        self->shared_->handler->OnDisconnect(self->id_);
        return;
      }
      ((*self).*done)(reply);
    });
  });
}

void UnixSession::OpenRing() {
  wire::Response& response = messages_.response();
  if (ring_) {
    ToWire(Status::FailedPrecondition("this connection has a request ring already"),
           response.mutable_status());
  } else if (!loop_->rings()) {
    ToWire(Status::Unimplemented("request rings are off on this server (--max-request-rings 0 "
                                 "or --busy-poll-us 0)"),
           response.mutable_status());
  } else {
    // The loop's RingRegistry::Poll runs on this session's own thread between handlers, so the
    // request is served right there: no post, no trip through the reactor (0.2-0.4 us less per
    // call).
    auto entry = loop_->rings()->Open([weak = weak_from_this()] {
      if (auto self = weak.lock()) self->TakeRing();
    });
    if (!entry.ok()) {
      ToWire(entry.status(), response.mutable_status());
    } else {
      ring_ = std::move(entry).value();
      auto* r = response.mutable_ring();
      r->set_layout_version(kRingLayoutVersion);
      r->set_ring_bytes(kRingBytes);
      r->set_request_offset(kRingRequestOffset);
      r->set_reply_offset(kRingReplyOffset);
      r->set_area_bytes(kRingAreaBytes);
      fds_.push_back(ring_->ring.fd());
    }
  }
  Reply(true);
}

void UnixSession::QueueTakeRing() {
  // At most one queued per session: a client bumping its sequence without end must not fill the
  // I/O thread's queue ahead of everyone else's handlers.
  if (ring_take_queued_.exchange(true)) return;
  asio::post(socket_.get_executor(), [self = shared_from_this()] {
    self->ring_take_queued_ = false;
    self->TakeRing();
  });
}

void UnixSession::TakeRing() {
  if (closed_ || ring_busy_) return;
  // Not beside a socket request (one being read is not yet served): again when it is done.
  if (state_ != State::kIdle && state_ != State::kReading) return;
  RingControl& c = ring_->ring.control();
  const std::uint32_t seq = c.request_seq.load(std::memory_order_acquire);
  if (seq == ring_done_) return;
  // Socket bytes sent before this request and not yet read: when they are, ReadHeader comes
  // back here.
  if (c.socket_bytes.load(std::memory_order_relaxed) > socket_read_) return;
  ring_busy_ = true;
  ring_done_ = seq;
  ++shared_->counters.ring_requests;
  wire::Request& request = messages_.request();
  wire::Response& response = messages_.response();
  // Read once, bounded, and parsed from a private copy: the client can write the area at any
  // time.
  const std::uint32_t len = c.request_len.load(std::memory_order_relaxed);
  bool parsed = false;
  if (len <= kRingAreaBytes) {
    ring_in_.assign(reinterpret_cast<const char*>(ring_->ring.request_area()), len);
    parsed = request.ParseFromArray(ring_in_.data(), static_cast<int>(len));
  }
  if (!parsed) {
    ++shared_->counters.malformed;
    ToWire(Status::InvalidArgument("malformed request in the ring: " + std::to_string(len) +
                                   " bytes that are not a tierpool Request (the area holds " +
                                   std::to_string(kRingAreaBytes) + ")"),
           response.mutable_status());
    return FinishRing(true);
  }
  if (request.body_case() == wire::Request::BODY_NOT_SET ||
      request.body_case() == wire::Request::kOpenRing) {
    ++shared_->counters.unknown;
    ToWire(Status::Unimplemented("not a request the ring carries"), response.mutable_status());
    return FinishRing(true);
  }
  Handle(&UnixSession::FinishRing);
}

void UnixSession::FinishRing(bool reply) {
  if (closed_) return;
  RingControl& c = ring_->ring.control();
  // One-way: reply_seq alone (len 0) tells the client the request was taken (it waits for
  // that before it uses the connection again).
  std::uint32_t len = 0;
  if (!reply) {
    fds_.clear();
  } else {
    wire::Response& response = messages_.response();
    response.set_id(messages_.request().id());
    const std::size_t size = response.ByteSizeLong();
    if (fds_.empty() && size <= kRingAreaBytes) {
      response.SerializeWithCachedSizesToArray(
          reinterpret_cast<std::uint8_t*>(ring_->ring.reply_area()));
      len = static_cast<std::uint32_t>(size);
    } else {
      EncodeReplyFrame(&ring_out_);
      len = kReplyOnSocket;
    }
  }
  messages_.Reset();
  c.reply_len.store(len, std::memory_order_relaxed);
  c.reply_seq.store(ring_done_);
  if (c.client_waiting.load() != 0) FutexWakeAll(&c.reply_seq);
  if (len != kReplyOnSocket) return OnRingWritten();
  // Descriptors to pass, or a reply larger than the area: it goes as a frame; the client, told
  // so by reply_len, reads it from the socket.
  ring_write_since_ = std::chrono::steady_clock::now();
  if (!fds_.empty()) return SendWithFds(&ring_out_, true);
  WriteOut(&ring_out_, true);
}

void UnixSession::OnRingWritten() {
  ring_busy_ = false;
  ring_write_since_.reset();
  since_ = std::chrono::steady_clock::now();  // activity, for the idle timeout
  if (ring_out_.size() > kFirstChunk) std::string().swap(ring_out_);
  if (frame_waiting_) {
    frame_waiting_ = false;
    return Serve();
  }
  // The client may have written another request meanwhile (it cannot, waiting for this reply,
  // unless it misbehaves): posted, so that a client bumping its sequence cannot recurse here.
  if (ring_->ring.control().request_seq.load(std::memory_order_acquire) != ring_done_) {
    QueueTakeRing();
  }
}

void UnixSession::Reply(bool reply) {
  if (closed_) return;
  if (!reply) {
    messages_.Reset();
    fds_.clear();
    return ReadHeader();
  }
  messages_.response().set_id(messages_.request().id());
  // out_ keeps its capacity from the last reply (WriteOut lets go of large ones).
  EncodeReplyFrame(&out_);
  // What a large message needed beyond the arena's first block goes back here.
  messages_.Reset();
  SetState(State::kWriting);
  if (!fds_.empty()) return SendWithFds(&out_, false);
  WriteOut(&out_, false);
}

void UnixSession::EncodeReplyFrame(std::string* out) {
  const Status s = EncodeFrameInto(messages_.response(), shared_->config.max_frame_bytes, out);
  if (s.ok()) return;
  wire::Response err;
  err.set_id(messages_.request().id());
  ToWire(Status::ResourceExhausted("reply too large for one frame: " + s.message()),
         err.mutable_status());
  (void)EncodeFrameInto(err, shared_->config.max_frame_bytes, out);
  fds_.clear();
}

void UnixSession::WriteOut(std::string* out, bool ring) {
  asio::async_write(socket_, asio::buffer(*out),
                    [self = shared_from_this(), ring](boost::system::error_code ec, std::size_t) {
                      if (ec) return self->Close();
                      if (ring) return self->OnRingWritten();
                      if (self->out_.size() > kFirstChunk) std::string().swap(self->out_);
                      self->ReadHeader();
                    });
}

// Descriptors ride on the first byte of the frame (SCM_RIGHTS); Asio has no API for that, so
// this sends with sendmsg on the non-blocking socket and waits for writability through Asio
// when the socket is full. The rest of the frame goes out with async_write.
void UnixSession::SendWithFds(std::string* out, bool ring) {
  std::vector<char> control(CMSG_SPACE(sizeof(int) * fds_.size()));
  iovec iov{out->data(), out->size()};
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
                       [self = shared_from_this(), out, ring](boost::system::error_code ec) {
                         if (ec) return self->Close();
                         self->SendWithFds(out, ring);
                       });
    return;
  }
  fds_.clear();
  out->erase(0, static_cast<std::size_t>(n));
  WriteOut(out, ring);  // the rest, if any; an empty write completes at once
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
  if (ring_busy_) {
    // A ring request runs (no timeout, as a socket request's), or its reply is being written
    // on the socket (the frame timeout, as any reply's).
    const UnixServerConfig& c = shared_->config;
    if (ring_write_since_ && c.frame_timeout_ms != 0 &&
        now - *ring_write_since_ > std::chrono::milliseconds(c.frame_timeout_ms)) {
      ++shared_->counters.frame_timeouts;
      spdlog::debug("session {}: a reply took longer than allowed; closing", id_);
      return Close();
    }
    const std::uint32_t later = std::max({c.idle_timeout_ms, c.frame_timeout_ms, 1000u});
    return ArmTimer(now + std::chrono::milliseconds(later));
  }
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
  std::string().swap(ahead_);
  --shared_->counters.active;
  shared_->peers.Remove(peer_);
  --loop_->sessions();
  if (ring_) {
    loop_->rings()->Close(ring_.get());
    FutexWakeAll(&ring_->ring.control().reply_seq);  // a client asleep on it looks at the socket
  }
  if (on_worker_) return;  // Handle's completion releases it
  shared_->handler->OnDisconnect(id_);
}

}  // namespace tierpool::transport
