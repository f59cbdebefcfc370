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

#if XXH_VERSION_MAJOR == 0 && XXH_VERSION_MINOR == 8
// XXH3-64 of more than XXH3_MIDSIZE_MAX bytes (seed 0, default secret) is a loop over 1 KiB
// blocks: each block's 16 stripes of 64 bytes are mixed into 8 accumulators with a sliding
// slice of the secret, then the accumulators are scrambled; then the last, partial block, the
// input's last 64 bytes, and a merge (XXH3_hashLong_64b_internal in xxhash.h). That loop is
// written out here with each block's copy right before its hashing, so that the stores of one
// and the multiplies of the other interleave in the core: hashing in separate 16 KiB chunks
// after each chunk's copy (xxhash's streaming API) took turns with the copy and ran at 16-20
// GB/s into fresh memory at 4 MiB on the development VM, where the copy alone runs at 27 and
// this loop at 25-27 (docs/benchmarks/redis.md, "Copy and checksum in one loop"). The algorithm is
// frozen since xxHash 0.8.0, and tests/common/checksum_test.cc holds the result to XXH3_64bits
// at every size and alignment; xxhash.h's internals used here are those of the 0.8 series.
constexpr std::size_t kStripe = XXH_STRIPE_LEN;
constexpr std::size_t kStripesPerBlock =
    (XXH_SECRET_DEFAULT_SIZE - XXH_STRIPE_LEN) / XXH_SECRET_CONSUME_RATE;
constexpr std::size_t kBlock = kStripe * kStripesPerBlock;
constexpr std::size_t kSecretLastAccStart = 7;     // XXH_SECRET_LASTACC_START
constexpr std::size_t kSecretMergeAccsStart = 11;  // XXH_SECRET_MERGEACCS_START
static_assert(kBlock % 128 == 0, "a block is copied 128 bytes a turn");
// How far ahead of the copy the source is prefetched, when it is (see CopyAndHashLong).
constexpr std::size_t kPrefetchAhead = 4096;

void Accumulate(xxh_u64* acc, const unsigned char* in, std::size_t stripes) {
  for (std::size_t k = 0; k < stripes; ++k) {
    XXH3_accumulate_512(acc, in + k * kStripe, XXH3_kSecret + k * XXH_SECRET_CONSUME_RATE);
  }
}

// kPrefetch: each block's turn also prefetches the source's lines kPrefetchAhead bytes on. With
// the source out of cache and the destination in it (a get's copy out of an arena into the
// caller's buffer), the hash's multiplies fill the core's window, the next block's loads issue
// late, and memory sits idle between blocks: on the development VM the pair ran at 7-8 GB/s at
// 64 and 256 KiB where the copy alone runs at 12-15; prefetched, at 9.5-11
// (docs/benchmarks/redis.md, "Checked gets that prefetch their source"). From a source in cache
// into fresh memory the prefetches only cost (up to 1.7x slower), so a caller asks for them
// (copy_detail::PrefetchSource).
template <bool kStream, bool kPrefetch>
std::uint64_t CopyAndHashLong(unsigned char* d, const unsigned char* s, std::size_t size) {
  XXH_ALIGN(XXH_ACC_ALIGN) xxh_u64 acc[XXH_ACC_NB] = XXH3_INIT_ACC;
  const std::size_t head = HeadBytes(d, size);
  std::memcpy(d, s, head);
  std::size_t copied = head;  // d + copied is 32-byte aligned
  const std::size_t blocks = (size - 1) / kBlock;
  for (std::size_t n = 0; n < blocks; ++n) {
    // The copy runs `head` (< 32) bytes ahead of the hash; the last block's copy, if it would
    // run past the end, is left to the tail's.
    if constexpr (kPrefetch) {
      if (copied + kPrefetchAhead + kBlock <= size) {
        for (std::size_t line = 0; line < kBlock; line += 64) {
          _mm_prefetch(reinterpret_cast<const char*>(s + copied + kPrefetchAhead + line),
                       _MM_HINT_T0);
        }
      }
    }
    if (copied + kBlock <= size) {
      CopyAligned<kStream>(d + copied, s + copied, kBlock);
      copied += kBlock;
    }
    Accumulate(acc, s + n * kBlock, kStripesPerBlock);
    XXH3_scrambleAcc(acc, XXH3_kSecret + XXH_SECRET_DEFAULT_SIZE - kStripe);
  }
  CopyAligned<kStream>(d + copied, s + copied, size - copied);
  Accumulate(acc, s + blocks * kBlock, ((size - 1) - blocks * kBlock) / kStripe);
  XXH3_accumulate_512(acc, s + size - kStripe,
                      XXH3_kSecret + XXH_SECRET_DEFAULT_SIZE - kStripe - kSecretLastAccStart);
  if constexpr (kStream) _mm_sfence();
  return XXH3_mergeAccs(acc, XXH3_kSecret + kSecretMergeAccsStart,
                        static_cast<xxh_u64>(size) * XXH_PRIME64_1);
}

std::uint64_t CopyAndHash(Writes writes, unsigned char* d, const unsigned char* s, std::size_t size,
                          bool prefetch_source) {
  if (size <= XXH3_MIDSIZE_MAX) {
    std::memcpy(d, s, size);
    return XXH3_64bits(s, size);
  }
  if (writes == Writes::kStream) return CopyAndHashLong<true, false>(d, s, size);
  return prefetch_source ? CopyAndHashLong<false, true>(d, s, size)
                         : CopyAndHashLong<false, false>(d, s, size);
}
#else
// Another xxHash series: its internals may differ, so the streaming API, in chunks that fit the
// L1 cache (each hashed right after its copy; the two take turns rather than interleave).
std::uint64_t CopyAndHash(Writes writes, unsigned char* d, const unsigned char* s, std::size_t size,
                          bool /*prefetch_source*/) {
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
#endif

// Every kernel leaves the upper halves of the ymm registers clean. GCC puts a vzeroupper before
// a return only where the function itself touched them, not where a callee it inlined or knows
// to be AVX (XXH3_mergeAccs after the last stripes) did: CopyAndChecksumAvx2 returned with them
// dirty, and every SSE instruction the thread ran afterwards (protobuf's parsing, std::string's
// and the index's small copies, all built for baseline x86-64) paid for it until the next
// vzeroupper. A daemon that had copied a few objects into replies then ran put batches a fifth
// slower (docs/benchmarks/redis.md, "Long keys").
struct CleanUpperHalves {
  CleanUpperHalves() = default;
  CleanUpperHalves(const CleanUpperHalves&) = delete;
  CleanUpperHalves& operator=(const CleanUpperHalves&) = delete;
  ~CleanUpperHalves() { _mm256_zeroupper(); }
};

}  // namespace

std::uint64_t Xxh3Avx2(const void* data, std::size_t size) {
  CleanUpperHalves clean;
  return XXH3_64bits(data, size);
}

void CopyAvx2(void* dst, const void* src, std::size_t size, bool stream) {
  CleanUpperHalves clean;
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

std::uint64_t CopyAndChecksumAvx2(void* dst, const void* src, std::size_t size, bool stream,
                                  bool prefetch_source) {
  CleanUpperHalves clean;
  return CopyAndHash(WritesFor(dst, src, stream), static_cast<unsigned char*>(dst),
                     static_cast<const unsigned char*>(src), size, prefetch_source);
}

}  // namespace tierpool::simd
