// The request rings (request_ring.h) of one I/O loop's sessions (io_loop.h), which the loop's
// thread polls between handlers. A ring's new request is handed to its session (the session's
// wake callback, which serves it at once: the session runs on the same thread); whether the
// thread polls is written into every ring, so that clients ring the doorbell exactly when one
// is needed.
//
// Locking: mu_ guards the ring list and the count of polling threads. Poll, Sleep and Wake run
// on the loop's thread, and so do Open and Close (its sessions' handlers); the lock stays for
// the accounting's sake and is never contended. The count of open rings is shared by every
// registry of the server, and atomic.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "common/status.h"
#include "transport/request_ring.h"

namespace tierpool::transport {

class RingRegistry {
 public:
  struct Entry {
    explicit Entry(RequestRing r) : ring(std::move(r)) {}
    RequestRing ring;
    // The last request_seq handed to the session (so that each is handed once).
    std::atomic<std::uint32_t> handed{0};
    std::function<void()> wake;  // tells the session a request is in its ring
  };

  // `open` counts the rings open in every registry of the server (one per I/O loop), which
  // together hold at most `max_rings`.
  RingRegistry(std::uint32_t max_rings, std::atomic<std::uint32_t>* open)
      : max_rings_(max_rings), open_(open) {}

  // A new ring for a session; RESOURCE_EXHAUSTED when max_rings are open across the server (the
  // client then keeps to the socket).
  Result<std::shared_ptr<Entry>> Open(std::function<void()> wake);
  void Close(const Entry* entry);
  std::size_t size() const { return count_.load(std::memory_order_relaxed); }

  // Hands every ring's new request to its session, outside mu_ (a session served at once may
  // close its ring); true when there was one. (False at once were another thread to hold mu_:
  // none does, each registry being one loop's.)
  bool Poll();
  // The calling I/O thread stops polling before it blocks. True when a request arrived that no
  // thread will see (the caller then calls Wake and keeps going instead of blocking).
  bool Sleep();
  // The calling I/O thread polls again.
  void Wake();

 private:
  const std::uint32_t max_rings_;
  std::atomic<std::uint32_t>* const open_;
  std::atomic<std::size_t> count_{0};
  std::mutex mu_;
  std::vector<std::shared_ptr<Entry>> entries_;  // guarded by mu_
  int polling_threads_ = 0;                      // guarded by mu_
};

}  // namespace tierpool::transport
