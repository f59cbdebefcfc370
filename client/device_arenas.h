// The server's arenas in device memory (the hbm tier on a GPU, tiers/cuda_hbm_backend.h): the
// Hello describes each by its device and CUDA IPC handle; a client opens one on first use
// (cudaIpcOpenMemHandle) and keeps it open while the client lives, addressing extents in it by
// offset. Without CUDA (-DTIERPOOL_CUDA=OFF) the arenas are recorded but never opened, and a
// device view is refused with a clear error.
//
// Thread safety: every method may be called from any thread (one mutex).
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>

#include "common/status.h"
#include "proto/tierpool.pb.h"

namespace tierpool::detail {

class DeviceArenas {
 public:
  DeviceArenas() = default;
  ~DeviceArenas();
  DeviceArenas(const DeviceArenas&) = delete;
  DeviceArenas& operator=(const DeviceArenas&) = delete;

  // Whether this client can open device arenas (built with CUDA).
  static bool Supported();
  void Record(const wire::HelloReply& hello);
  // Whether the arena is one of the server's device arenas.
  bool Holds(std::uint32_t arena_id);
  // The CUDA device of the server's device arenas (its hbm with --hbm-device), or -1 when it
  // described none.
  int Device();
  // The device address of the extent's first byte, opening its arena on first use; *device is
  // the CUDA device it is on.
  Result<void*> Address(const wire::Extent& e, int* device);
  // n bytes at a device address copied into host memory.
  static Status CopyToHost(void* dst, const void* src, std::size_t n, int device);
  // XXH3-64 of n bytes at a device address (a device reservation's commit, a device view's
  // Verify): hashed on the GPU where the kernel takes them (tiers/cuda_xxh3.h), else copied to
  // the host and hashed there.
  static Result<std::uint64_t> Checksum(const void* src, std::size_t n, int device);

 private:
  struct Arena {
    int device = -1;
    std::string handle;
    std::uint64_t size = 0;
    void* base = nullptr;  // opened: the arena's address in this process
  };
  std::mutex mu_;
  std::unordered_map<std::uint32_t, Arena> arenas_;  // guarded by mu_
};

}  // namespace tierpool::detail
