// Small POSIX helpers: an owning file descriptor, monotonic time, reading a bounded file.
#pragma once

#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <utility>

#include "common/status.h"

namespace tierpool {

class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  ~UniqueFd() { reset(); }
  UniqueFd(UniqueFd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  UniqueFd& operator=(UniqueFd&& o) noexcept {
    if (this != &o) {
      reset();
      fd_ = std::exchange(o.fd_, -1);
    }
    return *this;
  }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int release() { return std::exchange(fd_, -1); }
  void reset(int fd = -1) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = fd;
  }

 private:
  int fd_ = -1;
};

using SteadyClock = std::chrono::steady_clock;

inline std::uint64_t NowMicros() {
  return static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::microseconds>(SteadyClock::now().time_since_epoch())
          .count());
}

// The whole of a file from outside (a policy, a profile, a schedule), refused before anything is
// read when it is larger than max_bytes: NOT_FOUND if it cannot be opened, INVALID_ARGUMENT if
// it is too large.
Result<std::string> ReadFileUpTo(const std::string& path, std::uint64_t max_bytes);

// A field of /proc/meminfo as its number ("HugePages_Free" -> 12); -1 when it is not there.
long long MeminfoValue(const std::string& field);

// What this process's mapping that starts at `start` says in /proc/self/smaps: the value of a
// size field in kB (e.g. "ShmemPmdMapped", "Rss"; -1 when the mapping or the field is not
// there), or whether a flag is among its VmFlags (e.g. "hg": madvise(MADV_HUGEPAGE) applies).
long long SmapsValue(const void* start, const std::string& field);
bool SmapsHasFlag(const void* start, const std::string& flag);
// The kernel's setting for transparent huge pages in shared memory (memfd, tmpfs):
// "never", "advise", "within_size", "always", "deny" or "force"; empty when it does not say.
std::string ShmemHugePagesSetting();
// Whether that setting (the kernel's now, unless given) gives shared memory that asks
// (MADV_HUGEPAGE) 2 MiB pages.
bool ShmemHugePagesOnAdvice(const std::string& setting = ShmemHugePagesSetting());

// Cores this process may run on (its affinity mask, which taskset and container limits set;
// hardware_concurrency counts the machine's).
int UsableCores();

// In the child of a fork (one thread): joins the network namespace `name` (/run/netns/NAME), with
// a mount namespace of its own that has the namespace's sysfs on /sys, as `ip netns exec` gives
// (what lists network devices there, UCX for one, then sees that namespace's). False if not.
bool EnterNetworkNamespace(const std::string& name);

}  // namespace tierpool
