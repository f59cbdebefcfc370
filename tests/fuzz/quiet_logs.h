// Bad input is the point of a fuzz target: its rejections are not logged (ours through spdlog,
// protobuf's parse errors through the same route). Once per process.
#pragma once

#include "common/logging.h"
#include "transport/framing.h"

namespace tierpool::fuzz {

inline void QuietLogs() {
  static const bool done = [] {
    (void)SetLogLevel("off");
    transport::RouteProtobufLogs();
    return true;
  }();
  (void)done;
}

}  // namespace tierpool::fuzz
