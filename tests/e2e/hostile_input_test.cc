// Bad input on the socket: each case gets an error reply or a closed connection, and the server
// goes on serving everyone else.
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <random>

#include "tests/e2e/server_process.h"
#include "transport/blocking_connection.h"

namespace tierpool::testing {
namespace {

using transport::BlockingConnection;

class HostileInput : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { server_ = new ServerProcess({"--dram", "32M", "--hbm", "4M"}); }
  static void TearDownTestSuite() { delete server_; }

  void SetUp() override { ASSERT_TRUE(server_->started()); }
  void TearDown() override { ExpectServerStillServes(); }

  std::unique_ptr<BlockingConnection> Raw() {
    auto c = BlockingConnection::Connect(server_->socket());
    EXPECT_TRUE(c.ok());
    return c.ok() ? std::move(c).value() : nullptr;
  }

  // Sends bytes that are not a valid message inside a valid frame header.
  static void SendFramed(BlockingConnection& c, const std::string& payload) {
    std::uint8_t h[transport::kFrameHeaderSize];
    transport::EncodeFrameHeader(static_cast<std::uint32_t>(payload.size()), h);
    ASSERT_TRUE(c.SendRaw(h, sizeof(h)).ok());
    ASSERT_TRUE(c.SendRaw(payload.data(), payload.size()).ok());
  }

  // The connection is closed by the server (after an optional error reply).
  static void ExpectClosed(BlockingConnection& c) {
    wire::Response r;
    Status s = c.Receive(&r);
    if (s.ok()) {
      EXPECT_NE(r.status().code(), 0u) << "got a success reply to garbage";
      s = c.Receive(&r);
    }
    EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s.ToString();
  }

  static void ExpectServerStillServes() {
    ASSERT_TRUE(server_->alive()) << "tierpoold died";
    auto client = server_->Connect();
    ASSERT_TRUE(client.ok()) << client.status().ToString();
    ASSERT_TRUE((*client)->Put("canary", "alive", 5).ok());
    char buf[5];
    ASSERT_TRUE((*client)->Get("canary", buf, sizeof(buf)).ok());
  }

