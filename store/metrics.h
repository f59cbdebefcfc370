// What /metrics and /health say, from the same StatReply that `tierpool stat` shows, so the
// three never disagree on a name or a value (docs/operations.md lists every metric).
//
// Stateless functions; thread-safe.
#pragma once

#include <string>
#include <vector>

#include "proto/tierpool.pb.h"

namespace tierpool {

// The Prometheus text exposition format (version 0.0.4): tierpool_* families with HELP and TYPE
// lines; monotonic counts end in _total, sizes in _bytes, times in _seconds; tiers, links,
// namespaces and jobs are labels.
std::string PrometheusText(const wire::StatReply& stat);

struct Health {
  bool ok = true;
  std::string status;                // "ok", "degraded" or "shutting_down"
  std::vector<std::string> reasons;  // why not ok, one line each
  std::string ToJson() const;
};

Health CheckHealth(const wire::StatReply& stat, bool shutting_down);

}  // namespace tierpool
