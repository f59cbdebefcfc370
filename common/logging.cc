#include "common/logging.h"

#include <spdlog/sinks/stdout_color_sinks.h>

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

void LogToStderr() { spdlog::set_default_logger(spdlog::stderr_color_mt("tierpool")); }

}  // namespace tierpool
