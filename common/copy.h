// Bulk copies of tensor bytes that do not depend on how the caller's buffer is aligned.
//
// Why not memcpy: from 2,112 bytes up to about the L2 size, glibc 2.36 (Debian 12) copies with
// `rep movsb` on CPUs with fast short rep movsb, and on AMD Zen that instruction is many times
// slower when the destination lies a few bytes to a few hundred bytes past the source modulo
// 4 KiB (4K aliasing; glibc bug 30994). On the development VM (EPYC; `micro_bench
// --benchmark_filter=CopyToUnalignedBuffer`, docs/benchmarks.md) a 4 KiB copy out of a
// page-aligned extent into a buffer 8 bytes into a page runs at 3.2 GB/s instead of 26, a
// 256 KiB one at 3.0 GB/s instead of 17; 16 bytes in (where malloc puts a large std::vector),
// 7.9 GB/s. Tensors and user buffers come at any offset, so every bulk copy of object bytes goes
// through here: glibc's memcpy where source and destination share their offset within a cache
// line (never slow in those measurements), else 32-byte vector loads and stores aligned on the
// destination, which do not care.
//
// Thread-safe: no state.
#pragma once

#include <cstddef>

namespace tierpool {

// What the destination of a copy is, which decides how it is written:
//   kWarm:  a buffer the caller reuses (a get's destination), likely in cache: ordinary stores,
//           non-temporal ones only from 1 MiB up;
//   kFresh: memory no one touched lately (an extent just allocated in an arena, as a put or a
//           move fills): non-temporal stores from 64 KiB up, which skip reading the lines in
//           first (1.5x faster into cold memory on the development VM, docs/benchmarks.md) and
//           do not evict the caller's working set.
enum class CopyTarget { kWarm, kFresh };

// Copies size bytes from src to dst (which must not overlap).
void CopyBytes(void* dst, const void* src, std::size_t size, CopyTarget target = CopyTarget::kWarm);

namespace copy_detail {
// Below this, memcpy (which does not use rep movsb there) is as fast and has less set-up.
inline constexpr std::size_t kVectorCopyFrom = 2048;
// Whether a copy of this size into this kind of destination uses non-temporal stores.
bool StreamStores(std::size_t size, CopyTarget target);
// Whether a checked copy (CopyAndChecksum) of this size into this kind of destination prefetches
// its source ahead of the copy.
bool PrefetchSource(std::size_t size, CopyTarget target);
// Whether this CPU runs the vector copies (AVX2); memcpy otherwise.
bool HaveVectorCopy();
}  // namespace copy_detail

}  // namespace tierpool
