// What `tierpool schedule show` (and every command that writes a schedule) says about one:
// its steps, tensors by kind, compute and no-offload peak, as text or JSON, and where the time
// goes on a device by op class. Plain functions on values: no state, no locking.
#pragma once

#include <string>

#include "prefetch/device_profile.h"
#include "prefetch/schedule.h"

namespace tierpool::prefetch {

std::string Summary(const Schedule& s);
// What Summary says, for `schedule show --json`.
std::string SummaryJson(const Schedule& s);
// Where the time goes on `d`, by op class.
std::string CostTable(const Schedule& s, const DeviceProfile& d);

}  // namespace tierpool::prefetch
