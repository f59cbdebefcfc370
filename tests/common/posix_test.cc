#include "common/posix.h"

#include <gtest/gtest.h>

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
}  // namespace tierpool
