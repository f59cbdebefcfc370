#include "common/checksum.h"

#define XXH_STATIC_LINKING_ONLY  // XXH3_state_t on the stack
#include <xxhash.h>

#include <cstring>

#include "common/checksum_simd.h"

namespace tierpool {

namespace {
#if defined(__x86_64__)
const bool kHaveAvx2 = __builtin_cpu_supports("avx2");
#else
constexpr bool kHaveAvx2 = false;
#endif
// Into a warm buffer: below this, destination lines are worth keeping in cache; above,
// streaming stores win. Into fresh memory they win from 64 KiB (see CopyTarget).
constexpr std::size_t kStreamingThreshold = 1 << 20;
constexpr std::size_t kFreshStreamingThreshold = 64 << 10;
}  // namespace

std::uint64_t Xxh3(const void* data, std::size_t size) {
#if defined(__x86_64__)
  if (kHaveAvx2 && size >= 4096) return simd::Xxh3Avx2(data, size);
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
#if defined(__x86_64__)
  const std::size_t streaming_from =
      target == CopyTarget::kFresh ? kFreshStreamingThreshold : kStreamingThreshold;
  if (kHaveAvx2 && size >= streaming_from) return simd::CopyAndChecksumAvx2(dst, src, size);
#endif
  std::memcpy(dst, src, size);
  return Xxh3(src, size);
}

}  // namespace tierpool
