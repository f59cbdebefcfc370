#include "common/posix.h"

#include <fcntl.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <limits>

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

}  // namespace tierpool
