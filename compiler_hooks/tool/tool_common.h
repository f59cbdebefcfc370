// What the tool's commands share: failing with a message, writing a file or standard output,
// and splitting optimizer updates at a size the user wrote.
#pragma once

#include <string>

#include "common/status.h"
#include "prefetch/split_updates.h"

namespace tierpool::tool {

// Prints "tierpool: <status>" to standard error; the exit status 1.
int Fail(const Status& s);
// "-" is standard output.
Status WriteFile(const std::string& path, const std::string& data);
// split-updates with a chunk size as the user wrote it ("16M").
Result<prefetch::SplitUpdatesResult> SplitUpdates(const prefetch::Schedule& s,
                                                  const std::string& chunk);

}  // namespace tierpool::tool
