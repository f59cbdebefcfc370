// Compiled with -mavx2; only called when the CPU has AVX2 (see copy.cc).
// xxHash's own header in inline mode picks its AVX2 kernel under -mavx2; the shared library
// Debian ships is built for baseline x86-64 (SSE2) and hashes at about half the speed.
#define XXH_INLINE_ALL
#include <immintrin.h>
#include <xxhash.h>

#include <cstring>

#include "common/copy_simd.h"

namespace tierpool::simd {

namespace {

// Copies n bytes to a 32-byte aligned d: unaligned loads, aligned stores, 128 bytes a turn; the
// tail (< 128 bytes) by memcpy, which is below glibc's rep movsb threshold.
template <bool kStream>
void CopyAligned(unsigned char* d, const unsigned char* s, std::size_t n) {
  const std::size_t vec = n & ~static_cast<std::size_t>(127);
  const auto* sv = reinterpret_cast<const __m256i*>(s);
  auto* dv = reinterpret_cast<__m256i*>(d);
  for (std::size_t k = 0; k < vec / 32; k += 4) {
    __m256i x0 = _mm256_loadu_si256(sv + k);
    __m256i x1 = _mm256_loadu_si256(sv + k + 1);
    __m256i x2 = _mm256_loadu_si256(sv + k + 2);
    __m256i x3 = _mm256_loadu_si256(sv + k + 3);
    if constexpr (kStream) {
      _mm256_stream_si256(dv + k, x0);
      _mm256_stream_si256(dv + k + 1, x1);
      _mm256_stream_si256(dv + k + 2, x2);
      _mm256_stream_si256(dv + k + 3, x3);
    } else {
      _mm256_store_si256(dv + k, x0);
      _mm256_store_si256(dv + k + 1, x1);
      _mm256_store_si256(dv + k + 2, x2);
      _mm256_store_si256(dv + k + 3, x3);
    }
  }
  std::memcpy(d + vec, s + vec, n - vec);
}

// The bytes before dst's first 32-byte boundary.
std::size_t HeadBytes(const void* dst, std::size_t size) {
  const std::size_t head = (32 - (reinterpret_cast<std::uintptr_t>(dst) & 31)) & 31;
  return head < size ? head : size;
}

// How a copy writes: glibc's memcpy where source and destination share their offset within a
// cache line (rep movsb is at its best there), else aligned vector stores, or streaming ones.
enum class Writes { kMemcpy, kStore, kStream };

Writes WritesFor(const void* dst, const void* src, bool stream) {
  if (stream) return Writes::kStream;
  const auto apart = reinterpret_cast<std::uintptr_t>(dst) ^ reinterpret_cast<std::uintptr_t>(src);
  return apart % 64 == 0 ? Writes::kMemcpy : Writes::kStore;
}

// Copies one piece (after the head: d is 32-byte aligned unless writes is kMemcpy).
void CopyPiece(Writes writes, unsigned char* d, const unsigned char* s, std::size_t n) {
  switch (writes) {
    case Writes::kMemcpy:
      std::memcpy(d, s, n);
      return;
    case Writes::kStore:
      CopyAligned<false>(d, s, n);
      return;
    case Writes::kStream:
      CopyAligned<true>(d, s, n);
      return;
  }
}

std::uint64_t CopyAndHash(Writes writes, unsigned char* d, const unsigned char* s,
                          std::size_t size) {
  // In chunks that fit the L1 cache, so each is hashed right after it was read, while the
  // hardware prefetchers stream the next one in: 16 KiB copies+hashes into fresh memory at
  // 22-24 GB/s on the development VM, 64 KiB chunks (hashed out of L2) at 18.5-20.
  constexpr std::size_t kChunk = 16 * 1024;
  XXH3_state_t state;
  XXH3_64bits_reset(&state);
  const std::size_t head = HeadBytes(d, size);
  std::memcpy(d, s, head);
  XXH3_64bits_update(&state, s, head);
  for (std::size_t off = head; off < size;) {
    const std::size_t n = size - off < kChunk ? size - off : kChunk;
    CopyPiece(writes, d + off, s + off, n);
    XXH3_64bits_update(&state, s + off, n);
    off += n;
  }
  if (writes == Writes::kStream) _mm_sfence();
  return XXH3_64bits_digest(&state);
}

}  // namespace

std::uint64_t Xxh3Avx2(const void* data, std::size_t size) { return XXH3_64bits(data, size); }

void CopyAvx2(void* dst, const void* src, std::size_t size, bool stream) {
  auto* d = static_cast<unsigned char*>(dst);
  const auto* s = static_cast<const unsigned char*>(src);
  const Writes writes = WritesFor(dst, src, stream);
  if (writes == Writes::kMemcpy) {
    std::memcpy(d, s, size);
    return;
  }
  const std::size_t head = HeadBytes(d, size);
  std::memcpy(d, s, head);
  CopyPiece(writes, d + head, s + head, size - head);
  if (writes == Writes::kStream) _mm_sfence();
}

std::uint64_t CopyAndChecksumAvx2(void* dst, const void* src, std::size_t size, bool stream) {
  return CopyAndHash(WritesFor(dst, src, stream), static_cast<unsigned char*>(dst),
                     static_cast<const unsigned char*>(src), size);
}

}  // namespace tierpool::simd
