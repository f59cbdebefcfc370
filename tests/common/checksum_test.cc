#include "common/checksum.h"

#include <gtest/gtest.h>
#include <xxhash.h>

#include <cstring>
#include <random>
#include <vector>

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

}  // namespace
}  // namespace tierpool
