// One connection of the Unix server (internal to transport/). A session reads a frame, runs the
// request (inline, or on a worker when the handler says it may wait), writes the reply, and only
// then reads the next frame: one request at a time per connection.
//
// Locking: every handler of a session runs on its strand (socket and timer share it), so the
// session's own state needs no lock. ServerShared's counters are atomic; its per-client
// connection table has its own mutex.
#pragma once

#include <utility>  // before Asio: its awaitable.hpp uses std::exchange without it

#include <boost/asio.hpp>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "transport/message_arena.h"
#include "transport/unix_server.h"

namespace tierpool::transport {

struct TransportCounters {
  std::atomic<std::uint64_t> accepted{0}, active{0}, refused{0}, refused_process{0},
      refused_user{0}, frames{0}, bad_frames{0}, malformed{0}, unknown{0}, handshake_timeouts{0},
      idle_timeouts{0}, frame_timeouts{0}, on_workers{0}, buffered{0}, buffer_waits{0},
      io_wakeups{0};
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
};

class UnixSession : public std::enable_shared_from_this<UnixSession> {
 public:
  using Socket = boost::asio::local::stream_protocol::socket;
  UnixSession(Socket socket, std::uint64_t id, PeerCredentials peer, ServerShared* shared);
  ~UnixSession();

  void Start();

 private:
  enum class State { kIdle, kReading, kBusy, kWriting };

  void ReadHeader();
  void OnHeader();
  void ReadBody();
  void OnBody();
  void Dispatch();
  void Reply(bool reply);
  void WriteOut();
  void SendWithFds();
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
  State state_ = State::kIdle;
  bool spoke_ = false;  // a complete frame arrived: the handshake window is over
  std::uint8_t header_[kFrameHeaderSize];
  std::uint32_t expected_ = 0;  // body length of the frame being read
  std::size_t received_ = 0;
  std::string body_;
  std::size_t charged_ = 0;  // bytes of body_ counted in counters.buffered
  MessageArena messages_;    // the request being served and its reply
  std::vector<int> fds_;
  std::string out_;
  bool closed_ = false;
};

}  // namespace tierpool::transport
