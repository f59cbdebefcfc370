// The client library's internals, shared by its source files (not installed, not public):
// pooled connections, the async task queue, the connection pool (ClientCore) and the Borrowed
// guard; the arena mappings are in client/arena_mappings.h.
//
// Locking: ClientCore's pool, TaskQueue and StagedRooms guard themselves; a PooledConnection
// serializes its calls with its own mutex; ArenaMappings is written once per server incarnation,
// before it is shared, then only read (client/arena_mappings.h, client/server_incarnation.h).
// ClientCore::incarnation_mu_ is taken before mu_, never after.
#pragma once

#include <unistd.h>

#include <array>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "client/arena_mappings.h"
#include "client/device_arenas.h"
#include "client/server_incarnation.h"
#include "common/defaults.h"
#include "tierpool/client.h"
#include "transport/blocking_connection.h"
#include "transport/message_arena.h"

namespace tierpool {
namespace detail {

using transport::FromWire;

// Counts fork()s in this process's ancestry line: a child sees a larger value than the one its
// parent's connections were opened under. Connections, pins and worker threads belong to the
// process that made them; a child must never speak on its parent's sockets (its replies and
// releases would land in the parent's stream), so everything made before the fork fails there.
std::uint64_t ForkGeneration();
Status ForkedStatus(int parent_pid);
// A put's spec on the wire.
void FillSpec(const std::string& ns, std::string_view key, std::size_t size, const PutOptions& o,
              wire::PutSpec* s);

// Room the server staged on a connection for its next put (CommitRequest.stage): a put of the
// same size and placement copies into it and names it in its commit, one round trip.
// What room must match to serve a put: its size and the placement asked for.
struct PutShape {
  std::uint64_t size = 0;
  std::optional<TierKind> tier;
  int numa_node = -1;
  PutShape() = default;
  PutShape(std::uint64_t n, const PutOptions& o) : size(n), tier(o.tier), numa_node(o.numa_node) {}
  bool operator==(const PutShape&) const = default;
  bool SamePlacement(const PutShape& o) const { return tier == o.tier && numa_node == o.numa_node; }
  // Room staged for this shape serves a put of `o`'s.
  bool Holds(const PutShape& o) const { return SamePlacement(o) && o.size > 0 && o.size <= size; }
};

struct StagedRoom {
  std::uint64_t reservation_id = 0;
  PutShape shape;  // what it was staged for
  std::byte* data = nullptr;
  TierKind placed = TierKind::kDram;  // where the server made it
};

// Puts up to this size stage room for the next one (ClientOptions::stage_puts): above it the
// second round trip is a small part of the copy, and idle staged room would be large.
inline constexpr std::size_t kMaxStagedPutBytes = 4u << 20;

// A connection's staged room. A WriteReservation commits on its connection outside any borrow,
// so this guards itself. Room the connection cannot use (a second one staged by a commit that
// raced another) is given back in the next reserve or commit sent on it.
class StagedRooms {
 public:
  // Whether the server lets a put smaller than the room name it (HelloReply); without, a put
  // takes only room of its own size, and only runs of one size stage. Set before use.
  void set_fits_smaller(bool v) { fits_smaller_ = v; }
  // The staged room, if it holds a put of this shape (its placement, and its size, or less
  // where the server gives back the rest as the commit names it); the caller's from now on.
  std::optional<StagedRoom> Take(const PutShape& shape) {
    std::lock_guard lock(mu_);
    if (!room_ || !room_->shape.Holds(shape)) return std::nullopt;
    if (!fits_smaller_ && room_->shape.size != shape.size) return std::nullopt;
    return std::exchange(room_, std::nullopt);
  }
  // Gives back everything staged within a request that is about to reserve.
  void GiveBack(google::protobuf::RepeatedField<std::uint64_t>* unstage) {
    std::lock_guard lock(mu_);
    if (room_) unstage->Add(room_->reservation_id);
    room_.reset();
    for (auto id : unused_) unstage->Add(id);
    unused_.clear();
  }
  // Asks for room for a next put like this one within its commit, and says for what shape.
  // Nothing is asked when room is staged already, or when this put is not the second or later
  // of a run of puts up to 4 MiB with one placement (of one size, where the server takes only
  // that): a lone put would leave room nobody uses. The room is as large as the largest of the
  // run's last kSizesKept puts, so that where sizes vary (activations, one tensor after
  // another) most puts still fit; a smaller one gives the rest back.
  std::optional<PutShape> Ask(wire::CommitRequest* commit, const std::string& ns,
                              const PutShape& shape) {
    std::lock_guard lock(mu_);
    for (auto id : unused_) commit->add_unstage(id);
    unused_.clear();
    const bool stageable = shape.size > 0 && shape.size <= kMaxStagedPutBytes;
    const bool run = stageable && count_ > 0 && last_.SamePlacement(shape) &&
                     (fits_smaller_ || last_.size == shape.size);
    if (!run) count_ = 0;
    last_ = shape;
    if (stageable) sizes_[count_++ % kSizesKept] = shape.size;
    if (!run || room_) return std::nullopt;
    PutShape want = shape;
    for (std::size_t i = 0; i < std::min(count_, kSizesKept); ++i) {
      want.size = std::max(want.size, sizes_[i]);
    }
    auto* next = commit->add_stage();
    next->set_ns(ns);
    next->set_size(want.size);
    if (want.tier) next->set_tier_hint(static_cast<wire::Tier>(*want.tier));
    if (want.numa_node >= 0) next->set_numa_node(want.numa_node);
    return want;
  }
  // Keeps the room a commit that asked for it (for `asked`) got (a server that does not stage,
  // or had no free room, answers with none).
  void Keep(const wire::Response& resp, const ArenaMappings& mappings, const PutShape& asked) {
    if (resp.staged().items_size() != 1) return;
    const auto& r = resp.staged().items(0);
    if (r.status().code() != 0) return;
    std::byte* data = mappings.Address(r.extent());
    std::lock_guard lock(mu_);
    if (data == nullptr || r.extent().length() < asked.size || room_) {
      unused_.push_back(r.reservation_id());
      return;
    }
    room_ = StagedRoom{r.reservation_id(), asked, data, static_cast<TierKind>(r.tier())};
  }

