// Internal: the AVX2 build of the checksum routines (checksum_avx2.cc, compiled with -mavx2).
#pragma once

#include <cstddef>
#include <cstdint>

namespace tierpool::simd {

std::uint64_t Xxh3Avx2(const void* data, std::size_t size);
// Streaming (non-temporal) stores, hashing each chunk while it is still in cache.
std::uint64_t CopyAndChecksumAvx2(void* dst, const void* src, std::size_t size);

}  // namespace tierpool::simd
