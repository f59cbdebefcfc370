#include "common/posix.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <fstream>

namespace tierpool {
namespace {

TEST(ReadFileUpTo, ReadsAFileWithinTheLimit) {
  const std::string path = ::testing::TempDir() + "/read-up-to-" + std::to_string(::getpid());
  std::ofstream(path) << "0123456789";
  auto whole = ReadFileUpTo(path, 10);
  ASSERT_TRUE(whole.ok()) << whole.status().ToString();
  EXPECT_EQ(*whole, "0123456789");
  auto over = ReadFileUpTo(path, 9);
  EXPECT_EQ(over.status().code(), StatusCode::kInvalidArgument);
  ::unlink(path.c_str());
  EXPECT_EQ(ReadFileUpTo(path, 10).status().code(), StatusCode::kNotFound);
}

TEST(ReadFileUpTo, RefusesWhatIsNotARegularFileBeforeReading) {
  // /dev/zero never ends: reading it first and checking the size after would never return.
  EXPECT_EQ(ReadFileUpTo("/dev/zero", 1 << 20).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ReadFileUpTo("/", 1 << 20).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
// A mapping's fields and flags as /proc/self/smaps gives them: its resident size grows as its
// pages are touched, advice shows among its flags, and an address no mapping starts at has none.
TEST(Smaps, ReadsOneMappingsFieldsAndFlags) {
  constexpr std::size_t kSize = 1 << 20;
  // A mapping of a file of its own: an anonymous one may merge with a neighbour and start
  // elsewhere.
  UniqueFd fd(::memfd_create("smaps-test", MFD_CLOEXEC));
  ASSERT_TRUE(fd.valid());
  ASSERT_EQ(::ftruncate(fd.get(), kSize), 0);
  void* p = ::mmap(nullptr, kSize, PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), 0);
  ASSERT_NE(p, MAP_FAILED);
  EXPECT_EQ(SmapsValue(p, "Size"), static_cast<long long>(kSize >> 10));
  const long long before = SmapsValue(p, "Rss");
  for (std::size_t off = 0; off < kSize / 2; off += 4096) static_cast<volatile char*>(p)[off] = 1;
  EXPECT_GE(SmapsValue(p, "Rss") - before, static_cast<long long>(kSize / 2 >> 10));
  EXPECT_EQ(SmapsValue(p, "NoSuchField"), -1);
  EXPECT_FALSE(SmapsHasFlag(p, "dd"));  // MADV_DONTDUMP, not asked for yet
  ASSERT_EQ(::madvise(p, kSize, MADV_DONTDUMP), 0);
  EXPECT_TRUE(SmapsHasFlag(p, "dd"));
  EXPECT_EQ(SmapsValue(static_cast<char*>(p) + 4096, "Size"), -1);  // no mapping starts there
  ::munmap(p, kSize);
}

}  // namespace tierpool
