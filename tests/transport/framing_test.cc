#include "transport/framing.h"

#include <gtest/gtest.h>

namespace tierpool::transport {
namespace {

TEST(Framing, RoundTripsAHeader) {
  std::uint8_t h[kFrameHeaderSize];
  EncodeFrameHeader(123456, h);
  auto d = DecodeFrameHeader(h, 1 << 20);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->length, 123456u);
  EXPECT_EQ(d->version, kWireVersion);
}

TEST(Framing, RejectsBadMagicVersionAndLength) {
  std::uint8_t h[kFrameHeaderSize];
  EncodeFrameHeader(10, h);
  h[0] = 'X';
  EXPECT_EQ(DecodeFrameHeader(h, 1 << 20).status().code(), StatusCode::kInvalidArgument);
  EncodeFrameHeader(10, h);
  h[2] = 99;
  EXPECT_EQ(DecodeFrameHeader(h, 1 << 20).status().code(), StatusCode::kFailedPrecondition);
  EncodeFrameHeader(0xffffffffu, h);
  EXPECT_EQ(DecodeFrameHeader(h, 1 << 20).status().code(), StatusCode::kResourceExhausted);
}

TEST(Framing, EncodesMessagesWithinTheLimit) {
  wire::Request req;
  req.set_id(7);
  req.mutable_stat();
  auto f = EncodeFrame(req, 4096);
  ASSERT_TRUE(f.ok());
  auto d = DecodeFrameHeader(reinterpret_cast<const std::uint8_t*>(f->data()), 4096);
  ASSERT_TRUE(d.ok());
  wire::Request back;
  ASSERT_TRUE(back.ParseFromArray(f->data() + kFrameHeaderSize, static_cast<int>(d->length)));
  EXPECT_EQ(back.id(), 7u);
  EXPECT_TRUE(back.has_stat());

  wire::PutInlineRequest big;
  big.add_items()->set_data(std::string(10000, 'x'));
  wire::Request r2;
  *r2.mutable_put_inline() = big;
  EXPECT_EQ(EncodeFrame(r2, 4096).status().code(), StatusCode::kResourceExhausted);
}

TEST(Framing, StatusCodesSurviveTheWire) {
  wire::Status w;
  ToWire(Status::ResourceExhausted("full"), &w);
  EXPECT_EQ(FromWire(w), Status::ResourceExhausted("full"));
  w.set_code(200);
  EXPECT_EQ(FromWire(w).code(), StatusCode::kInternal);
}

}  // namespace
}  // namespace tierpool::transport