 private:
  std::mutex mu_;
  static constexpr std::size_t kSizesKept = 4;
  bool fits_smaller_ = false;
  std::optional<StagedRoom> room_;
  PutShape last_;  // the last put committed on the connection
  // The sizes of the current run's last puts (count_ of them so far, kept round).
  std::array<std::uint64_t, kSizesKept> sizes_{};
  std::size_t count_ = 0;
  std::vector<std::uint64_t> unused_;
};

struct PooledConnection {
  std::mutex mu;
  std::unique_ptr<transport::BlockingConnection> conn;
  std::chrono::steady_clock::time_point returned;  // when it last went back to the pool
  // The server process it was opened to; its mappings and device arenas (kept open while a
  // view or reservation holds the connection) address the extents that process names.
  std::shared_ptr<ServerIncarnation> server;
  std::shared_ptr<ArenaMappings> mappings;
  std::shared_ptr<DeviceArenas> devices;
  std::uint64_t next_id = 1;
  std::uint64_t fork_generation = ForkGeneration();
  int owner_pid = ::getpid();
  std::string ns;            // the client's namespace
  bool stage_puts = false;   // ClientOptions::stage_puts
  bool packed_puts = false;  // the server takes ReserveRequest.packed (HelloReply.packed_puts)
  bool packed_gets = false;  // and GetRequest.packed_keys (HelloReply.packed_gets)
  bool packed_get_results = false;      // and GetRequest.packed_results (HelloReply's, the same)
  bool packed_reserve_results = false;  // and ReserveRequest.packed_results
  StagedRooms staged;
  // The messages of the call that has it borrowed (Reset by that call first): a batch's
  // request and reply cost a few block allocations instead of several per item.
  transport::MessageArena messages;

