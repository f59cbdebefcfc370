// Internal: the AVX2 copy kernels (copy_avx2.cc, compiled with -mavx2); called only when the CPU
// has AVX2 (copy_detail::HaveVectorCopy).
#pragma once

#include <cstddef>
#include <cstdint>

namespace tierpool::simd {

std::uint64_t Xxh3Avx2(const void* data, std::size_t size);
// Copies with 32-byte stores aligned on dst; `stream`: non-temporal stores.
void CopyAvx2(void* dst, const void* src, std::size_t size, bool stream);
// The same copy, hashing each chunk while it is still in cache; `prefetch_source`: software
// prefetches of the source ahead of the copy (ignored with `stream`).
std::uint64_t CopyAndChecksumAvx2(void* dst, const void* src, std::size_t size, bool stream,
                                  bool prefetch_source);

}  // namespace tierpool::simd
