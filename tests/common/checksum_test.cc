#include "common/checksum.h"

#include <cpuid.h>
#include <gtest/gtest.h>
#include <xxhash.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <optional>
#include <random>
#include <vector>

#include "common/copy.h"

namespace tierpool {
namespace {

// Every path (library, AVX2, copy-and-checksum) must give XXH3-64 exactly: the value is stored
// and compared against bytes read back from other tiers and by other builds.
TEST(Checksum, MatchesReferenceXxh3AtEverySize) {
  std::mt19937_64 rng(7);
  for (std::size_t size :
       {0ul, 1ul, 17ul, 240ul, 4095ul, 4096ul, 65537ul, (1ul << 20) + 3, (3ul << 20) + 129}) {
    std::vector<unsigned char> src(size + 64), dst(size + 64, 0);
    for (auto& b : src) b = static_cast<unsigned char>(rng());
    for (std::size_t misalign : {0ul, 1ul, 31ul}) {
      const unsigned char* s = src.data() + (size ? misalign % 7 : 0);
      std::size_t n = size;
      std::uint64_t want = XXH3_64bits(s, n);
      EXPECT_EQ(Xxh3(s, n), want) << size;
      EXPECT_EQ(CopyAndChecksum(dst.data() + misalign, s, n), want) << size << "/" << misalign;
      EXPECT_EQ(std::memcmp(dst.data() + misalign, s, n), 0) << size;
      Xxh3Stream stream;
      stream.Update(s, n / 2);
      stream.Update(s + n / 2, n - n / 2);
      EXPECT_EQ(stream.Digest(), want);
    }
  }
}

// CopyAndChecksum's long inputs run XXH3's block loop with the copy interleaved (copy_avx2.cc):
// every size across three 1 KiB blocks, and sizes around later block boundaries, with the
// destination's alignment moving where the last block's copy falls, each exact and hashed as
// XXH3_64bits hashes it. 32 and 37 KiB: where a warm destination's copy starts prefetching its
// source (copy_detail::PrefetchSource), and where the first prefetch lands in the last block.
TEST(Checksum, CopyAndChecksumAtEveryBlockBoundary) {
  std::mt19937_64 rng(13);
  std::vector<std::size_t> sizes;
  for (std::size_t n = 2040; n <= 3 * 1024 + 72; ++n) sizes.push_back(n);
  for (std::size_t blocks : {16ul, 32ul, 37ul, 255ul, 1024ul}) {
    for (std::size_t delta : {0ul, 1ul, 31ul, 32ul, 63ul, 64ul, 65ul, 1023ul}) {
      sizes.push_back(blocks * 1024 + delta);
      sizes.push_back(blocks * 1024 - delta);
    }
  }
  std::vector<unsigned char> src((1024 << 10) + 2048), dst((1024 << 10) + 2048);
  for (auto& b : src) b = static_cast<unsigned char>(rng());
  for (std::size_t size : sizes) {
    for (std::size_t dst_off : {0ul, 1ul, 17ul, 31ul}) {
      for (CopyTarget target : {CopyTarget::kWarm, CopyTarget::kFresh}) {
        const unsigned char* s = src.data() + (size % 5);
        unsigned char* d = dst.data() + dst_off;
        std::fill(dst.begin(), dst.begin() + static_cast<std::ptrdiff_t>(size + 64), 0xA5);
        ASSERT_EQ(CopyAndChecksum(d, s, size, target), XXH3_64bits(s, size))
            << size << " to +" << dst_off;
        ASSERT_EQ(std::memcmp(d, s, size), 0) << size << " to +" << dst_off;
        for (std::size_t i = 0; i < dst_off; ++i) ASSERT_EQ(dst[i], 0xA5) << size;
        for (std::size_t i = dst_off + size; i < size + 64; ++i) ASSERT_EQ(dst[i], 0xA5) << size;
      }
    }
  }
}

// CopyBytes and CopyAndChecksum with source and destination at offsets within a cache line that
// match and that do not (each takes another path), at sizes around the vector threshold, the
// 128-byte step, the 16 KiB chunk and the 64 KiB streaming threshold, into both kinds of
// destination: the bytes land exactly, nothing outside the destination range is touched, and the
// checksum is XXH3-64's.
TEST(Copy, ExactAtAnyAlignmentAndSize) {
  std::mt19937_64 rng(11);
  const std::size_t sizes[] = {0,
                               1,
                               2047,
                               2048,
                               2049,
                               2175,
                               4096 + 31,
                               (16 << 10) + 1,
                               (64 << 10) + 129,
                               256 << 10,
                               (1 << 20) + 77};
  for (std::size_t size : sizes) {
    std::vector<unsigned char> src(size + 64);
    for (auto& b : src) b = static_cast<unsigned char>(rng());
    std::vector<unsigned char> dst(size + 128);
    for (std::size_t src_off : {0ul, 8ul, 33ul}) {
      for (std::size_t dst_off : {0ul, 1ul, 8ul, 16ul, 31ul, 40ul}) {
        for (CopyTarget target : {CopyTarget::kWarm, CopyTarget::kFresh}) {
          const unsigned char* s = src.data() + src_off;
          for (int checked = 0; checked < 2; ++checked) {
            std::fill(dst.begin(), dst.end(), 0xA5);
            unsigned char* d = dst.data() + dst_off;
            if (checked) {
              EXPECT_EQ(CopyAndChecksum(d, s, size, target), XXH3_64bits(s, size)) << size;
            } else {
              CopyBytes(d, s, size, target);
            }
            ASSERT_EQ(std::memcmp(d, s, size), 0)
                << size << " from +" << src_off << " to +" << dst_off << " checked " << checked;
            for (std::size_t i = 0; i < dst_off; ++i) ASSERT_EQ(dst[i], 0xA5) << size;
            for (std::size_t i = dst_off + size; i < dst.size(); ++i) ASSERT_EQ(dst[i], 0xA5);
          }
        }
      }
    }
  }
}

// XINUSE (XGETBV with ECX = 1), where the CPU has it: bit 2 is set while the upper halves of the
// ymm registers are not in their initial state (dirty), as a vzeroupper leaves them.
std::optional<std::uint64_t> Xinuse() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (!__get_cpuid_count(0xD, 1, &eax, &ebx, &ecx, &edx) || (eax & (1u << 2)) == 0) {
    return std::nullopt;
  }
  std::uint32_t lo = 0, hi = 0;
  asm volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(1));
  return (static_cast<std::uint64_t>(hi) << 32) | lo;
}
constexpr std::uint64_t kYmmUpperInUse = 1u << 2;