  bool Forked() const { return fork_generation != ForkGeneration(); }
  // A newer server process serves the socket: this connection must not speak (its process
  // may live on beside the new one, and the two must never be mixed).
  bool Superseded() const { return server && server->superseded.load(std::memory_order_acquire); }
  Status Call(wire::Request& req, wire::Response* resp) {
    if (Forked()) return ForkedStatus(owner_pid);
    if (Superseded()) return ServerIncarnation::SupersededStatus();
    std::lock_guard lock(mu);
    req.set_id(next_id++);
    return conn->Call(req, resp);
  }
  // In a forked child, or to a superseded server, this sends nothing: the pin or plan is the
  // parent's, or the old process's.
  void SendOneWay(wire::Request& req) {
    if (Forked() || Superseded()) return;
    std::lock_guard lock(mu);
    req.set_id(next_id++);
    (void)conn->SendOneWay(req);  // a dead connection's pins are released by the server anyway
  }
};

// A pipelined exchange on a borrowed connection (a batch in parts): requests sent back to
// back, each reply read later in the order they were sent. It holds the connection's mutex from
// start to end: a WriteReservation or an ObjectView uses its connection outside any borrow, and
// its round trip must not come between a request and that request's reply. Whoever sends must
// read the reply of every request it sent (a failed read leaves the connection broken), so that
// no stale reply meets the next caller.
class PipelinedExchange {
 public:
  explicit PipelinedExchange(PooledConnection& c) : c_(c), lock_(c.mu) {}
  Status Send(wire::Request& req) {
    if (c_.Forked()) return ForkedStatus(c_.owner_pid);
    if (c_.Superseded()) return ServerIncarnation::SupersededStatus();
    req.set_id(c_.next_id++);
    return c_.conn->Send(req);
  }
  // Send and Receive in one (through the connection's ring when it has one): for a request
  // sent alone.
  Status Call(wire::Request& req, wire::Response* resp) {
    if (c_.Forked()) return ForkedStatus(c_.owner_pid);
    if (c_.Superseded()) return ServerIncarnation::SupersededStatus();
    req.set_id(c_.next_id++);
    return c_.conn->Call(req, resp);
  }
  Status Receive(const wire::Request& req, wire::Response* resp) {
    return c_.conn->ReceiveReply(req, resp);
  }
  // As PooledConnection::SendOneWay, within the exchange.
  void SendOneWay(wire::Request& req) {
    if (c_.Forked() || c_.Superseded()) return;
    req.set_id(c_.next_id++);
    (void)c_.conn->SendOneWay(req);
  }

 private:
  PooledConnection& c_;
  std::lock_guard<std::mutex> lock_;
};

class TaskQueue {
 public:
  explicit TaskQueue(int threads) {
    for (int i = 0; i < threads; ++i) {
      workers_.emplace_back([this] {
        for (;;) {
          std::function<void()> task;
          {
            std::unique_lock lock(mu_);
            cv_.wait(lock, [this] { return stop_ || !tasks_.empty(); });
            if (tasks_.empty()) return;
            task = std::move(tasks_.front());
            tasks_.pop_front();
          }
          task();
        }
      });
    }
  }
  ~TaskQueue() {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (auto& w : workers_) w.join();
  }
  void Submit(std::function<void()> task) {
    {
      std::lock_guard lock(mu_);
      tasks_.push_back(std::move(task));
    }
    cv_.notify_one();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> tasks_;
  std::vector<std::thread> workers_;
  bool stop_ = false;
};

class ClientCore {
 public:
  ClientOptions options;

  std::uint64_t fork_generation = ForkGeneration();
  int owner_pid = ::getpid();

  ~ClientCore() { ShutdownTasks(); }
  bool Forked() const { return fork_generation != ForkGeneration(); }
  // Runs what is queued and stops the workers; later async calls start them again. In a forked
  // child the workers do not exist (only the forking thread survives fork()): the queue is
  // left behind rather than joined.
  void ShutdownTasks() {
    if (Forked()) {
      (void)tasks_.release();
      return;
    }
    tasks_.reset();
  }

