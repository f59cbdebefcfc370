// The peer data path over UCX (transport/ucx_peer_server.h, transport/ucx_peer_client.h) against
// a real lender in this process: byte-exact writes and reads (eager and rendezvous sizes), what
// the lender refuses (an unknown token, another life of the lender, a range out of bounds, a
// region freed since: a stale request never reaches the bytes of the region granted after it),
// and a lender that stops. UCX picks its transport here as anywhere (tcp or shared memory on a
// host without RDMA).
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <future>
#include <thread>

#include "store/lender.h"
#include "tests/cluster/lending_node.h"
#include "transport/peer_connection.h"
#include "transport/peer_server.h"
#include "transport/ucx_peer_client.h"
#include "transport/ucx_wire.h"

namespace tierpool {
namespace {

using namespace tierpool::testing;  // NOLINT: the fixture's helpers
using transport::PeerAuth;
using transport::PeerIdentity;
using transport::UcxRoute;

struct Session {
  std::shared_ptr<transport::PeerConnection> link;
  UcxRoute route;
  std::uint64_t lender_incarnation = 0;

  wire::peer::Response Call(wire::peer::Request r, const std::string& payload = {}) {
    r.set_lender_incarnation(lender_incarnation);
    wire::peer::Response resp;
    Status s = link->Call(&r, payload.data(), payload.size(), &resp);
    EXPECT_TRUE(s.ok()) << s.ToString();
    return resp;
  }
  std::uint64_t Grant(std::uint64_t bytes) {
    wire::peer::Request r;
    r.mutable_grant()->set_bytes(bytes);
    return Call(r).region();
  }
  void Release(std::uint64_t region) {
    wire::peer::Request r;
    r.mutable_release()->set_region(region);
    Call(r);
  }
};

LendingNode UcxLender() {
  transport::PeerServerConfig sc;
  sc.ucx = true;
  return StartLender("lender", 64ull << 20, sc);
}

// Connected to `n` over TCP as `who`, its UCX route asked for (Info.ucx_open).
Session Open(LendingNode& n, PeerIdentity who) {
  Session s;
  s.lender_incarnation = n.member.incarnation;
  auto c = transport::PeerConnection::Connect(n.member.address, *PeerAuth::FromSecret(kSecret), who,
                                              2000);
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  if (!c.ok()) return s;
  s.link = std::move(c).value();
  wire::peer::Request info;
  info.mutable_info()->set_ucx_open(true);
  const wire::peer::Response resp = s.Call(info);
  s.route = {n.member.node_id + "/" + std::to_string(n.member.incarnation), resp.ucx_address(),
             resp.ucx_token()};
  return s;
}

wire::peer::RegionRange Range(std::uint64_t region, std::uint64_t offset, std::uint64_t length) {
  wire::peer::RegionRange r;
  r.set_region(region);
  r.set_offset(offset);
  r.set_length(length);
  return r;
}

Status Write(transport::UcxPeerClient& c, const Session& s, const wire::peer::RegionRange& r,
             const std::string& bytes) {
  return c.Call(s.route, s.lender_incarnation, r, true,
                reinterpret_cast<std::byte*>(const_cast<char*>(bytes.data())), 1000, nullptr);
}

Status Read(transport::UcxPeerClient& c, const Session& s, const wire::peer::RegionRange& r,
            std::string* out) {
  out->assign(r.length(), '\0');
  return c.Call(s.route, s.lender_incarnation, r, false, reinterpret_cast<std::byte*>(out->data()),
                1000, nullptr);
}

// A lender that offers UCX, and a borrower's UCX client.
class UcxDataPath : public ::testing::Test {
 protected:
  void SetUp() override {
    auto c = transport::UcxPeerClient::Create();
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    client_ = std::move(c).value();
  }
  transport::UcxPeerClient& client() { return *client_; }

  LendingNode lender_ = UcxLender();

