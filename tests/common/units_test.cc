#include "common/units.h"

#include <gtest/gtest.h>

namespace tierpool {
namespace {

TEST(ParseByteSize, AcceptsSuffixes) {
  EXPECT_EQ(*ParseByteSize("0"), 0u);
  EXPECT_EQ(*ParseByteSize("4096"), 4096u);
  EXPECT_EQ(*ParseByteSize("4K"), 4096u);
  EXPECT_EQ(*ParseByteSize("64m"), 64 * kMiB);
  EXPECT_EQ(*ParseByteSize("1G"), kGiB);
  EXPECT_EQ(*ParseByteSize("1.5GiB"), kGiB + kGiB / 2);
  EXPECT_EQ(*ParseByteSize(" 2 MB "), 2 * kMiB);
  EXPECT_EQ(*ParseByteSize("1T"), 1024 * kGiB);
}

TEST(ParseByteSize, RejectsGarbage) {
  for (const char* bad : {"", "G", "-1", "12Q", "1..5G", "abc", "99999999999999999999T"}) {
    auto r = ParseByteSize(bad);
    EXPECT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << bad;
  }
}

TEST(FormatBytes, IsReadable) {
  EXPECT_EQ(FormatBytes(512), "512 B");
  EXPECT_EQ(FormatBytes(64 * kMiB), "64.0 MiB");
  EXPECT_EQ(FormatBytes(kGiB + kGiB / 2), "1.5 GiB");
}

TEST(Status, CarriesCodeAndMessage) {
  Status s = Status::ResourceExhausted("dram full");
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.ToString(), "RESOURCE_EXHAUSTED: dram full");
  EXPECT_EQ(Status::Ok().ToString(), "OK");
  Result<int> r = 3;
  EXPECT_TRUE(r.ok());
  EXPECT_EQ(*r, 3);
  Result<int> e = Status::NotFound("x");
  EXPECT_EQ(e.status().code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace tierpool
