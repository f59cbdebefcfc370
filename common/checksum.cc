#include "common/checksum.h"

#define XXH_STATIC_LINKING_ONLY  // XXH3_state_t on the stack
#include <xxhash.h>

#include <cstring>

#include "common/copy_simd.h"

namespace tierpool {

std::uint64_t Xxh3(const void* data, std::size_t size) {
#if defined(__x86_64__)
  if (copy_detail::HaveVectorCopy() && size >= 4096) return simd::Xxh3Avx2(data, size);
#endif
  return XXH3_64bits(data, size);
}

struct Xxh3Stream::State {
  XXH3_state_t* s = XXH3_createState();
  ~State() { XXH3_freeState(s); }
};

Xxh3Stream::Xxh3Stream() : state_(std::make_unique<State>()) { XXH3_64bits_reset(state_->s); }
Xxh3Stream::~Xxh3Stream() = default;
void Xxh3Stream::Update(const void* data, std::size_t size) {
  XXH3_64bits_update(state_->s, data, size);
}
std::uint64_t Xxh3Stream::Digest() const { return XXH3_64bits_digest(state_->s); }

namespace {
// From this size up, a copy into a warm destination with ordinary stores prefetches its source
// (copy_avx2.cc, CopyAndHashLong). Such a copy's source is an arena's extent (a get's, a read
// out of a tier's), seldom in cache: there it ran 8-29% faster from 32 KiB to 768 KiB on the
// development VM and 16% slower at 16 KiB; with the source in cache, within about 10% either way.
constexpr std::size_t kPrefetchSourceFrom = 32 * 1024;
}  // namespace

std::uint64_t CopyAndChecksum(void* dst, const void* src, std::size_t size, CopyTarget target) {
  if (size >= copy_detail::kVectorCopyFrom && copy_detail::HaveVectorCopy()) {
    const bool stream = copy_detail::StreamStores(size, target);
    const bool prefetch = !stream && target == CopyTarget::kWarm && size >= kPrefetchSourceFrom;
    return simd::CopyAndChecksumAvx2(dst, src, size, stream, prefetch);
  }
  std::memcpy(dst, src, size);
  return Xxh3(src, size);
}

}  // namespace tierpool
