// XXH3-64 of device memory, computed on the GPU: the same value as Xxh3 (common/checksum.h) of
// the same bytes, for inputs longer than 240 bytes (XXH3's long-input path; shorter ones are
// hashed on the host). The 1 KiB blocks' contributions are summed in parallel; the per-lane
// chain through the blocks (XXH3 scrambles its accumulators after each) runs in one warp.
// Built only with -DTIERPOOL_CUDA=ON.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace tierpool {

inline constexpr std::uint64_t kDeviceXxh3MinBytes = 241;

// Device scratch a hash of `size` bytes needs (the blocks' contributions and the result).
std::uint64_t DeviceXxh3ScratchBytes(std::uint64_t size);

// Queues the hash of `size` (>= kDeviceXxh3MinBytes) bytes at `data` on `stream`; the result
// lands in the first 8 bytes of `scratch` (device memory of DeviceXxh3ScratchBytes(size)).
cudaError_t EnqueueDeviceXxh3(const void* data, std::uint64_t size, void* scratch,
                              cudaStream_t stream);

}  // namespace tierpool
