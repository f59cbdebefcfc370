// One I/O thread of the Unix server and what it serves (internal to transport/): an io_context
// of its own, which only this thread runs, and the request rings of the sessions given to it.
//
// Each connection is given to one loop when it is accepted (the loop with the fewest sessions)
// and stays there, so every handler of a session, its ring requests included, runs on that one
// thread: a ring request is served inline from the loop's poll, with no post and no strand,
// whatever the number of loops. Loops share nothing on the hot path (no scheduler lock, no ring
// registry lock between threads); a second loop therefore costs a connection on the first
// nothing, where a pool of threads running one io_context made every ring request a post onto
// a strand (docs/benchmarks/redis.md, "One io_context per I/O thread").
//
// Locking: io() and rings() are used by this loop's thread and by the acceptor (which creates
// sockets on io()); sessions() is atomic. Start and Stop are called by the server's owner.
#pragma once

#include <utility>  // before Asio: its awaitable.hpp uses std::exchange without it

#include <atomic>
#include <boost/asio.hpp>
#include <cstdint>
#include <memory>
#include <thread>

#include "transport/ring_registry.h"
#include "transport/unix_server.h"

namespace tierpool::transport {

class IoLoop {
 public:
  // `wakeups` counts the times this loop blocked with nothing to do and woke to work;
  // `rings_open` the request rings open across the server's loops (ring_registry.h).
  IoLoop(const UnixServerConfig& config, std::atomic<std::uint64_t>* wakeups,
         std::atomic<std::uint32_t>* rings_open);
  ~IoLoop();
  IoLoop(const IoLoop&) = delete;
  IoLoop& operator=(const IoLoop&) = delete;

  boost::asio::io_context& io() { return io_; }
  RingRegistry* rings() { return rings_.get(); }  // null when rings are off
  // Sessions given to this loop and not closed yet.
  std::atomic<std::uint32_t>& sessions() { return sessions_; }

  void Start();  // the thread
  void Stop();   // stops the io_context and joins the thread

 private:
  // io.run(), with a bounded busy-poll after each burst of handlers whose length follows the
  // gaps between bursts (poll_window.h). The rings are polled on each turn, and told when this
  // thread stops polling them (ring_registry.h).
  void Run();

  const UnixServerConfig& config_;
  std::atomic<std::uint64_t>* wakeups_;
  std::unique_ptr<RingRegistry> rings_;
  // After rings_, so destroyed before it: the sessions its handlers still hold go first.
  boost::asio::io_context io_{1};
  std::atomic<std::uint32_t> sessions_{0};
  std::thread thread_;
};

}  // namespace tierpool::transport
