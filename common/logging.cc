#include "common/logging.h"

#include <string>

namespace tierpool {

Status SetLogLevel(std::string_view level) {
  auto lvl = spdlog::level::from_str(std::string(level));
  // from_str maps unknown names to "off"; only accept "off" when asked for explicitly.
  if (lvl == spdlog::level::off && level != "off") {
    return Status::InvalidArgument("unknown log level '" + std::string(level) +
                                   "' (trace, debug, info, warn, error, critical, off)");
  }
  spdlog::set_level(lvl);
  return Status::Ok();
}

}  // namespace tierpool