  static ServerProcess* server_;
};
ServerProcess* HostileInput::server_ = nullptr;

TEST_F(HostileInput, SocketIsPrivateByDefault) {
  struct stat st {};
  ASSERT_EQ(::stat(server_->socket().c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
}

TEST_F(HostileInput, RandomGarbageClosesTheConnection) {
  std::mt19937 rng(1234);
  for (int round = 0; round < 20; ++round) {
    auto c = Raw();
    std::string junk(1 + rng() % 4096, '\0');
    for (auto& ch : junk) ch = static_cast<char>(rng());
    junk[0] = 'Z';  // never a valid magic
    ASSERT_TRUE(c->SendRaw(junk.data(), junk.size()).ok());
    ExpectClosed(*c);
  }
}

TEST_F(HostileInput, OversizedLengthFieldIsRefusedWithoutAllocating) {
  auto c = Raw();
  std::uint8_t h[transport::kFrameHeaderSize];
  transport::EncodeFrameHeader(0xfffffff0u, h);
  ASSERT_TRUE(c->SendRaw(h, sizeof(h)).ok());
  wire::Response r;
  ASSERT_TRUE(c->Receive(&r).ok());
  EXPECT_EQ(r.status().code(), static_cast<std::uint32_t>(StatusCode::kResourceExhausted));
  ExpectClosed(*c);
}

TEST_F(HostileInput, WrongWireVersionIsRefused) {
  auto c = Raw();
  std::uint8_t h[transport::kFrameHeaderSize];
  transport::EncodeFrameHeader(0, h);
  h[2] = 77;
  ASSERT_TRUE(c->SendRaw(h, sizeof(h)).ok());
  wire::Response r;
  ASSERT_TRUE(c->Receive(&r).ok());
  EXPECT_EQ(r.status().code(), static_cast<std::uint32_t>(StatusCode::kFailedPrecondition));
}

TEST_F(HostileInput, TruncatedFramesDoNotStallOthers) {
  // One connection sends half a frame and stays open; another sends half and hangs up.
  auto stalled = Raw();
  std::uint8_t h[transport::kFrameHeaderSize];
  transport::EncodeFrameHeader(1000, h);
  ASSERT_TRUE(stalled->SendRaw(h, sizeof(h)).ok());
  ASSERT_TRUE(stalled->SendRaw(std::string(400, 'a').data(), 400).ok());
  {
    auto gone = Raw();
    ASSERT_TRUE(gone->SendRaw(h, 5).ok());  // not even a whole header
  }
  ExpectServerStillServes();
}

TEST_F(HostileInput, UnknownMessageTypeGetsAnErrorAndTheConnectionLives) {
  auto c = Raw();
  // A well-framed Request with an id and one unknown field: number 99, length-delimited
  // (tag varint 0x9a 0x06), one byte long.
  const std::string payload =
      std::string{static_cast<char>(0x08), static_cast<char>(0x05)} +  // id = 5
      std::string{static_cast<char>(0x9a), static_cast<char>(0x06), static_cast<char>(1), 'x'};
  SendFramed(*c, payload);
  wire::Response r;
  ASSERT_TRUE(c->Receive(&r).ok());
  EXPECT_EQ(r.status().code(), static_cast<std::uint32_t>(StatusCode::kUnimplemented));
  // Same connection, valid request: still served.
  wire::Request stat;
  stat.set_id(6);
  stat.mutable_stat();
  ASSERT_TRUE(c->Call(stat, &r).ok());
  EXPECT_TRUE(r.has_stat());
}

TEST_F(HostileInput, MalformedPayloadGetsAnError) {
  auto c = Raw();
  SendFramed(*c, std::string(64, static_cast<char>(0xff)));
  wire::Response r;
  ASSERT_TRUE(c->Receive(&r).ok());
  EXPECT_EQ(r.status().code(), static_cast<std::uint32_t>(StatusCode::kInvalidArgument));
}

TEST_F(HostileInput, WrongProtocolVersionInHello) {
  auto c = Raw();
  wire::Request req;
  req.set_id(1);
  req.mutable_hello()->set_protocol_version(999);
  wire::Response r;
  Status s = c->Call(req, &r);
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << s.ToString();
}

TEST_F(HostileInput, BadFieldValuesAreErrorsNotCrashes) {
  auto c = Raw();
  wire::Response r;
  // Unknown enum values.
  wire::Request req;
  req.set_id(1);
  auto* spec = req.mutable_reserve()->add_items();
  spec->set_ns("x");
  spec->set_key("k");
  spec->set_size(10);
  spec->set_kind(static_cast<wire::ObjectKind>(77));
  ASSERT_TRUE(c->Call(req, &r).ok());
  EXPECT_EQ(r.reserve().items(0).status().code(),
            static_cast<std::uint32_t>(StatusCode::kInvalidArgument));
  // An absurd size.
  spec->set_kind(wire::OTHER);
  spec->set_size(~0ull);
  ASSERT_TRUE(c->Call(req, &r).ok());
  EXPECT_EQ(r.reserve().items(0).status().code(),
            static_cast<std::uint32_t>(StatusCode::kResourceExhausted));
  // Inline put whose bytes disagree with its declared size.
  wire::Request put;
  put.set_id(2);
  auto* item = put.mutable_put_inline()->add_items();
  item->mutable_spec()->set_key("k");
  item->mutable_spec()->set_size(100);
  item->set_data("short");
  ASSERT_TRUE(c->Call(put, &r).ok());
  EXPECT_EQ(r.statuses().items(0).code(), static_cast<std::uint32_t>(StatusCode::kInvalidArgument));
  // A batch over the limit.
  wire::Request get;
  get.set_id(3);
  for (int i = 0; i < 5000; ++i) get.mutable_get()->add_keys()->set_key("k");
  EXPECT_EQ(c->Call(get, &r).code(), StatusCode::kInvalidArgument);
  // Commit of a reservation id never handed out, release of a lease never granted.
  wire::Request commit;
  commit.set_id(4);
  commit.mutable_commit()->add_items()->set_reservation_id(123456789);
  ASSERT_TRUE(c->Call(commit, &r).ok());
  EXPECT_EQ(r.statuses().items(0).code(), static_cast<std::uint32_t>(StatusCode::kNotFound));
  wire::Request release;
  release.set_id(5);
  release.mutable_release()->add_lease_ids(987654321);
  ASSERT_TRUE(c->Send(release).ok());
}

TEST_F(HostileInput, AnotherConnectionsReservationCannotBeCommitted) {
  auto a = Raw();
  auto b = Raw();
  wire::Request req;
  req.set_id(1);
  auto* spec = req.mutable_reserve()->add_items();
  spec->set_ns("x");
  spec->set_key("theirs");
  spec->set_size(10);
  wire::Response r;
  ASSERT_TRUE(a->Call(req, &r).ok());
  ASSERT_EQ(r.reserve().items(0).status().code(), 0u);
  wire::Request commit;
  commit.set_id(1);
  commit.mutable_commit()->add_items()->set_reservation_id(r.reserve().items(0).reservation_id());
  ASSERT_TRUE(b->Call(commit, &r).ok());
  EXPECT_EQ(r.statuses().items(0).code(),
            static_cast<std::uint32_t>(StatusCode::kPermissionDenied));
}

// Valid frames with random bytes flipped, each on a fresh connection.
TEST_F(HostileInput, MutatedFramesFuzz) {
  const std::uint64_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  wire::Request base;
  base.set_id(1);
  auto* spec = base.mutable_reserve()->add_items();
  spec->set_ns("fuzz");
  spec->set_key("k");
  spec->set_size(4096);
  spec->add_shape(64);
  auto frame = transport::EncodeFrame(base, 1 << 20);
  ASSERT_TRUE(frame.ok());
  for (int i = 0; i < 300; ++i) {
    std::string f = *frame;
    int flips = 1 + static_cast<int>(rng() % 4);
    for (int j = 0; j < flips; ++j) {
      f[rng() % f.size()] ^= static_cast<char>(1u << (rng() % 8));
    }
    auto c = Raw();
    ASSERT_TRUE(c->SendRaw(f.data(), f.size()).ok());
    ::shutdown(c->fd(), SHUT_WR);
    wire::Response r;
    (void)c->Receive(&r);  // an answer or a close; either is fine, a crash is not
  }
  ASSERT_TRUE(server_->alive());
}

}  // namespace
}  // namespace tierpool::testing
