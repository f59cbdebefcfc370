#include "transport/request_ring.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <ctime>
#include <new>
#include <utility>

namespace tierpool::transport {

static_assert(sizeof(RingControl) <= kRingRequestOffset);

Result<RequestRing> RequestRing::Create() {
  UniqueFd fd(::memfd_create("tierpool-ring", MFD_CLOEXEC | MFD_ALLOW_SEALING));
  if (!fd.valid()) return ErrnoStatus("memfd_create ring", errno);
  if (::ftruncate(fd.get(), static_cast<off_t>(kRingBytes)) != 0) {
    return ErrnoStatus("ftruncate ring", errno);
  }
  // The client gets this fd: a size it could shrink would fault the server's reads (SIGBUS).
  if (::fcntl(fd.get(), F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
    return ErrnoStatus("seal ring", errno);
  }
  void* p = ::mmap(nullptr, kRingBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), 0);
  if (p == MAP_FAILED) return ErrnoStatus("mmap ring", errno);
  new (p) RingControl();
  return RequestRing(std::move(fd), p);
}

Result<RequestRing> RequestRing::Map(UniqueFd fd, std::size_t bytes) {
  if (bytes != kRingBytes) {
    return Status::FailedPrecondition("the server's ring is " + std::to_string(bytes) +
                                      " bytes; this client knows rings of " +
                                      std::to_string(kRingBytes));
  }
  void* p = ::mmap(nullptr, kRingBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), 0);
  if (p == MAP_FAILED) return ErrnoStatus("mmap ring", errno);
  return RequestRing(std::move(fd), p);
}

RequestRing::RequestRing(RequestRing&& other) noexcept
    : fd_(std::move(other.fd_)), base_(std::exchange(other.base_, nullptr)) {}

RequestRing& RequestRing::operator=(RequestRing&& other) noexcept {
  if (this != &other) {
    if (base_ != nullptr) ::munmap(base_, kRingBytes);
    fd_ = std::move(other.fd_);
    base_ = std::exchange(other.base_, nullptr);
  }
  return *this;
}

RequestRing::~RequestRing() {
  if (base_ != nullptr) ::munmap(base_, kRingBytes);
}

void FutexWait(std::atomic<std::uint32_t>* word, std::uint32_t expected, std::uint32_t timeout_us) {
  timespec timeout{static_cast<time_t>(timeout_us / 1'000'000),
                   static_cast<long>(timeout_us % 1'000'000) * 1000};
  (void)::syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(word), FUTEX_WAIT, expected, &timeout,
                  nullptr, 0);
}

void FutexWakeAll(std::atomic<std::uint32_t>* word) {
  (void)::syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(word), FUTEX_WAKE, INT_MAX, nullptr,
                  nullptr, 0);
}

}  // namespace tierpool::transport
