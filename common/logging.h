// Logging setup: spdlog with one process-wide level, set from --log-level.
#pragma once

#include <spdlog/spdlog.h>

#include <string_view>

#include "common/status.h"

namespace tierpool {

// Accepts trace, debug, info, warn, error, critical, off.
Status SetLogLevel(std::string_view level);

// Sends the process's log to standard error, so standard output stays for results (JSON).
void LogToStderr();

}  // namespace tierpool
