#include "tiers/cuda_xxh3.h"

namespace tierpool {
namespace {

// XXH3's default secret (xxhash.h, XXH3_kSecret): 192 bytes.
__constant__ unsigned char kSecret[192] = {
    0xb8, 0xfe, 0x6c, 0x39, 0x23, 0xa4, 0x4b, 0xbe, 0x7c, 0x01, 0x81, 0x2c, 0xf7, 0x21, 0xad, 0x1c,
    0xde, 0xd4, 0x6d, 0xe9, 0x83, 0x90, 0x97, 0xdb, 0x72, 0x40, 0xa4, 0xa4, 0xb7, 0xb3, 0x67, 0x1f,
    0xcb, 0x79, 0xe6, 0x4e, 0xcc, 0xc0, 0xe5, 0x78, 0x82, 0x5a, 0xd0, 0x7d, 0xcc, 0xff, 0x72, 0x21,
    0xb8, 0x08, 0x46, 0x74, 0xf7, 0x43, 0x24, 0x8e, 0xe0, 0x35, 0x90, 0xe6, 0x81, 0x3a, 0x26, 0x4c,
    0x3c, 0x28, 0x52, 0xbb, 0x91, 0xc3, 0x00, 0xcb, 0x88, 0xd0, 0x65, 0x8b, 0x1b, 0x53, 0x2e, 0xa3,
    0x71, 0x64, 0x48, 0x97, 0xa2, 0x0d, 0xf9, 0x4e, 0x38, 0x19, 0xef, 0x46, 0xa9, 0xde, 0xac, 0xd8,
    0xa8, 0xfa, 0x76, 0x3f, 0xe3, 0x9c, 0x34, 0x3f, 0xf9, 0xdc, 0xbb, 0xc7, 0xc7, 0x0b, 0x4f, 0x1d,
    0x8a, 0x51, 0xe0, 0x4b, 0xcd, 0xb4, 0x59, 0x31, 0xc8, 0x9f, 0x7e, 0xc9, 0xd9, 0x78, 0x73, 0x64,
    0xea, 0xc5, 0xac, 0x83, 0x34, 0xd3, 0xeb, 0xc3, 0xc5, 0x81, 0xa0, 0xff, 0xfa, 0x13, 0x63, 0xeb,
    0x17, 0x0d, 0xdd, 0x51, 0xb7, 0xf0, 0xda, 0x49, 0xd3, 0x16, 0x55, 0x26, 0x29, 0xd4, 0x68, 0x9e,
    0x2b, 0x16, 0xbe, 0x58, 0x7d, 0x47, 0xa1, 0xfc, 0x8f, 0xf8, 0xb8, 0xd1, 0x7a, 0xd0, 0x31, 0xce,
    0x45, 0xcb, 0x3a, 0x8f, 0x95, 0x16, 0x04, 0x28, 0xaf, 0xd7, 0xfb, 0xca, 0xbb, 0x4b, 0x40, 0x7e,
};

constexpr std::uint64_t kPrime32_1 = 0x9E3779B1ull, kPrime32_2 = 0x85EBCA77ull,
                        kPrime32_3 = 0xC2B2AE3Dull;
constexpr std::uint64_t kPrime64_1 = 0x9E3779B185EBCA87ull, kPrime64_2 = 0xC2B2AE3D27D4EB4Full,
                        kPrime64_3 = 0x165667B19E3779F9ull, kPrime64_4 = 0x85EBCA77C2B2AE63ull,
                        kPrime64_5 = 0x27D4EB2F165667C5ull;
constexpr std::uint64_t kBlockBytes = 1024;  // 16 stripes of 64 bytes per scramble
constexpr int kStripesPerBlock = 16;

// Little-endian 64-bit reads at any alignment (the secret's offsets 11 and 121, the last stripe).
__device__ __forceinline__ std::uint64_t Read64(const unsigned char* p) {
  std::uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}
__device__ __forceinline__ std::uint64_t Secret64(int offset) { return Read64(kSecret + offset); }
__device__ __forceinline__ std::uint64_t Mul32To64(std::uint64_t key) {
  return (key & 0xFFFFFFFFull) * (key >> 32);
}

// What one full block adds to lane j's accumulator (XXH3_accumulate over its 16 stripes): lane
// j takes the product of its own key halves and the data word of lane j ^ 1. Blocks start at
// multiples of 1 KiB of an 8-byte-aligned input, so the words are read aligned.
__global__ void BlockSums(const std::uint64_t* in, std::uint64_t blocks, std::uint64_t* sums) {
  const std::uint64_t t = static_cast<std::uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const std::uint64_t b = t / 8;
  const int j = static_cast<int>(t % 8);
  if (b >= blocks) return;
  const std::uint64_t* p = in + b * (kBlockBytes / 8);
  std::uint64_t sum = 0;
#pragma unroll
  for (int s = 0; s < kStripesPerBlock; ++s) {
    const std::uint64_t v = p[s * 8 + j];
    sum += Mul32To64(v ^ Secret64((s + j) * 8));
    sum += p[s * 8 + (j ^ 1)];
  }
  sums[b * 8 + j] = sum;
}

constexpr int kChainThreads = 256;
constexpr int kChunk = kChainThreads;  // blocks' sums staged in shared memory at a time

// Each lane's chain through the blocks, then the last partial block, the last stripe, and the
// merge (XXH3_hashLong_64b_internal, XXH3_mergeAccs, XXH3_avalanche). The chain is sequential
// (XXH3 scrambles after every block), so eight threads walk it while the whole thread block
// stages the next chunk of sums into shared memory.
__global__ void ChainAndMerge(const unsigned char* in, std::uint64_t len, std::uint64_t blocks,
                              const std::uint64_t* sums, std::uint64_t* out) {
  __shared__ std::uint64_t stage[2][kChunk * 8];
  __shared__ std::uint64_t lanes[8];
  const int t = static_cast<int>(threadIdx.x);
  const int j = t;
  const std::uint64_t init[8] = {kPrime32_3, kPrime64_1, kPrime64_2, kPrime64_3,
                                 kPrime64_4, kPrime32_2, kPrime64_5, kPrime32_1};
  std::uint64_t acc = j < 8 ? init[j] : 0;
  const std::uint64_t scramble_key = j < 8 ? Secret64(192 - 64 + 8 * j) : 0;
  const std::uint64_t chunks = (blocks + kChunk - 1) / kChunk;
  auto load = [&](std::uint64_t c, int buf) {
    const std::uint64_t first = c * kChunk * 8;
    const std::uint64_t n = min(static_cast<std::uint64_t>(kChunk), blocks - c * kChunk) * 8;
    for (std::uint64_t i = t; i < n; i += kChainThreads) stage[buf][i] = sums[first + i];
  };
  if (chunks > 0) load(0, 0);
  __syncthreads();
  for (std::uint64_t c = 0; c < chunks; ++c) {
    const int buf = static_cast<int>(c & 1);
    if (j < 8) {
      const int n = static_cast<int>(min(static_cast<std::uint64_t>(kChunk), blocks - c * kChunk));
      for (int b = 0; b < n; ++b) {
        acc += stage[buf][b * 8 + j];
        acc ^= acc >> 47;
        acc ^= scramble_key;
        acc *= kPrime32_1;
      }
    } else if (t >= 32 && c + 1 < chunks) {
      // The warps after the first stage the next chunk meanwhile (the first warp's other
      // threads stay idle: it runs the chain without waiting on them).
      const std::uint64_t next = c + 1;
      const std::uint64_t first = next * kChunk * 8;
      const std::uint64_t n = min(static_cast<std::uint64_t>(kChunk), blocks - next * kChunk) * 8;
      for (std::uint64_t i = t - 32; i < n; i += kChainThreads - 32) {
        stage[buf ^ 1][i] = sums[first + i];
      }
    }
    __syncthreads();
  }
  if (j < 8) {
    const std::uint64_t stripes = ((len - 1) - kBlockBytes * blocks) / 64;
    const unsigned char* last = in + blocks * kBlockBytes;
    for (std::uint64_t s = 0; s < stripes; ++s) {
      const unsigned char* p = last + s * 64;
      acc += Mul32To64(Read64(p + 8 * j) ^ Secret64(static_cast<int>(s) * 8 + 8 * j));
      acc += Read64(p + 8 * (j ^ 1));
    }
    const unsigned char* p = in + len - 64;
    acc += Mul32To64(Read64(p + 8 * j) ^ Secret64(192 - 64 - 7 + 8 * j));
    acc += Read64(p + 8 * (j ^ 1));
    lanes[j] = acc;
  }
  __syncthreads();
  if (j == 0) {
    std::uint64_t r = len * kPrime64_1;
    for (int i = 0; i < 4; ++i) {
      const std::uint64_t a = lanes[2 * i] ^ Secret64(11 + 16 * i);
      const std::uint64_t c = lanes[2 * i + 1] ^ Secret64(11 + 16 * i + 8);
      r += (a * c) ^ __umul64hi(a, c);
    }
    r ^= r >> 37;
    r *= 0x165667919E3779F9ull;
    r ^= r >> 32;
    *out = r;
  }
}

}  // namespace

std::uint64_t DeviceXxh3ScratchBytes(std::uint64_t size) {
  return 8 + (size - 1) / kBlockBytes * 64;  // the result, then 8 lanes per full block
}

cudaError_t EnqueueDeviceXxh3(const void* data, std::uint64_t size, void* scratch,
                              cudaStream_t stream) {
  if (size < kDeviceXxh3MinBytes || reinterpret_cast<std::uintptr_t>(data) % 8 != 0) {
    return cudaErrorInvalidValue;
  }
  const std::uint64_t blocks = (size - 1) / kBlockBytes;
  auto* out = static_cast<std::uint64_t*>(scratch);
  std::uint64_t* sums = out + 1;
  if (blocks > 0) {
    const std::uint64_t threads = blocks * 8;
    const unsigned grid = static_cast<unsigned>((threads + 255) / 256);
    BlockSums<<<grid, 256, 0, stream>>>(static_cast<const std::uint64_t*>(data), blocks, sums);
  }
  ChainAndMerge<<<1, kChainThreads, 0, stream>>>(static_cast<const unsigned char*>(data), size,
                                                 blocks, sums, out);
  return cudaGetLastError();
}

}  // namespace tierpool
