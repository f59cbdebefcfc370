// A tierpoold of the live replay's own, on a socket of its own, sized for one policy's run; the
// binary beside this one's (or the build tree's store/). Stopped with SIGTERM on destruction.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>

#include "common/status.h"

namespace tierpool::live {

class PrivateServer {
 public:
  PrivateServer() = default;
  PrivateServer(const PrivateServer&) = delete;
  PrivateServer& operator=(const PrivateServer&) = delete;
  ~PrivateServer();

  // hbm and dram in bytes; link_rate: tierpoold's --link-rate; hbm_device: --hbm-device.
  Status Start(std::uint64_t hbm, std::uint64_t dram, const std::string& link_rate,
               const std::string& log_level, int hbm_device);
  const std::string& socket() const { return socket_; }

 private:
  pid_t pid_ = -1;
  std::string socket_;
};

}  // namespace tierpool::live
