// Device profiles: how fast a device computes and moves data, for the cost model, the planner
// and the replay simulator. Built-in profiles, or a JSON file.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"
#include "proto/schedule.pb.h"

namespace tierpool::prefetch {

struct DeviceProfile {
  std::string name;
  double peak_tflops = 0;      // dense 16-bit matrix throughput
  double efficiency = 0.6;     // fraction of peak that real kernels reach
  double hbm_gbps = 0;         // device memory bandwidth
  double h2d_gbps = 0;         // host (pooled memory) -> hbm link, one direction
  double d2h_gbps = 0;         // hbm -> host
  double link_latency_us = 0;  // fixed cost of each transfer
  double min_op_us = 2;        // launch overhead floor per op
  Status validate() const;
  // Time of one transfer of `bytes` over the link into hbm, and out of it, latency included.
  double InUs(std::uint64_t bytes) const {
    return link_latency_us + static_cast<double>(bytes) / (h2d_gbps * 1e3);
  }
  double OutUs(std::uint64_t bytes) const {
    return link_latency_us + static_cast<double>(bytes) / (d2h_gbps * 1e3);
  }
};

// h100 (PCIe host link, ~55 GB/s each way), gh200 (NVLink-C2C, ~450 GB/s each way), a100.
Result<DeviceProfile> BuiltinProfile(const std::string& name);
std::vector<std::string> BuiltinProfileNames();
// NAME of a built-in profile, or a path to a JSON file with the fields of DeviceProfile.
Result<DeviceProfile> LoadProfile(const std::string& name_or_path);

// Estimated time of one op: the larger of its FLOPs at sustained throughput and its bytes at
// HBM bandwidth, and at least the launch floor.
double EstimateComputeUs(const DeviceProfile& d, double flops, std::uint64_t bytes);
// Fills compute_us of every step from its flops and bytes_touched for this device.
void ApplyCostModel(const DeviceProfile& d, schedule::Schedule* s);

}  // namespace tierpool::prefetch
