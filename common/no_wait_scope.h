// Whether the calling thread may block on other work (a move landing, room being made). A
// server's I/O thread may not: while it waits, every connection it serves waits too. The
// transport runs a request on an I/O thread inside a NoWaitScope. Code that would wait asks
// ThisThreadMayWait() first and, where it may not, calls RefuseWait() and gives up, leaving
// nothing changed that the caller must undo (moves it started may go on: they are useful
// anyway); the transport then carries the request on on a worker thread, where waiting is fine.
// The handler must stop at the first refusal and not answer the refused item, so that the worker
// carries on from it (store/service.cc).
//
// Thread-local state: no locking. Scopes nest; each starts with no refusal.
#pragma once

namespace tierpool {

namespace detail {
struct NoWaitState {
  bool active = false;
  bool refused = false;
};
inline thread_local NoWaitState no_wait_state;
}  // namespace detail

class NoWaitScope {
 public:
  NoWaitScope() : saved_(detail::no_wait_state) { detail::no_wait_state = {true, false}; }
  ~NoWaitScope() { detail::no_wait_state = saved_; }
  NoWaitScope(const NoWaitScope&) = delete;
  NoWaitScope& operator=(const NoWaitScope&) = delete;
  // Whether something in this scope gave up rather than wait.
  bool refused() const { return detail::no_wait_state.refused; }

 private:
  detail::NoWaitState saved_;
};

inline bool ThisThreadMayWait() { return !detail::no_wait_state.active; }
// Called where a wait was refused (only inside a NoWaitScope).
inline void RefuseWait() { detail::no_wait_state.refused = true; }
// Whether a wait was refused in this thread's scope: a handler stops there.
inline bool WaitRefused() { return detail::no_wait_state.refused; }

}  // namespace tierpool
