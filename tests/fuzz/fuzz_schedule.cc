// A schedule file: binary protobuf or JSON, then the checks and the derived lifetimes.
#include <string>

#include "prefetch/schedule.h"
#include "tests/fuzz/fuzz_target.h"
#include "tests/fuzz/quiet_logs.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace tierpool;
  fuzz::QuietLogs();
  prefetch::Schedule s;
  if (s.ParseFromArray(data, static_cast<int>(size)) && prefetch::Validate(s).ok()) {
    prefetch::Lifetimes lt(s);
    (void)lt.peak_bytes();
  }
  auto json = prefetch::ParseScheduleJson(std::string(reinterpret_cast<const char*>(data), size));
  if (json.ok()) {
    prefetch::Lifetimes lt(*json);
    (void)lt.peak_bytes();
  }
  return 0;
}