// The AVX2 kernels return with the upper halves of the ymm registers clean. Before, a
// copy-and-checksum of 2 KiB or more returned with them dirty (GCC puts no vzeroupper after a
// callee it knows to be AVX), and every SSE instruction of the thread paid for it afterwards: a
// daemon that had copied a few objects into replies ran later put batches a fifth slower.
TEST(Copy, KernelsLeaveTheUpperHalvesOfTheVectorRegistersClean) {
  if (!copy_detail::HaveVectorCopy()) GTEST_SKIP() << "no AVX2: the kernels are not used";
  if (!Xinuse()) GTEST_SKIP() << "the CPU does not report XINUSE (XGETBV 1)";
  std::vector<unsigned char> src((1 << 20) + 64, 0x5A), dst((1 << 20) + 128, 0);
  for (std::size_t size : {2048ul, 4096ul, 65536ul + 129, 1ul << 20}) {
    for (CopyTarget target : {CopyTarget::kWarm, CopyTarget::kFresh}) {
      for (std::size_t dst_off : {0ul, 1ul, 32ul}) {
        (void)CopyAndChecksum(dst.data() + dst_off, src.data(), size, target);
        EXPECT_EQ(*Xinuse() & kYmmUpperInUse, 0u)
            << "copy and checksum of " << size << " to +" << dst_off;
        CopyBytes(dst.data() + dst_off, src.data(), size, target);
        EXPECT_EQ(*Xinuse() & kYmmUpperInUse, 0u) << "copy of " << size << " to +" << dst_off;
      }
    }
    (void)Xxh3(src.data(), size);
    EXPECT_EQ(*Xinuse() & kYmmUpperInUse, 0u) << "checksum of " << size;
  }
}

}  // namespace
}  // namespace tierpool
