#include "benchmarks/device_fill.h"

#include <cuda_runtime_api.h>

namespace tierpool::live {
namespace {

// Byte `off` of the pattern: the little-endian bytes of seed ^ (word index * constant), as
// Expected() in live_replay.cc.
__global__ void Fill(unsigned char* p, std::uint64_t n, std::uint64_t seed) {
  const std::uint64_t word = static_cast<std::uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const std::uint64_t off = word * 8;
  if (off >= n) return;
  const std::uint64_t w = seed ^ (word * 0xff51afd7ed558ccdull);
  if (off + 8 <= n && reinterpret_cast<std::uintptr_t>(p) % 8 == 0) {
    *reinterpret_cast<std::uint64_t*>(p + off) = w;
    return;
  }
  for (std::uint64_t i = 0; i < 8 && off + i < n; ++i) p[off + i] = (w >> (8 * i)) & 0xff;
}

}  // namespace

bool FillOnDevice(void* p, std::size_t n, std::uint64_t seed, int device) {
  if (n == 0) return true;
  if (cudaSetDevice(device) != cudaSuccess) return false;
  const std::uint64_t words = (n + 7) / 8;
  Fill<<<static_cast<unsigned>((words + 255) / 256), 256>>>(static_cast<unsigned char*>(p), n,
                                                             seed);
  return cudaDeviceSynchronize() == cudaSuccess;
}

bool ReadStamps(const void* p, std::size_t n, std::byte* head, std::byte* tail, int device) {
  const std::size_t k = n < 64 ? n : 64;
  if (cudaSetDevice(device) != cudaSuccess) return false;
  const auto* b = static_cast<const unsigned char*>(p);
  return cudaMemcpy(head, b, k, cudaMemcpyDeviceToHost) == cudaSuccess &&
         cudaMemcpy(tail, b + n - k, k, cudaMemcpyDeviceToHost) == cudaSuccess;
}

}  // namespace tierpool::live
