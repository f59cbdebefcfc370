// Compiled with -mavx2; only called when the CPU has AVX2 (see checksum.cc).
// xxHash's own header in inline mode picks its AVX2 kernel under -mavx2; the shared library
// Debian ships is built for baseline x86-64 (SSE2) and hashes at about half the speed.
#define XXH_INLINE_ALL
#include <immintrin.h>
#include <xxhash.h>

#include <cstring>

#include "common/checksum_simd.h"

namespace tierpool::simd {

std::uint64_t Xxh3Avx2(const void* data, std::size_t size) { return XXH3_64bits(data, size); }

std::uint64_t CopyAndChecksumAvx2(void* dst, const void* src, std::size_t size) {
  constexpr std::size_t kChunk = 64 * 1024;
  auto* d = static_cast<unsigned char*>(dst);
  const auto* s = static_cast<const unsigned char*>(src);
  XXH3_state_t state;
  XXH3_64bits_reset(&state);
  // Head: regular copy up to a 32-byte aligned destination.
  std::size_t head = (32 - (reinterpret_cast<std::uintptr_t>(d) & 31)) & 31;
  if (head > size) head = size;
  std::memcpy(d, s, head);
  XXH3_64bits_update(&state, s, head);
  std::size_t off = head;
  while (off < size) {
    std::size_t n = size - off < kChunk ? size - off : kChunk;
    std::size_t vec = n & ~static_cast<std::size_t>(127);
    const auto* sv = reinterpret_cast<const __m256i*>(s + off);
    auto* dv = reinterpret_cast<__m256i*>(d + off);
    for (std::size_t k = 0; k < vec / 32; k += 4) {
      __m256i x0 = _mm256_loadu_si256(sv + k);
      __m256i x1 = _mm256_loadu_si256(sv + k + 1);
      __m256i x2 = _mm256_loadu_si256(sv + k + 2);
      __m256i x3 = _mm256_loadu_si256(sv + k + 3);
      _mm256_stream_si256(dv + k, x0);
      _mm256_stream_si256(dv + k + 1, x1);
      _mm256_stream_si256(dv + k + 2, x2);
      _mm256_stream_si256(dv + k + 3, x3);
    }
    std::memcpy(d + off + vec, s + off + vec, n - vec);
    XXH3_64bits_update(&state, s + off, n);  // the chunk was just read: hashed from cache
    off += n;
  }
  _mm_sfence();
  return XXH3_64bits_digest(&state);
}

}  // namespace tierpool::simd
