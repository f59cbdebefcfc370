#include "client/python/host_memory.h"

#include <fcntl.h>
#include <malloc.h>
#include <unistd.h>

#include <cstdlib>
#include <limits>

namespace tierpool::python {

#if !(defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 33)))
#define TIERPOOL_NO_MALLINFO2 1
#endif

namespace {

#ifdef TIERPOOL_NO_MALLINFO2
// Anonymous resident memory (/proc/self/statm: resident less shared pages).
std::int64_t AnonResidentBytes() {
  static const long page = sysconf(_SC_PAGESIZE);
  // One descriptor for the process: statm is regenerated at every read from offset 0.
  static const int fd = ::open("/proc/self/statm", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  char buf[128];
  const ssize_t n = ::pread(fd, buf, sizeof(buf) - 1, 0);
  if (n <= 0) return -1;
  buf[n] = '\0';
  char* p = buf;
  std::strtoll(p, &p, 10);  // size
  const long long resident = std::strtoll(p, &p, 10);
  const long long shared = std::strtoll(p, &p, 10);
  return static_cast<std::int64_t>(resident - shared) * page;
}
#endif

}  // namespace

std::int64_t HostBytesInUse() {
#ifdef TIERPOOL_NO_MALLINFO2
  return AnonResidentBytes();
#else
  const struct mallinfo2 m = mallinfo2();
  return static_cast<std::int64_t>(m.uordblks + m.hblkhd);
#endif
}

HostMemorySampler::HostMemorySampler(std::chrono::microseconds interval)
    : interval_(interval), peak_(std::numeric_limits<std::int64_t>::min()) {
  Sample();
  thread_ = std::thread([this] { Loop(); });
}

HostMemorySampler::~HostMemorySampler() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

void HostMemorySampler::Fold(std::int64_t value) {
  std::int64_t seen = peak_.load(std::memory_order_relaxed);
  while (value > seen && !peak_.compare_exchange_weak(seen, value, std::memory_order_relaxed)) {
  }
}

std::int64_t HostMemorySampler::Sample() {
  const std::int64_t value = HostBytesInUse() - offset();
  Fold(value);
  return value;
}

std::int64_t HostMemorySampler::TakePeak() {
  const std::int64_t now = Sample();
  const std::int64_t peak = peak_.exchange(now, std::memory_order_relaxed);
  return peak > now ? peak : now;
}

void HostMemorySampler::Loop() {
  std::unique_lock lock(mu_);
  while (!stop_) {
    wake_.wait_for(lock, interval_);
    if (stop_) return;
    lock.unlock();
    Sample();
    lock.lock();
  }
}

}  // namespace tierpool::python
