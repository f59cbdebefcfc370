#include "common/copy.h"

#include <cstring>

#include "common/copy_simd.h"

namespace tierpool {

namespace copy_detail {
namespace {
// Into a warm buffer: below this, destination lines are worth keeping in cache; above,
// streaming stores win. Into fresh memory they win from 64 KiB (see CopyTarget).
constexpr std::size_t kStreamingThreshold = 1 << 20;
constexpr std::size_t kFreshStreamingThreshold = 64 << 10;
// From this size up, a checked copy into a warm destination with ordinary stores prefetches its
// source (copy_avx2.cc, CopyAndHashLong). Such a copy's source is an arena's extent (a get's, a
// read out of a tier's), seldom in cache: there it ran 8-29% faster from 32 KiB to 768 KiB on
// the development VM and 16% slower at 16 KiB; with the source in cache, within about 10%
// either way.
constexpr std::size_t kPrefetchSourceFrom = 32 << 10;
#if defined(__x86_64__)
const bool kHaveAvx2 = __builtin_cpu_supports("avx2");
#else
constexpr bool kHaveAvx2 = false;
#endif
}  // namespace

bool StreamStores(std::size_t size, CopyTarget target) {
  return size >= (target == CopyTarget::kFresh ? kFreshStreamingThreshold : kStreamingThreshold);
}

bool PrefetchSource(std::size_t size, CopyTarget target) {
  return target == CopyTarget::kWarm && size >= kPrefetchSourceFrom && !StreamStores(size, target);
}

bool HaveVectorCopy() { return kHaveAvx2; }
}  // namespace copy_detail

void CopyBytes(void* dst, const void* src, std::size_t size, CopyTarget target) {
  if (size >= copy_detail::kVectorCopyFrom && copy_detail::HaveVectorCopy()) {
    simd::CopyAvx2(dst, src, size, copy_detail::StreamStores(size, target));
    return;
  }
  std::memcpy(dst, src, size);
}

}  // namespace tierpool