  // Asks for a request ring; a server that offers none (an older one, rings off, all taken)
  // leaves the connection on its socket. Errors only when the connection broke.
  Status OpenRing(PooledConnection& pc) {
    wire::Request req;
    req.mutable_open_ring();
    req.set_id(pc.next_id++);
    wire::Response resp;
    std::vector<UniqueFd> fds;
    Status s = pc.conn->Call(req, &resp, &fds);
    if (pc.conn->broken()) return s;
    if (s.ok() && resp.has_ring() && fds.size() == 1) {
      (void)pc.conn->EnableRing(std::move(fds[0]), resp.ring());
    }
    return Status::Ok();
  }

  Result<std::shared_ptr<PooledConnection>> Open() {
    if (Forked()) return ForkedStatus(owner_pid);
    auto conn = transport::BlockingConnection::Connect(options.socket_path);
    if (!conn.ok()) return conn.status();
    auto pc = std::make_shared<PooledConnection>();
    pc->conn = std::move(conn).value();
    pc->ns = options.ns;
    pc->stage_puts = options.stage_puts;
    wire::Request req;
    req.mutable_hello()->set_protocol_version(transport::kProtocolVersion);
    req.mutable_hello()->set_client_name(options.client_name);
    req.mutable_hello()->set_ns(options.ns);
    req.set_id(pc->next_id++);
    wire::Response resp;
    std::vector<UniqueFd> fds;
    TIERPOOL_RETURN_IF_ERROR(pc->conn->Call(req, &resp, &fds));
    if (!resp.has_hello()) return Status::Internal("server did not answer the handshake");
    auto server = Adopt(resp.hello(), fds);
    if (!server.ok()) return server.status();
    pc->server = std::move(server).value();
    pc->mappings = pc->server->mappings;
    pc->devices = pc->server->devices;
    pc->staged.set_fits_smaller(resp.hello().staged_room_fits_smaller());
    pc->packed_puts = resp.hello().packed_puts();
    pc->packed_gets = resp.hello().packed_gets();
    pc->packed_get_results = resp.hello().packed_get_results();
    pc->packed_reserve_results = resp.hello().packed_reserve_results();
    pc->conn->set_max_frame_bytes(static_cast<std::uint32_t>(pc->server->limits.max_frame_bytes()));
    pc->conn->set_busy_poll_us(options.busy_poll_us);
    if (options.request_ring) TIERPOOL_RETURN_IF_ERROR(OpenRing(*pc));
    return pc;
  }

  Result<std::shared_ptr<PooledConnection>> Acquire() {
    if (Forked()) return ForkedStatus(owner_pid);
    std::unique_lock lock(mu_);
    for (;;) {
      if (!idle_.empty()) {
        auto c = std::move(idle_.back());
        idle_.pop_back();
        // The server closes connections idle for long (--idle-timeout-ms): one that sat in the
        // pool a while is checked first, and replaced if it is gone, so the call does not fail.
        if (std::chrono::steady_clock::now() - c->returned < std::chrono::milliseconds(100) ||
            !c->conn->PeerClosed()) {
          return c;
        }
        --open_;
        continue;
      }
      if (open_ < options.max_connections) break;
      cv_.wait(lock);
    }
    ++open_;
    lock.unlock();
    auto c = Open();
    if (!c.ok()) {
      lock.lock();
      --open_;
      cv_.notify_one();
    }
    return c;
  }

  void Return(std::shared_ptr<PooledConnection> c) {
    std::lock_guard lock(mu_);
    if (c->conn->broken() || c->Superseded()) {
      --open_;  // dropped; a later call opens a fresh one
    } else {
      c->returned = std::chrono::steady_clock::now();
      idle_.push_back(std::move(c));
    }
    cv_.notify_one();
  }

  void AddFirst(std::shared_ptr<PooledConnection> c) {
    std::lock_guard lock(mu_);
    ++open_;
    c->returned = std::chrono::steady_clock::now();
    idle_.push_back(std::move(c));
  }

