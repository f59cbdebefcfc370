// A TCP listener on 127.0.0.1 at a port the kernel picks, for tests that play a peer or a
// service themselves (a frozen lender, a lender that trickles, a fake etcd).
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cstdint>

#include "common/posix.h"

namespace tierpool::testing {

struct LoopbackListener {
  UniqueFd fd;  // invalid when the socket could not be bound or listened on
  std::uint16_t port = 0;
};

inline LoopbackListener ListenOnLoopback(int backlog = 16) {
  LoopbackListener l;
  UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  if (!fd.valid() || ::bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      ::listen(fd.get(), backlog) != 0 ||
      ::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    return l;
  }
  l.fd = std::move(fd);
  l.port = ntohs(addr.sin_port);
  return l;
}

}  // namespace tierpool::testing
