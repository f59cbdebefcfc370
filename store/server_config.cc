// ServerConfig's checks, and the store a config describes (BuildStore). Flags are read into one
// in store/server_flags.cc.
#include "store/server_config.h"

#include "common/logging.h"
#include "common/units.h"

namespace tierpool {

Status ServerConfig::validate() const {
  TIERPOOL_RETURN_IF_ERROR(transport.validate());
  TIERPOOL_RETURN_IF_ERROR(store.validate());
  TIERPOOL_RETURN_IF_ERROR(dram.validate());
  TIERPOOL_RETURN_IF_ERROR(hbm.validate());
  TIERPOOL_RETURN_IF_ERROR(dram_watermarks.validate("dram"));
  TIERPOOL_RETURN_IF_ERROR(hbm_watermarks.validate("hbm"));
  if (hbm_device < -1) return Status::InvalidArgument("--hbm-device must be -1 or a device");
  if (hbm_check != "device" && hbm_check != "host") {
    return Status::InvalidArgument("--hbm-check is device or host");
  }
  if (hbm_checksum_threads < 0 || hbm_checksum_threads > 256) {
    return Status::InvalidArgument("--hbm-checksum-threads must be in [0, 256]");
  }
  if (hbm_completion_group_bytes > (1ull << 30)) {
    return Status::InvalidArgument("--hbm-completion-group must be at most 1G");
  }
  if (service.max_frame_bytes != transport.max_frame_bytes) {
    return Status::Internal("service and transport frame limits differ");
  }
  TIERPOOL_RETURN_IF_ERROR(service.validate());
  TIERPOOL_RETURN_IF_ERROR(metrics.validate());
  if (nvme.capacity > 0) TIERPOOL_RETURN_IF_ERROR(nvme.validate());
  return cluster.validate();
}

namespace {

// The hbm tier in the device's memory when one is asked for and answers, else the stand-in.
// dram's arenas are registered with the device, so moves run on its copy engines from them.
Result<std::unique_ptr<HbmTier>> BuildHbmTier(const HbmTierConfig& config,
                                              const ServerConfig& server, Tier& dram) {
  const int device = server.hbm_device;
  if (device >= 0) {
    auto backend =
        MakeCudaHbmBackend(device, {.checksum_threads = server.hbm_checksum_threads,
                                    .device_checks = server.hbm_check == "device",
                                    .completion_group_bytes = server.hbm_completion_group_bytes});
    if (backend.ok()) {
      auto hbm = HbmTier::Create(config, std::move(backend).value());
      if (!hbm.ok()) return hbm.status();
      for (const auto& a : dram.Arenas()) {
        void* base = dram.HostAddress({a.id, 0, a.size});
        if (Status s = (*hbm)->RegisterHostMemory(base, a.size); !s.ok()) {
          spdlog::warn(
              "dram arena {} is not registered with cuda:{} ({}): moves to and from "
              "it are staged by the driver",
              a.id, device, s.message());
        }
      }
      spdlog::info("hbm: {} of device memory on cuda:{}", FormatBytes(config.capacity), device);
      return hbm;
    }
    spdlog::warn("hbm: cuda:{} unavailable ({}); a page-locked host arena stands in", device,
                 backend.status().message());
  }
  return HbmTier::Create(config, std::make_unique<HostPinnedHbmBackend>());
}

}  // namespace

Result<std::unique_ptr<ObjectStore>> BuildStore(const ServerConfig& config,
                                                const std::vector<NamespacePool>& pools,
                                                std::unique_ptr<Tier> remote) {
  std::vector<std::unique_ptr<Tier>> tiers;
  DramTierConfig dram_config = config.dram;
  HbmTierConfig hbm_config = config.hbm;
  for (const NamespacePool& p : pools) {
    dram_config.pools.push_back(p.dram_bytes);
    hbm_config.pools.push_back(p.hbm_bytes);
  }
  auto dram = DramTier::Create(dram_config);
  if (!dram.ok()) return dram.status();
  (*dram)->set_watermarks(config.dram_watermarks);
  tiers.push_back(std::move(dram).value());
  if (config.hbm.capacity > 0) {
    auto hbm = BuildHbmTier(hbm_config, config, *tiers[0]);
    if (!hbm.ok()) return hbm.status();
    (*hbm)->set_watermarks(config.hbm_watermarks);
    tiers.push_back(std::move(hbm).value());
  }
  if (config.nvme.capacity > 0) {
    // The dram arenas are registered with the nvme backend for fixed-buffer I/O.
    std::vector<iovec> pinned;
    for (const auto& a : tiers[0]->Arenas()) {
      pinned.push_back({tiers[0]->HostAddress({a.id, 0, a.size}), a.size});
    }
    auto nvme = NvmeTier::Create(config.nvme, nullptr, pinned);
    if (!nvme.ok()) return nvme.status();
    tiers.push_back(std::move(nvme).value());
  }
  if (remote) tiers.push_back(std::move(remote));
  auto store = ObjectStore::Create(config.store, std::move(tiers));
  if (store.ok()) (*store)->SetPools(pools);
  return store;
}

}  // namespace tierpool
