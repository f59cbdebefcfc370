// One connection of the Unix server (internal to transport/). A session reads a frame, runs the
// request (inline, or on a worker when the handler says it may wait), writes the reply, and only
// then reads the next frame: one request at a time per connection.
//
// A session may also have a request ring (request_ring.h): its requests are served one at a time
// too, never beside one from the socket (a frame that completes while a ring request runs waits
// for it, and a ring request waits for the socket's), and only after every socket byte the
// client sent before it, so the handler sees one ordered stream.
//
// Locking: every handler of a session runs on its I/O loop's one thread (io_loop.h: socket,
// timer and ring share it), so the session's own state needs no lock. ServerShared's counters are
// atomic; its per-client connection table has its own mutex.
#pragma once

#include <utility>  // before Asio: its awaitable.hpp uses std::exchange without it

#include <atomic>
#include <boost/asio.hpp>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "transport/io_loop.h"
#include "transport/message_arena.h"
#include "transport/ring_registry.h"
#include "transport/unix_server.h"

namespace tierpool::transport {

struct TransportCounters {
  std::atomic<std::uint64_t> accepted{0}, active{0}, refused{0}, refused_process{0},
      refused_user{0}, frames{0}, bad_frames{0}, malformed{0}, unknown{0}, handshake_timeouts{0},
      idle_timeouts{0}, frame_timeouts{0}, on_workers{0}, moved_to_workers{0}, buffered{0},
      buffer_waits{0}, io_wakeups{0}, ring_requests{0}, ring_doorbells{0};
};

// Connections per process and per user, for the per-client limits.
class PeerTable {
 public:
  // Counts the connection in; FAILED (with which limit) when it would pass one.
  enum class Admit { kOk, kProcessLimit, kUserLimit };
  Admit Add(const PeerCredentials& peer, const UnixServerConfig& config);
  void Remove(const PeerCredentials& peer);

 private:
  std::mutex mu_;
  std::unordered_map<pid_t, std::uint32_t> per_process_;  // guarded by mu_
  std::unordered_map<uid_t, std::uint32_t> per_user_;     // guarded by mu_
};

// What the sessions of one server share; outlives them all (the server stops its threads first).
struct ServerShared {
  UnixServerConfig config;
  RequestHandler* handler = nullptr;
  TransportCounters counters;
  PeerTable peers;
  std::unique_ptr<boost::asio::thread_pool> workers;
  // Request rings open across the I/O loops' registries, which count them.
  std::atomic<std::uint32_t> rings_open{0};
};

class UnixSession : public std::enable_shared_from_this<UnixSession> {
 public:
  using Socket = boost::asio::local::stream_protocol::socket;
  // `socket` was created on `loop`'s io_context, where every handler of the session runs.
  UnixSession(Socket socket, std::uint64_t id, PeerCredentials peer, ServerShared* shared,
              IoLoop* loop);
  ~UnixSession();

  void Start();

 private:
  enum class State { kIdle, kReading, kBusy, kWriting };

  // The next frame's header from what was read ahead, or a read for more first.
  void ReadHeader();
  // One read from the socket into ahead_ (up to its size), then OnHeader once a header is in.
  void ReadAhead();
  // Up to `most` bytes read ahead and not yet taken, copied to `to`; counted as read.
  std::size_t TakeAhead(void* to, std::size_t most);
  void OnHeader();
  void ReadBody();
  void OnBody();
  void Serve();  // the frame in body_
  // Runs messages_'s request (on a worker when the handler says it may wait, or when it finds
  // it must after all: common/no_wait_scope.h), then `done` (Reply or FinishRing) on the
  // session's executor.
  void Handle(void (UnixSession::*done)(bool reply));
  void HandleOnWorker(void (UnixSession::*done)(bool reply));
  void Reply(bool reply);
  // messages_'s response as a frame into *out; an error reply instead when it is too large.
  void EncodeReplyFrame(std::string* out);
  // The reply in *out (and fds_) onto the socket; then ReadHeader, or OnRingWritten for a ring
  // request's reply.
  void WriteOut(std::string* out, bool ring);
  void SendWithFds(std::string* out, bool ring);
  void OpenRing();
  // Serves the ring's request when there is one and nothing else runs.
  void TakeRing();
  // TakeRing posted onto the session's executor, unless it is queued already (any thread).
  void QueueTakeRing();
  void FinishRing(bool reply);
  void OnRingWritten();
  void CloseAfterWrite(const Status& why);
  // The buffer grows to at most `want` bytes when the server-wide bound allows; false when it
  // must wait (a timer retries).
  bool Grow(std::size_t want);
  void ReleaseBuffer();
  // The state changes without touching the timer (a per-request timer operation costs a
  // syscall and a cancelled handler): the timer wakes at the earliest deadline it knows of and
  // looks at the state then.
  void SetState(State state);
  std::optional<std::chrono::steady_clock::time_point> Deadline() const;
  void ArmTimer(std::chrono::steady_clock::time_point when);
  void OnTimer();
  void Close();

  Socket socket_;
  boost::asio::steady_timer timer_;
  bool timer_armed_ = false;
  std::chrono::steady_clock::time_point accepted_;
  std::chrono::steady_clock::time_point since_;  // when state_ began
  std::uint64_t id_;
  PeerCredentials peer_;
  ServerShared* shared_;
  IoLoop* loop_;
  State state_ = State::kIdle;
  bool spoke_ = false;  // a complete frame arrived: the handshake window is over
  // Bytes read from the socket and not yet taken: [ahead_begin_, ahead_end_). A fixed
  // kReadAhead per connection (made at its first read, not counted in counters.buffered, as
  // the socket's own buffers are not); bodies larger than what it holds go to body_.
  std::string ahead_;
  std::size_t ahead_begin_ = 0;
  std::size_t ahead_end_ = 0;
  std::uint32_t expected_ = 0;  // body length of the frame being read
  std::size_t received_ = 0;
  const char* frame_ = nullptr;  // the body when it lies whole in ahead_; else body_ holds it
  std::string body_;
  std::size_t charged_ = 0;  // bytes of body_ counted in counters.buffered
  MessageArena messages_;    // the request being served and its reply
  std::vector<int> fds_;
  std::string out_;
  bool closed_ = false;
  // A request runs on a worker. A connection that closes meanwhile is released (OnDisconnect)
  // only once it is done, by Handle's completion: what the request takes (a pin, a
  // reservation) would otherwise outlive the release and be held by nobody.
  bool on_worker_ = false;
  // Bytes of the socket's stream taken as frames (what was read ahead counts once it is taken):
  // a ring request waits until every byte its client sent before it is.
  std::uint64_t socket_read_ = 0;

  std::shared_ptr<RingRegistry::Entry> ring_;
  std::atomic<bool> ring_take_queued_{false};
  bool ring_busy_ = false;       // a ring request is being served (or its reply written)
  std::uint32_t ring_done_ = 0;  // the last request_seq taken
  bool frame_waiting_ = false;   // a socket frame waits for the ring request to finish
  std::string ring_in_;          // the ring request, copied out of the client's reach
  std::string ring_out_;         // a ring reply that goes through the socket
  std::optional<std::chrono::steady_clock::time_point> ring_write_since_;
};

}  // namespace tierpool::transport
