// Internal view of the public Status type, plus helpers that turn errno into a Status.
#pragma once

#include <tierpool/status.h>

#include <string>

namespace tierpool {

// "what: strerror(err)" with a code chosen from err (ENOSPC -> RESOURCE_EXHAUSTED, ...).
Status ErrnoStatus(const std::string& what, int err);

}  // namespace tierpool
