// Object metadata and server statistics as JSON, in the one layout the tool's --json, the C ABI
// (tp_server_stat_json) and the Python client (Client.stat) all print. Internal to the project;
// not an installed header. Pure functions, no locking.
#pragma once

#include <nlohmann/json.hpp>

#include "tierpool/client.h"

namespace tierpool {

nlohmann::json MetaJson(const ObjectMeta& m);
nlohmann::json StatsJson(const ServerStats& s);

}  // namespace tierpool
