// A small in-process store, plan registry and service for the fuzz targets that feed requests
// to the server side: built once per process (arenas are costly to map), emptied after each
// input so that one input's objects do not change how the next one runs.
#pragma once

#include <memory>

#include "store/object_store.h"
#include "store/plan_binding.h"
#include "store/service.h"

namespace tierpool::fuzz {

struct StoreHarness {
  std::unique_ptr<ObjectStore> store;
  std::unique_ptr<PlanRegistry> plans;
  std::unique_ptr<StoreService> service;

  static StoreHarness& Get();
  // Drops what session 1 held and every object.
  void Reset();
};

}  // namespace tierpool::fuzz
