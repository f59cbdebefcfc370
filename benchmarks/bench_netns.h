// A network namespace joined to this one by a veth pair, for benchmarks that measure a data path
// between two hosts on one machine (`tierpool bench remote --veth`): each side has its own
// address and its own stack, so every byte crosses the veth as between two sidecars. Made with
// `ip` (iproute2) and removed by the destructor; root (CAP_NET_ADMIN) is needed.
//
// Thread safety: none; made and dropped by one thread.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "common/status.h"

namespace tierpool {

class BenchNetns {
 public:
  // A namespace `tpbench<pid>` at 10.241.<n>.2/24, this side at 10.241.<n>.1/24.
  static Result<BenchNetns> Create();
  ~BenchNetns();
  BenchNetns(BenchNetns&& o) noexcept;
  BenchNetns& operator=(BenchNetns&&) = delete;

  const std::string& name() const { return name_; }
  const std::string& far_address() const { return far_; }    // inside the namespace
  const std::string& near_address() const { return near_; }  // this side

  // In a forked child: enters the namespace, with its own sysfs on /sys as `ip netns exec`
  // gives (UCX lists network devices there). False if it could not.
  bool EnterInChild() const;

 private:
  BenchNetns() = default;
  std::string name_, link_, far_, near_;
};

// Starts `argv` (argv[0] a path) with its output to /dev/null, inside `netns` when one is given.
pid_t SpawnQuiet(const std::vector<std::string>& argv, const BenchNetns* netns);
// SIGTERM, then waits for it.
void StopSpawned(pid_t pid);

}  // namespace tierpool
