// tierpoold's configuration: built-in defaults, then a config file (--config), then flags.
#pragma once

#include <string>
#include <vector>

#include "store/cluster.h"
#include "store/metrics_server.h"
#include "store/namespace_policy.h"
#include "store/object_store.h"
#include "store/service.h"
#include "tiers/dram_tier.h"
#include "tiers/hbm_tier.h"
#include "tiers/nvme_tier.h"
#include "transport/unix_server.h"

namespace tierpool {

struct ServerConfig {
  transport::UnixServerConfig transport;
  StoreConfig store;
  ServiceConfig service;
  DramTierConfig dram;
  HbmTierConfig hbm;
  NvmeTierConfig nvme;  // on when nvme.capacity > 0
  Watermarks dram_watermarks;
  Watermarks hbm_watermarks;
  // --hbm-device: the CUDA device whose memory is the hbm tier; -1: the host stand-in. A server
  // built without CUDA, or on a node where the device does not answer, falls back to the
  // stand-in and says so in its log.
  int hbm_device = -1;
  // --hbm-checksum-threads: threads checking the bytes of device copies (0: the backend's
  // default, tiers/hbm_tier.h MakeCudaHbmBackend).
  int hbm_checksum_threads = 0;
  // --hbm-check: where copies to and from a device hbm are checked: "device" (on the GPU, where
  // a copy allows it) or "host".
  std::string hbm_check = "device";
  // --hbm-completion-group: with --hbm-device, unchecked copies queued back to back share one
  // completion event until they hold this many bytes (0: an event per copy).
  std::uint64_t hbm_completion_group_bytes = CudaHbmOptions{}.completion_group_bytes;
  MetricsServerConfig metrics;
  ClusterConfig cluster;  // on with --etcd
  // --metrics-listen given: failing to bind it stops the start (the default only warns, so that
  // a second server on the node still starts).
  bool metrics_required = false;
  std::string log_level = "info";
  std::string namespace_policy;  // --namespace-policy: a JSON file (store/namespace_policy.h)
  std::string persist_dir;       // --persist: snapshot retained objects here at a clean shutdown
  std::uint64_t persist_journal_bytes = 64ull << 20;  // its journal is compacted past this
  Status validate() const;
};

// Parses argv. Returns the config, or an error; sets *exit_now when --help or --version printed
// what was asked.
Result<ServerConfig> ParseServerFlags(int argc, const char* const* argv, bool* exit_now);

// --io-threads: a number from 1 to 64, or "auto": AutoIoThreads of the CPUs this process may
// run on (its affinity mask).
Result<int> ParseIoThreads(const std::string& value);
// A quarter of the CPUs, 1 to 4: one I/O thread per connection that a trainer's threads keep
// busy, leaving most cores to the trainer; a polling thread whose clients are busy holds a core
// (docs/operations.md, "I/O threads").
int AutoIoThreads(int cpus);

// "remote,nvme" and the like (--spill-order): the tiers below dram, nearest first.
Result<std::vector<TierKind>> ParseSpillOrder(const std::string& text);

// Builds the tiers and the store from a validated config: the namespace pools' arenas carved
// out of dram and hbm, the store told of them (store/namespace_policy.h).
// remote: the cluster's remote tier, when this node borrows.
Result<std::unique_ptr<ObjectStore>> BuildStore(const ServerConfig& config,
                                                const std::vector<NamespacePool>& pools = {},
                                                std::unique_ptr<Tier> remote = nullptr);

}  // namespace tierpool
