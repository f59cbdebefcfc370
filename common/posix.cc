#include "common/posix.h"

#include <fcntl.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>
#include <sstream>
#include <thread>
#include <vector>

#include "common/status.h"
#include "common/units.h"

namespace tierpool {

Status ErrnoStatus(const std::string& what, int err) {
  std::string msg = what + ": " + std::strerror(err);
  switch (err) {
    case ENOSPC:
    case ENOMEM:
    case EMFILE:
    case ENFILE:
      return Status::ResourceExhausted(std::move(msg));
    case ENOENT:
      return Status::NotFound(std::move(msg));
    case EACCES:
    case EPERM:
      return Status::PermissionDenied(std::move(msg));
    case EINVAL:
      return Status::InvalidArgument(std::move(msg));
    case ECONNREFUSED:
    case ECONNRESET:
    case EPIPE:
      return Status::Unavailable(std::move(msg));
    case ETIMEDOUT:
      return Status::DeadlineExceeded(std::move(msg));
    default:
      return Status::IoError(std::move(msg));
  }
}

Result<std::string> ReadFileUpTo(const std::string& path, std::uint64_t max_bytes) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) return Status::NotFound("cannot read " + path + ": " + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return ErrnoStatus("cannot stat " + path, errno);
  if (!S_ISREG(st.st_mode)) return Status::InvalidArgument(path + " is not a regular file");
  if (static_cast<std::uint64_t>(st.st_size) > max_bytes) {
    return Status::InvalidArgument(path + " is larger than " + FormatBytes(max_bytes));
  }
  std::string data(static_cast<std::size_t>(st.st_size), '\0');
  std::size_t got = 0;
  while (got < data.size()) {
    ssize_t n = ::read(fd.get(), data.data() + got, data.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoStatus("cannot read " + path, errno);
    if (n == 0) break;  // shrank while we read it: what is there is what we have
    got += static_cast<std::size_t>(n);
  }
  data.resize(got);
  return data;
}

long long MeminfoValue(const std::string& field) {
  std::ifstream in("/proc/meminfo");
  std::string name;
  long long value = 0;
  while (in >> name >> value) {
    if (name.size() == field.size() + 1 && name.compare(0, field.size(), field) == 0) return value;
    in.ignore(std::numeric_limits<std::streamsize>::max(), '\n');
  }
  return -1;
}

namespace {

// The lines of the mapping that starts at `start` in /proc/self/smaps, its header apart; empty
// when no mapping starts there.
std::vector<std::string> SmapsOf(const void* start) {
  std::ostringstream head;
  head << std::hex << reinterpret_cast<std::uintptr_t>(start) << '-';
  const std::string prefix = head.str();
  std::ifstream in("/proc/self/smaps");
  std::vector<std::string> lines;
  std::string line;
  bool inside = false;
  while (std::getline(in, line)) {
    // A header is "start-end perms offset dev inode [path]"; a field is "Name:  value".
    const bool header = line.find(':') == std::string::npos || line.find(' ') < line.find(':');
    if (header) {
      if (inside) break;
      inside = line.compare(0, prefix.size(), prefix) == 0;
    } else if (inside) {
      lines.push_back(line);
    }
  }
  return lines;
}

}  // namespace

long long SmapsValue(const void* start, const std::string& field) {
  for (const std::string& line : SmapsOf(start)) {
    if (line.size() > field.size() && line.compare(0, field.size(), field) == 0 &&
        line[field.size()] == ':') {
      return std::strtoll(line.c_str() + field.size() + 1, nullptr, 10);
    }
  }
  return -1;
}

bool SmapsHasFlag(const void* start, const std::string& flag) {
  for (const std::string& line : SmapsOf(start)) {
    if (line.compare(0, 8, "VmFlags:") != 0) continue;
    std::istringstream flags(line.substr(8));
    std::string f;
    while (flags >> f) {
      if (f == flag) return true;
    }
  }
  return false;
}

std::string ShmemHugePagesSetting() {
  std::ifstream in("/sys/kernel/mm/transparent_hugepage/shmem_enabled");
  std::string word;
  while (in >> word) {
    if (word.size() > 2 && word.front() == '[' && word.back() == ']') {
      return word.substr(1, word.size() - 2);
    }
  }
  return "";
}

bool ShmemHugePagesOnAdvice(const std::string& s) {
  return s == "advise" || s == "within_size" || s == "always" || s == "force";
}

int UsableCores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return CPU_COUNT(&set);
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

bool EnterNetworkNamespace(const std::string& name) {
  const int fd = ::open(("/run/netns/" + name).c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const bool entered = ::setns(fd, CLONE_NEWNET) == 0;
  ::close(fd);
  return entered && ::unshare(CLONE_NEWNS) == 0 &&
         ::mount("", "/", nullptr, MS_SLAVE | MS_REC, nullptr) == 0 &&
         ::umount2("/sys", MNT_DETACH) == 0 &&
         ::mount(name.c_str(), "/sys", "sysfs", 0, nullptr) == 0;
}

}  // namespace tierpool
