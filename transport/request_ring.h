// A request ring: shared memory beside a Unix connection through which the client's calls and
// their replies go without a syscall while both ends poll (docs/protocol.md, "Request rings").
// One request is outstanding at a time, as on the connection itself: the client writes a
// request into the request area and bumps request_seq; the server answers into the reply area
// and sets reply_seq to the same number. Doorbells cover the ends that are not polling: the
// client sends an empty frame on the socket when no server thread polls rings, and the server
// wakes a client that sleeps on reply_seq with a futex.
//
// The memory is the server's (a sealed memfd it creates and passes), but the client may write
// any of it at any time: the server reads each field once, bounds every length, and parses a
// private copy of the request.
//
// Locking: none. The fields are atomics; each has one writer (the client for the request side,
// the server for the reply side) and the protocol above orders them.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "common/posix.h"
#include "common/status.h"

namespace tierpool::transport {

inline constexpr std::uint32_t kRingLayoutVersion = 1;
// Each area's size: requests and replies that do not fit go through the socket as frames.
inline constexpr std::uint32_t kRingAreaBytes = 64 * 1024;
// reply_len when the reply went through the socket instead (it passes descriptors, or does not
// fit the area).
inline constexpr std::uint32_t kReplyOnSocket = 0xffffffffu;

// The first page of the ring. Each side's fields on their own cache lines.
struct RingControl {
  // Written by the client.
  alignas(64) std::atomic<std::uint32_t> request_seq{0};
  std::atomic<std::uint32_t> request_len{0};
  // Bytes the client had sent on the socket before this request: the server takes the request
  // only once it has read them, so a one-way message sent on the socket first (a release) is
  // served first.
  std::atomic<std::uint64_t> socket_bytes{0};
  alignas(64) std::atomic<std::uint32_t> client_waiting{0};  // sleeping on reply_seq
  // Written by the server.
  alignas(64) std::atomic<std::uint32_t> reply_seq{0};  // also the futex word the client sleeps on
  std::atomic<std::uint32_t> reply_len{0};
  alignas(64) std::atomic<std::uint32_t> server_polling{0};  // an I/O thread polls rings
};
static_assert(std::atomic<std::uint32_t>::is_always_lock_free);
static_assert(std::atomic<std::uint64_t>::is_always_lock_free);

inline constexpr std::uint32_t kRingRequestOffset = 4096;
inline constexpr std::uint32_t kRingReplyOffset = kRingRequestOffset + kRingAreaBytes;
inline constexpr std::size_t kRingBytes = kRingReplyOffset + kRingAreaBytes;

// One mapping of a ring.
class RequestRing {
 public:
  // A new ring in a sealed memfd (its size cannot change, so a client cannot make the server's
  // accesses fault); fd() is what the server passes.
  static Result<RequestRing> Create();
  // The client's mapping of a ring it was passed.
  static Result<RequestRing> Map(UniqueFd fd, std::size_t bytes);

  RequestRing(RequestRing&& other) noexcept;
  RequestRing& operator=(RequestRing&& other) noexcept;
  RequestRing(const RequestRing&) = delete;
  RequestRing& operator=(const RequestRing&) = delete;
  ~RequestRing();

  RingControl& control() const { return *static_cast<RingControl*>(base_); }
  std::byte* request_area() const { return static_cast<std::byte*>(base_) + kRingRequestOffset; }
  std::byte* reply_area() const { return static_cast<std::byte*>(base_) + kRingReplyOffset; }
  int fd() const { return fd_.get(); }

 private:
  RequestRing(UniqueFd fd, void* base) : fd_(std::move(fd)), base_(base) {}
  UniqueFd fd_;
  void* base_ = nullptr;
};

// Futex calls on a ring's word: shared (not FUTEX_PRIVATE), as the two ends are two processes.
// Wait returns when *word != expected, on a wake, or after timeout_us.
void FutexWait(std::atomic<std::uint32_t>* word, std::uint32_t expected, std::uint32_t timeout_us);
void FutexWakeAll(std::atomic<std::uint32_t>* word);

}  // namespace tierpool::transport
