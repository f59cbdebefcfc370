// A plan file for `tierpool replay --plan` (and `replay --live --plan`): its actions and its
// recomputes are outside input, replayed against a fixed training chain.
#include "prefetch/device_profile.h"
#include "prefetch/simulator.h"
#include "tests/fuzz/fuzz_target.h"
#include "tests/fuzz/quiet_logs.h"
#include "tests/prefetch/random_schedule.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace tierpool;
  fuzz::QuietLogs();
  static const prefetch::Schedule s = prefetch::TrainingChain(6, 1 << 20, 50).s;
  static const prefetch::Lifetimes lt(s);
  static const prefetch::DeviceProfile d = prefetch::BuiltinProfile("h100").value();
  schedule::Plan plan;
  if (!plan.ParseFromArray(data, static_cast<int>(size))) return 0;
  for (double share : {1.0, 0.75}) {
    const auto budget = static_cast<std::uint64_t>(share * static_cast<double>(lt.peak_bytes()));
    (void)prefetch::Replay(
        s, lt, d, {.policy = prefetch::Policy::kPlanned, .hbm_budget = budget, .plan = &plan});
  }
  return 0;
}
