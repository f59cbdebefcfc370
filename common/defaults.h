// Defaults shared by the daemon, the client library and the tool.
#pragma once

#include <unistd.h>

#include <cstdlib>
#include <string>

namespace tierpool {

// $TIERPOOL_SOCKET, else $XDG_RUNTIME_DIR/tierpool.sock, else /tmp/tierpool-<uid>.sock.
inline std::string DefaultSocketPath() {
  if (const char* s = std::getenv("TIERPOOL_SOCKET"); s != nullptr && *s != '\0') return s;
  if (const char* d = std::getenv("XDG_RUNTIME_DIR"); d != nullptr && *d != '\0') {
    return std::string(d) + "/tierpool.sock";
  }
  return "/tmp/tierpool-" + std::to_string(::getuid()) + ".sock";
}

}  // namespace tierpool