  // Queues an async call; in a forked child (no workers there) runs it here, where it fails
  // at once with ForkedStatus.
  void Submit(std::function<void()> task) {
    if (Forked()) {
      task();
      return;
    }
    tasks().Submit(std::move(task));
  }

  TaskQueue& tasks() {
    std::call_once(tasks_once_, [this] {
      tasks_ = std::make_unique<TaskQueue>(std::max(1, options.async_threads));
    });
    return *tasks_;
  }

  // The server process this client speaks to now (its handshake's limits, whether its bytes go
  // through frames). Cheap: the hot paths read copy_only() and inline_threshold_bytes() instead.
  std::shared_ptr<ServerIncarnation> Current() {
    std::lock_guard lock(incarnation_mu_);
    return current_;
  }
  // The server passed no arenas of this client's namespace (its policy): every byte goes
  // through frames, views are refused.
  bool copy_only() const { return copy_only_.load(std::memory_order_relaxed); }
  std::uint64_t inline_threshold_bytes() const {
    return inline_threshold_.load(std::memory_order_relaxed);
  }
  std::uint64_t max_frame_bytes() const { return max_frame_.load(std::memory_order_relaxed); }

 private:
  // The incarnation a fresh handshake speaks for: the current one when the process is the same
  // (or too old to say), else a new one, mapped from this handshake, that supersedes the old;
  // the pool's idle connections of the old one are dropped. A handshake with a process already
  // superseded (a connection opened just before the restart) is refused.
  Result<std::shared_ptr<ServerIncarnation>> Adopt(const wire::HelloReply& hello,
                                                   std::vector<UniqueFd>& fds) {
    std::lock_guard lock(incarnation_mu_);
    if (current_ && current_->id == hello.incarnation()) return current_;
    for (std::uint64_t old : superseded_) {
      if (old == hello.incarnation()) return ServerIncarnation::SupersededStatus();
    }
    auto next = std::make_shared<ServerIncarnation>();
    next->id = hello.incarnation();
    next->limits = hello.limits();
    next->copy_only = hello.copy_only();
    TIERPOOL_RETURN_IF_ERROR(next->mappings->Map(hello, fds));
    next->devices->Record(hello);
    if (current_) {
      current_->superseded.store(true, std::memory_order_release);
      superseded_.push_back(current_->id);
      DropIdle();
    }
    current_ = next;
    copy_only_.store(next->copy_only, std::memory_order_relaxed);
    inline_threshold_.store(next->limits.inline_threshold_bytes(), std::memory_order_relaxed);
    max_frame_.store(next->limits.max_frame_bytes(), std::memory_order_relaxed);
    return next;
  }
  void DropIdle() {
    std::lock_guard lock(mu_);
    open_ -= static_cast<int>(idle_.size());
    idle_.clear();
    cv_.notify_all();
  }

  std::mutex incarnation_mu_;
  std::shared_ptr<ServerIncarnation> current_;  // GUARDED_BY(incarnation_mu_)
  std::vector<std::uint64_t> superseded_;       // GUARDED_BY(incarnation_mu_)
  std::atomic<bool> copy_only_{false};
  std::atomic<std::uint64_t> inline_threshold_{0};
  std::atomic<std::uint64_t> max_frame_{0};

  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::shared_ptr<PooledConnection>> idle_;
  int open_ = 0;
  std::once_flag tasks_once_;
  std::unique_ptr<TaskQueue> tasks_;
};

// Borrows a pooled connection for one call.
class Borrowed {
 public:
  explicit Borrowed(ClientCore* core) : core_(core) {
    auto c = core->Acquire();
    if (c.ok()) {
      conn_ = std::move(c).value();
    } else {
      status_ = c.status();
    }
  }
  ~Borrowed() {
    if (conn_) core_->Return(std::move(conn_));
  }
  const Status& status() const { return status_; }
  PooledConnection* operator->() { return conn_.get(); }
  const std::shared_ptr<PooledConnection>& shared() { return conn_; }

 private:
  ClientCore* core_;
  std::shared_ptr<PooledConnection> conn_;
  Status status_;
};

}  // namespace detail

}  // namespace tierpool