 private:
  std::unique_ptr<transport::UcxPeerClient> client_;
};

TEST_F(UcxDataPath, WritesAndReadsSmallAndLargeRangesByteExact) {
  Session s = Open(lender_, {"borrower", 7});
  ASSERT_EQ(s.route.token.size(), transport::kUcxTokenBytes);
  ASSERT_FALSE(s.route.address.empty());
  const std::uint64_t region = s.Grant(32ull << 20);
  // 4 KiB goes with its header (eager); 16 MiB by rendezvous, straight into the region.
  const std::string small = Bytes(4096, 1), large = Bytes(16u << 20, 2);
  ASSERT_TRUE(Write(client(), s, Range(region, 0, small.size()), small).ok());
  ASSERT_TRUE(Write(client(), s, Range(region, 1u << 20, large.size()), large).ok());
  std::string out;
  ASSERT_TRUE(Read(client(), s, Range(region, 0, small.size()), &out).ok());
  EXPECT_TRUE(out == small);
  ASSERT_TRUE(Read(client(), s, Range(region, 1u << 20, large.size()), &out).ok());
  EXPECT_TRUE(out == large);
  // The bytes are where TCP reads them too: one region, two data paths.
  EXPECT_EQ(std::memcmp(lender_.lender->RegionBytesForTest(region) + (1u << 20), large.data(),
                        large.size()),
            0);
  const auto c = lender_.server->counters();
  EXPECT_EQ(c.ucx_bytes_in, small.size() + large.size());
  EXPECT_EQ(c.ucx_bytes_out, small.size() + large.size());
  EXPECT_EQ(c.ucx_refused, 0u);
}

TEST_F(UcxDataPath, RefusesUnknownTokensOtherLivesAndRangesOutOfBounds) {
  Session s = Open(lender_, {"borrower", 7});
  const std::uint64_t region = s.Grant(1u << 20);
  const std::string data = Bytes(8192, 3);
  Session forged = s;
  forged.route.token[0] ^= 1;
  EXPECT_EQ(Write(client(), forged, Range(region, 0, data.size()), data).code(),
            StatusCode::kPermissionDenied);
  Session earlier = s;
  earlier.lender_incarnation += 1;
  EXPECT_EQ(Write(client(), earlier, Range(region, 0, data.size()), data).code(),
            StatusCode::kFailedPrecondition);
  std::string out;
  EXPECT_EQ(Read(client(), s, Range(region, (1u << 20) - 100, 4096), &out).code(),
            StatusCode::kInvalidArgument);
  // Another borrower, authenticated, may not touch this one's region.
  Session other = Open(lender_, {"other", 9});
  EXPECT_EQ(Write(client(), other, Range(region, 0, data.size()), data).code(),
            StatusCode::kNotFound);
  // A node's next incarnation gets a new token; the earlier one stops working.
  Session reborn = Open(lender_, {"borrower", 8});
  EXPECT_NE(reborn.route.token, s.route.token);
  EXPECT_EQ(Write(client(), s, Range(region, 0, data.size()), data).code(),
            StatusCode::kPermissionDenied);
  EXPECT_GE(lender_.server->counters().ucx_refused, 5u);
}

// What a stale key would be on one-sided RDMA: a request for a region freed since. The lender's
// memory is granted to someone else in between; the late write is refused and its bytes never
// reach the new owner's, at either size.
TEST_F(UcxDataPath, AStaleRegionIsRefusedAndNeverReachesTheNextOwnersBytes) {
  Session a = Open(lender_, {"a", 1}), b = Open(lender_, {"b", 2});
  const std::uint64_t old_region = a.Grant(64ull << 20);  // everything the lender has
  const std::string mine = Bytes(16u << 20, 4);
  ASSERT_TRUE(Write(client(), a, Range(old_region, 0, mine.size()), mine).ok());
  a.Release(old_region);
  const std::uint64_t next = b.Grant(64ull << 20);  // the same memory, now b's
  ASSERT_NE(next, old_region);
  const std::string theirs = Bytes(16u << 20, 5);
  wire::peer::Request w;
  *w.mutable_write() = Range(next, 0, theirs.size());
  b.Call(w, theirs);
  for (const std::size_t n : {std::size_t{4096}, std::size_t{16u << 20}}) {
    const std::string late = Bytes(n, 6);
    EXPECT_EQ(Write(client(), a, Range(old_region, 0, n), late).code(), StatusCode::kNotFound);
    std::string out;
    EXPECT_EQ(Read(client(), a, Range(old_region, 0, n), &out).code(), StatusCode::kNotFound);
  }
  std::string out;
  ASSERT_TRUE(Read(client(), b, Range(next, 0, theirs.size()), &out).ok());
  EXPECT_TRUE(out == theirs);
}

TEST_F(UcxDataPath, ALenderThatStopsFailsTheCallWithinItsDeadline) {
  Session s = Open(lender_, {"borrower", 7});
  const std::uint64_t region = s.Grant(1u << 20);
  const std::string data = Bytes(1u << 20, 7);
  ASSERT_TRUE(Write(client(), s, Range(region, 0, data.size()), data).ok());
  s.link.reset();
  lender_.server->Stop();  // its UCX worker goes with it
  const auto start = std::chrono::steady_clock::now();
  std::string out(data.size(), 'z');
  Status r = client().Call(s.route, s.lender_incarnation, Range(region, 0, data.size()), false,
                           reinterpret_cast<std::byte*>(out.data()), 500, nullptr);
  EXPECT_FALSE(r.ok());
  // 500 ms of stall and a second per MiB at the floor rate, and the cancel.
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(8));
  EXPECT_EQ(out, std::string(data.size(), 'z'));  // nothing landed in a failed read's buffer
}

// A lender that stalls with a read in flight: the call fails at its deadline and returns only
// once UCX no longer writes into its buffer. The answer the lender sends when it wakes lands
// nowhere, and the next call connects afresh and is answered.
TEST_F(UcxDataPath, AReadThatTimesOutNeverWritesIntoItsBufferAfterItReturns) {
  Session s = Open(lender_, {"borrower", 7});
  const std::uint64_t region = s.Grant(4u << 20);
  const std::string data = Bytes(1u << 20, 8);  // a rendezvous: fetched into the buffer
  ASSERT_TRUE(Write(client(), s, Range(region, 0, data.size()), data).ok());
  lender_.server->StallUcxForTest(2500);
  std::string out(data.size(), 'z');
  const auto start = std::chrono::steady_clock::now();
  // Its deadline: 200 ms of stall and a second for the MiB at the floor rate.
  Status r = client().Call(s.route, s.lender_incarnation, Range(region, 0, data.size()), false,
                           reinterpret_cast<std::byte*>(out.data()), 200, nullptr);
  const auto took = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(r.code(), StatusCode::kDeadlineExceeded) << r.ToString();
  EXPECT_LT(took, std::chrono::milliseconds(2400));              // before the lender woke
  std::this_thread::sleep_for(std::chrono::milliseconds(2500));  // it wakes and answers
  EXPECT_EQ(out, std::string(data.size(), 'z'));
  ASSERT_TRUE(Read(client(), s, Range(region, 0, data.size()), &out).ok());
  EXPECT_TRUE(out == data);
}

// Two reads on one endpoint while the lender stalls: the one with the shorter deadline fails
// with DEADLINE_EXCEEDED, and the other is answered when the lender wakes. Before: the first
// closed the endpoint and the second failed UNAVAILABLE with it (over a lossy link, a healthy
// lender's slow answer failed every read in flight to it, and gets found no replica); and under
// load the first could itself come back UNAVAILABLE, the close failing it before it said why.
TEST_F(UcxDataPath, ACallThatRunsOutOfTimeLeavesTheOthersOnItsEndpointAlone) {
  Session s = Open(lender_, {"borrower", 7});
  const std::uint64_t region = s.Grant(4u << 20);
  const std::string data = Bytes(1u << 20, 9);
  ASSERT_TRUE(Write(client(), s, Range(region, 0, data.size()), data).ok());
  lender_.server->StallUcxForTest(1000);
  std::string patient(data.size(), 'z');
  auto second = std::async(std::launch::async, [&] {
    return client().Call(s.route, s.lender_incarnation, Range(region, 0, data.size()), false,
                         reinterpret_cast<std::byte*>(patient.data()), 5000, nullptr);
  });
  std::string hasty(data.size(), 'z');
  Status first = client().Call(s.route, s.lender_incarnation, Range(region, 0, data.size()), false,
                               reinterpret_cast<std::byte*>(hasty.data()), 100, nullptr);
  EXPECT_EQ(first.code(), StatusCode::kDeadlineExceeded) << first.ToString();
  Status waited = second.get();
  EXPECT_TRUE(waited.ok()) << waited.ToString();
  EXPECT_TRUE(patient == data);
  EXPECT_EQ(hasty, std::string(data.size(), 'z'));  // its late answer went nowhere
}

TEST_F(UcxDataPath, ALenderWithoutUcxOffersNoRoute) {
  if (TestsOverUcx()) GTEST_SKIP() << "every lender offers UCX in this run";
  LendingNode plain = StartLender("plain");
  Session s = Open(plain, {"borrower", 7});
  EXPECT_TRUE(s.route.address.empty());
  EXPECT_TRUE(s.route.token.empty());
}

}  // namespace
}  // namespace tierpool
