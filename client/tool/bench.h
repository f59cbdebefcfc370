// `tierpool bench`: put and get through a running tierpoold against memcpy of the same sizes.
#pragma once

#include <nlohmann/json.hpp>

#include "tierpool/client.h"

namespace tierpool::tool {

struct BenchOptions {
  double seconds_per_case = 0.4;  // time budget of each measured case
};

// Runs every case; returns one JSON object per row.
Result<nlohmann::json> RunBench(Client& client, const BenchOptions& options);

}  // namespace tierpool::tool
