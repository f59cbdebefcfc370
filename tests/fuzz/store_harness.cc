#include "tests/fuzz/store_harness.h"

#include <cstdlib>

#include "tests/fuzz/quiet_logs.h"
#include "tiers/dram_tier.h"
#include "tiers/hbm_tier.h"

namespace tierpool::fuzz {

StoreHarness& StoreHarness::Get() {
  static StoreHarness* h = [] {
    QuietLogs();
    auto* out = new StoreHarness;
    std::vector<std::unique_ptr<Tier>> tiers;
    auto d = DramTier::Create({.capacity = 4 << 20, .populate = false});
    auto hb = HbmTier::Create({.capacity = 1 << 20}, std::make_unique<HostPinnedHbmBackend>());
    if (!d.ok() || !hb.ok()) std::abort();
    tiers.push_back(std::move(d).value());
    tiers.push_back(std::move(hb).value());
    StoreConfig config;
    config.room_wait_ms = 5;  // a put that finds no room gives up quickly
    auto s = ObjectStore::Create(config, std::move(tiers));
    if (!s.ok()) std::abort();
    out->store = std::move(s).value();
    out->plans = std::make_unique<PlanRegistry>(out->store.get(), 1 << 20);
    ServiceConfig sc;
    sc.max_frame_bytes = 1 << 20;
    sc.inline_threshold_bytes = 64 << 10;
    out->service = std::make_unique<StoreService>(sc, out->store.get());
    out->service->set_plans(out->plans.get());
    return out;
  }();
  return *h;
}

void StoreHarness::Reset() {
  service->OnDisconnect(1);
  bool truncated = true;
  while (truncated) {
    auto objects = store->List("", "", "", 1000, true, &truncated);
    for (const auto& m : objects) (void)store->Delete(m.ns, m.key);
    if (objects.empty()) break;
  }
  store->Quiesce();
}

}  // namespace tierpool::fuzz
