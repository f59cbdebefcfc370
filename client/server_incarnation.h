// One tierpoold process as this client knows it (internal to the client library): what its
// handshake gave (the arenas mapped, the device arenas, its limits) and whether a newer process
// has replaced it on the socket since.
//
// A daemon that restarts on the same socket (an upgrade, a crash, a systemd restart) is another
// process with other arenas: an extent it names means nothing in the old mappings. Every
// connection therefore keeps the incarnation it was opened under, addresses extents through that
// incarnation's mappings only, and stops speaking once the incarnation is superseded
// (client/client_core.h): nothing reserved, viewed or registered with the old process is ever
// mixed with the new one.
//
// Locking: every field but `superseded` is written before the incarnation is shared and only
// read afterwards; `superseded` is set once, by the connection that met the new process.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>

#include "client/arena_mappings.h"
#include "client/device_arenas.h"
#include "common/status.h"
#include "proto/tierpool.pb.h"

namespace tierpool::detail {

struct ServerIncarnation {
  std::uint64_t id = 0;  // HelloReply.incarnation; 0: a server too old to say
  wire::Limits limits;
  bool copy_only = false;  // HelloReply.copy_only
  std::shared_ptr<ArenaMappings> mappings = std::make_shared<ArenaMappings>();
  std::shared_ptr<DeviceArenas> devices = std::make_shared<DeviceArenas>();
  std::atomic<bool> superseded{false};

  // What a call on a connection of a superseded incarnation gets.
  static Status SupersededStatus() {
    return Status::Unavailable(
        "tierpoold restarted since this connection was opened (another server process now "
        "serves the socket): what this client reserved, viewed or registered with the old one "
        "is gone; calls made anew go to the new one");
  }
};

}  // namespace tierpool::detail
