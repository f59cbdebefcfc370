// `tierpool bench`: put and get through a running tierpoold against memcpy of the same sizes
// and, with --compare redis, against a Redis server started for the run (client/tool/redis_peer.h).
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "tierpool/client.h"

namespace tierpool::tool {

struct BenchOptions {
  double seconds_per_case = 0.4;  // time budget of each measured case
  std::string compare;            // "" or "redis"
  std::string redis_server = "redis-server";
  int threads = 2;  // the batch cases again with this many client threads; <= 1: not run
  // Whether the client was connected with verify_checksums (its gets check what they copy):
  // every row says so, as client_verifies_checksums.
  bool verify_checksums = true;
  // Which cases run: "all", "sizes" (single puts and gets of each size, with their references)
  // or "batches" (the 64 x 4 KiB batch cases), so that one of them can be profiled alone.
  std::string cases = "all";
};

// Runs every case; returns one JSON object per row. Rows of tierpool carry ratio_to_memcpy (and
// ratio_to_redis when compared); memcpy and redis rows are the references.
Result<nlohmann::json> RunBench(Client& client, const BenchOptions& options);

}  // namespace tierpool::tool
