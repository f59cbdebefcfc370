// A schedule file: binary protobuf or JSON, then the checks, the derived lifetimes and the
// reorders of `tierpool schedule reorder` (each must keep every dependency).
#include <cstdlib>
#include <string>

#include "prefetch/reorder.h"
#include "prefetch/schedule.h"
#include "tests/fuzz/fuzz_target.h"
#include "tests/fuzz/quiet_logs.h"

namespace {
tierpool::Result<tierpool::prefetch::ReorderResult> LowerPeakOrderOf(
    const tierpool::prefetch::Schedule& s) {
  return tierpool::prefetch::LowerPeakOrder(s);
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace tierpool;
  fuzz::QuietLogs();
  prefetch::Schedule s;
  if (s.ParseFromArray(data, static_cast<int>(size)) && prefetch::Validate(s).ok()) {
    prefetch::Lifetimes lt(s);
    (void)lt.peak_bytes();
    for (auto reorder : {prefetch::HoistOptimizerUpdates, &LowerPeakOrderOf}) {
      auto r = reorder(s);
      if (r.ok() && !prefetch::CheckOrder(s, r->order).ok()) std::abort();
    }
  }
  auto json = prefetch::ParseScheduleJson(std::string(reinterpret_cast<const char*>(data), size));
  if (json.ok()) {
    prefetch::Lifetimes lt(*json);
    (void)lt.peak_bytes();
  }
  return 0;
}
