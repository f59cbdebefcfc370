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

std::uint64_t CopyAndChecksum(void* dst, const void* src, std::size_t size, CopyTarget target) {
  if (size >= copy_detail::kVectorCopyFrom && copy_detail::HaveVectorCopy()) {
    return simd::CopyAndChecksumAvx2(dst, src, size, copy_detail::StreamStores(size, target),
                                     copy_detail::PrefetchSource(size, target));
  }
  std::memcpy(dst, src, size);
  return Xxh3(src, size);
}

}  // namespace tierpool
