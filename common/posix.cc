#include <cerrno>
#include <cstring>

#include "common/posix.h"
#include "common/status.h"

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

}  // namespace tierpool
