// A plan registration from a client: the schedule and plan bytes inside it are outside input.
#include "tests/fuzz/fuzz_target.h"
#include "tests/fuzz/store_harness.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace tierpool;
  auto& h = fuzz::StoreHarness::Get();
  wire::RegisterPlanRequest request;
  if (!request.ParseFromArray(data, static_cast<int>(size))) return 0;
  auto id = h.plans->Register(request, 1);
  if (id.ok()) {
    for (std::uint32_t step = 0; step < 4; ++step)
      (void)h.plans->Progress(*id, 1, 0, step, step << 20);
    (void)h.plans->Unregister(*id, 1);
  }
  h.Reset();
  return 0;
}
