// The remote tier against real lenders on loopback TCP, in one process: round trips through
// replicas, checksums on every read, failover from a corrupted or frozen replica, repair after
// a peer leaves, and what the lender refuses (unauthenticated peers, stale regions).
#include "tiers/remote_tier.h"

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <chrono>
#include <cstring>
#include <future>
#include <random>
#include <thread>

#include "common/checksum.h"
#include "common/posix.h"
#include "store/lender.h"
#include "tests/cluster/lending_node.h"
#include "tests/testing/loopback_listener.h"
#include "transport/peer_connection.h"
#include "transport/peer_server.h"

namespace tierpool {
namespace {

using namespace tierpool::testing;  // NOLINT: the fixture's helpers
using transport::PeerAuth;
using transport::PeerIdentity;

TEST(RemoteTier, RoundTripThroughTwoReplicasOnDifferentPeers) {
  LendingNode a = StartLender("a"), b = StartLender("b"), c = StartLender("c");
  auto tier = Borrower({&a, &b, &c});
  ASSERT_TRUE(tier->CheckWritable().ok());
  EXPECT_GT(tier->capacity(), 0u);
  std::vector<std::pair<Extent, std::string>> objects;
  for (std::uint32_t i = 0; i < 6; ++i) {
    const std::string data = Bytes((1u << 20) * (i + 1) + i * 77, i);
    tier->RunMaintenance();  // what the tier's thread does between puts: keep regions ahead
    auto e = tier->Allocate(data.size(), {});
    if (!e.ok() && e.status().code() == StatusCode::kResourceExhausted) {
      tier->RunMaintenance();  // a failed allocation asks for a region large enough
      e = tier->Allocate(data.size(), {});
    }
    ASSERT_TRUE(e.ok()) << e.status().ToString();
    auto where = tier->LocateForTest(*e);
    ASSERT_EQ(where.size(), 2u);
    EXPECT_NE(where[0].node_id, where[1].node_id);
    ASSERT_TRUE(WriteSync(*tier, *e, data).ok());
    objects.emplace_back(*e, data);
  }
  ASSERT_NO_FATAL_FAILURE(ExpectEachReadsBack(*tier, objects));
  for (auto& [e, data] : objects) EXPECT_TRUE(tier->Free(e).ok());
  EXPECT_EQ(tier->used_bytes(), 0u);
  // Every byte went by the data path the run asked for, and the peers say which.
  const RemoteTierCounters counters = tier->counters();
  EXPECT_EQ(counters.ucx_bytes_written > 0, TestsOverUcx());
  EXPECT_EQ(counters.ucx_bytes_read > 0, TestsOverUcx());
  for (const RemotePeerInfo& p : tier->Peers()) {
    EXPECT_EQ(p.transport, TestsOverUcx() ? "ucx" : "tcp") << p.member.node_id;
  }
  EXPECT_EQ(a.server->counters().ucx_bytes_in > 0, TestsOverUcx());
}

// Flips one byte of a replica in its lender's memory, as a bad DIMM would.
void FlipByte(std::map<std::string, LendingNode*>& lenders, const RemoteTier::ReplicaLocation& at,
              std::uint64_t byte) {
  lenders[at.node_id]->lender->RegionBytesForTest(at.region)[at.offset + byte] ^= std::byte{1};
}

TEST(RemoteTier, AWriteWhoseSourceDoesNotMatchItsChecksumFails) {
  LendingNode a = StartLender("a"), b = StartLender("b");
  auto tier = Borrower({&a, &b});
  // Several pieces (1 MiB each) of several hashed chunks; the last byte is the wrong one.
  const std::string data = Bytes((3u << 20) + 123, 7);
  auto e = tier->Allocate(data.size(), {});
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  std::string damaged = data;
  damaged.back() ^= 1;
  std::promise<Status> done;
  const RecordInfo info{1, 1, data.size(), Xxh3(data.data(), data.size())};
  tier->Write(*e, info, reinterpret_cast<const std::byte*>(damaged.data()),
              [&](Status s) { done.set_value(s); });
  EXPECT_EQ(done.get_future().get().code(), StatusCode::kDataLoss);
  // The right bytes then go in and come back.
  ASSERT_TRUE(WriteSync(*tier, *e, data).ok());
  std::string out;
  ASSERT_TRUE(ReadSync(*tier, *e, data, &out).ok());
  EXPECT_TRUE(out == data);
}

TEST(RemoteTier, ACorruptedReplicaIsSkippedAndTwoAreDataLoss) {
  LendingNode a = StartLender("a"), b = StartLender("b");
  std::map<std::string, LendingNode*> by_id{{"a", &a}, {"b", &b}};
  auto tier = Borrower({&a, &b});
  const std::string data = Bytes(3u << 20, 7);
  auto e = tier->Allocate(data.size(), {});
  ASSERT_TRUE(e.ok());
  ASSERT_TRUE(WriteSync(*tier, *e, data).ok());
  auto where = tier->LocateForTest(*e);
  ASSERT_EQ(where.size(), 2u);
  // Flip a byte of the first replica a read tries, in the lender's memory.
  FlipByte(by_id, where[0], 12345);
  std::string out;
  ASSERT_TRUE(ReadSync(*tier, *e, data, &out).ok());
  EXPECT_TRUE(out == data);
  EXPECT_EQ(tier->counters().read_failovers, 1u);
  FlipByte(by_id, where[1], 99);
  Status s = ReadSync(*tier, *e, data, &out);
  EXPECT_EQ(s.code(), StatusCode::kDataLoss) << s.ToString();
  EXPECT_GE(tier->Stats().checksum_failures, 2u);
}

// A replica whose bytes went bad in its lender's memory is dropped when a read finds it, and
// rebuilt from the good one, so the object survives the other replica going bad later. Before:
// the bad replica stayed in its set, nothing was rebuilt, and a repair that read it first failed
// every pass; the second corruption made the object DATA_LOSS.
TEST(RemoteTier, ACorruptedReplicaFoundByAReadIsRebuiltFromTheGoodOne) {
  LendingNode a = StartLender("a"), b = StartLender("b"), c = StartLender("c");
  std::map<std::string, LendingNode*> by_id{{"a", &a}, {"b", &b}, {"c", &c}};
  auto tier = Borrower({&a, &b, &c});
  const std::string data = Bytes(3u << 20, 9);
  auto e = tier->Allocate(data.size(), {});
  ASSERT_TRUE(e.ok());
  ASSERT_TRUE(WriteSync(*tier, *e, data).ok());
  auto where = tier->LocateForTest(*e);
  ASSERT_EQ(where.size(), 2u);
  FlipByte(by_id, where[0], 777);
  std::string out;
  ASSERT_TRUE(ReadSync(*tier, *e, data, &out).ok());
  EXPECT_EQ(tier->counters().replicas_corrupt, 1u);
  EXPECT_EQ(tier->LocateForTest(*e).size(), 1u);
  tier->RunMaintenance();  // the repair, from the good replica
  EXPECT_EQ(tier->counters().replicas_repaired, 1u);
  ASSERT_EQ(tier->LocateForTest(*e).size(), 2u);
  EXPECT_EQ(tier->Stats().state, "ok") << tier->Stats().state_why;
  // The replica that was good goes bad too: the rebuilt one serves.
  FlipByte(by_id, where[1], 5);
  ASSERT_TRUE(ReadSync(*tier, *e, data, &out).ok());
  EXPECT_TRUE(out == data);
}

TEST(RemoteTier, APeerThatLeavesIsRepairedFromTheSurvivor) {
  LendingNode a = StartLender("a"), b = StartLender("b"), c = StartLender("c");
  std::map<std::string, LendingNode*> by_id{{"a", &a}, {"b", &b}, {"c", &c}};
  RemoteTierConfig config = SmallConfig();
  // 512 KiB a second, and a pass each second: one object per pass, so the state between shows
  // and the bound holds.
  config.repair_bytes_per_sec = 512u << 10;
  ManualClock clock;
  auto tier = Borrower({&a, &b, &c}, config, &clock);
  std::vector<std::pair<Extent, std::string>> objects;
  for (std::uint32_t i = 0; i < 8; ++i) {
    const std::string data = Bytes(512u << 10, 100 + i);
    auto e = tier->Allocate(data.size(), {});
    ASSERT_TRUE(e.ok());
    ASSERT_TRUE(WriteSync(*tier, *e, data).ok());
    objects.emplace_back(*e, data);
  }
  // The member holding the first object's first replica leaves (its lease lapsed).
  const std::string gone = tier->LocateForTest(objects[0].first)[0].node_id;
  std::vector<RemoteMember> rest;
  for (auto& [id, n] : by_id) {
    if (id != gone) rest.push_back(n->member);
  }
  by_id[gone]->server->Stop();
  tier->SetMembers(rest);
  // Out of the membership is not gone (etcd may have lost its record): kept until a probe finds
  // nothing listening there.
  EXPECT_EQ(tier->Peers().size(), 3u);
  tier->RunMaintenance();
  EXPECT_EQ(tier->Peers().size(), 2u);
  EXPECT_EQ(tier->Stats().state, "degraded");
  EXPECT_NE(tier->Stats().state_why.find("fewer copies than wanted"), std::string::npos)
      << tier->Stats().state_why;
  // The first pass after the loss rebuilt one object, and no more than one starts a second.
  EXPECT_EQ(tier->counters().replicas_repaired, 1u);
  tier->RunMaintenance();
  EXPECT_EQ(tier->counters().replicas_repaired, 1u);
  for (int pass = 0; pass < 8; ++pass) {
    clock.Advance(1'000'000);
    tier->RunMaintenance();
    EXPECT_LE(tier->counters().replicas_repaired, 2u + pass);
  }
  const auto counters = tier->counters();
  EXPECT_EQ(counters.repair_bytes, counters.replicas_repaired * (512u << 10));
  EXPECT_EQ(counters.peers_lost, 1u);
  EXPECT_GT(counters.replicas_lost, 0u);
  EXPECT_EQ(counters.replicas_repaired, counters.replicas_lost);
  EXPECT_EQ(counters.extents_lost, 0u);
  EXPECT_EQ(tier->Stats().state, "ok");
  for (auto& [e, data] : objects) {
    auto where = tier->LocateForTest(e);
    ASSERT_EQ(where.size(), 2u);
    for (auto& w : where) EXPECT_NE(w.node_id, gone);
    std::string out;
    ASSERT_TRUE(ReadSync(*tier, e, data, &out).ok());
    EXPECT_TRUE(out == data);
  }
}

// A lender frees our regions while both of us live on (its table said we had gone, or a request
// that was not ours released them): the borrower learns it from its next probe, counts the
// regions lost and repairs the replicas from the others, so the objects survive the next
// lender's loss. (#76 item 8: 19-20 of 32 objects were unreadable for good, with /health "ok"
// and every loss counter at 0.)
TEST(RemoteTier, RegionsALenderFreedBehindOurBackAreCountedAndRepaired) {
  LendingNode a = StartLender("a"), b = StartLender("b"), c = StartLender("c");
  std::map<std::string, LendingNode*> by_id{{"a", &a}, {"b", &b}, {"c", &c}};
  auto tier = Borrower({&a, &b, &c});
  std::vector<std::pair<Extent, std::string>> objects;
  for (std::uint32_t i = 0; i < 8; ++i) {
    const std::string data = Bytes(512u << 10, 200 + i);
    auto e = tier->Allocate(data.size(), {});
    ASSERT_TRUE(e.ok());
    ASSERT_TRUE(WriteSync(*tier, *e, data).ok());
    objects.emplace_back(*e, data);
  }
  const std::string robbed = tier->LocateForTest(objects[0].first)[0].node_id;
  by_id[robbed]
      ->lender->DropAllForTest();  // every region it lent, freed behind the borrower's back
  tier->RunMaintenance();          // the probe finds out; the repair follows
  tier->RunMaintenance();
  const auto counters = tier->counters();
  EXPECT_GT(counters.regions_lost, 0u);
  EXPECT_GT(counters.replicas_lost, 0u);
  EXPECT_EQ(counters.replicas_repaired, counters.replicas_lost);
  EXPECT_EQ(counters.extents_lost, 0u);
  EXPECT_EQ(counters.peers_lost, 0u);  // the lender itself is fine
  EXPECT_EQ(tier->Stats().state, "ok") << tier->Stats().state_why;
  // Every object has its copies again, and survives the loss of another lender.
  for (auto& [e, data] : objects) EXPECT_EQ(tier->LocateForTest(e).size(), 2u);
  const std::string next = robbed == "a" ? "b" : "a";
  std::vector<RemoteMember> rest;
  for (auto& [id, n] : by_id) {
    if (id != next) rest.push_back(n->member);
  }
  by_id[next]->server->Stop();
  tier->SetMembers(rest);
  ExpectEachReadsBack(*tier, objects);
}

TEST(RemoteTier, AFrozenPeerCostsOneTimeoutThenTheOtherReplicaServes) {
  LendingNode a = StartLender("a"), b = StartLender("b");
  auto tier = Borrower({&a, &b});
  const std::string data = Bytes(2u << 20, 9);
  auto e = tier->Allocate(data.size(), {});
  ASSERT_TRUE(e.ok());
  ASSERT_TRUE(WriteSync(*tier, *e, data).ok());
  // "Freeze" the first replica's peer: its address now leads to a socket that accepts
  // connections (in the kernel's backlog) and never says a word.
  const LoopbackListener silent = ListenOnLoopback();
  ASSERT_TRUE(silent.fd.valid());
  const std::string frozen = tier->LocateForTest(*e)[0].node_id;
  LendingNode& f = frozen == "a" ? a : b;
  f.server->Stop();  // its pooled connections close; new ones reach the silent socket
  std::vector<RemoteMember> members{a.member, b.member};
  for (auto& m : members) {
    if (m.node_id == frozen) m.address = "127.0.0.1:" + std::to_string(silent.port);
  }
  tier->SetMembers(members);  // same incarnations: an address change, not a death
  const auto start = std::chrono::steady_clock::now();
  std::string out;
  ASSERT_TRUE(ReadSync(*tier, *e, data, &out).ok());
  const auto took = std::chrono::steady_clock::now() - start;
  EXPECT_TRUE(out == data);
  EXPECT_LT(took, std::chrono::seconds(3));  // at most one 500 ms timeout, not a hang
  // Either the read met the silence (and failed over), or the tier's probe had already marked
  // the peer unresponsive and the read went to the other replica first.
  tier->RunMaintenance();
  for (const auto& p : tier->Peers()) {
    if (p.member.node_id == frozen) {
      EXPECT_FALSE(p.responsive);
    }
  }
  EXPECT_LE(tier->counters().read_failovers, 1u);
  EXPECT_EQ(tier->Stats().state, "degraded");
  // /health says which peer, not only that the tier is degraded.
  EXPECT_NE(tier->Stats().state_why.find("peer " + frozen + " at 127.0.0.1:" +
                                         std::to_string(silent.port) + " does not answer"),
            std::string::npos)
      << tier->Stats().state_why;
}

TEST(RemoteTier, ABorrowerWhoseLeaseLapsedKeepsWhatItsLendersStillHold) {
  LendingNode a = StartLender("a"), b = StartLender("b"), c = StartLender("c");
  auto tier = Borrower({&a, &b, &c});
  std::vector<std::pair<Extent, std::string>> objects;
  for (std::uint32_t i = 0; i < 9; ++i) {
    const std::string data = Bytes(700u << 10, 300 + i);
    auto e = tier->Allocate(data.size(), {});
    ASSERT_TRUE(e.ok()) << e.status().ToString();
    ASSERT_TRUE(WriteSync(*tier, *e, data).ok());
    objects.emplace_back(*e, data);
  }
  // The borrower was frozen past its lease: every lender saw it leave, and c's grace period
  // (0 here) ran out, so c freed its regions; a and b still hold theirs.
  c.lender->SetLiveBorrowers({});
  c.lender->SetLiveBorrowers({});
  ASSERT_EQ(c.lender->stats().regions, 0u);
  // Its lease lapsed: no peer is used until a probe has checked our regions there.
  tier->Suspect();
  EXPECT_EQ(tier->CheckWritable().code(), StatusCode::kUnavailable);
  EXPECT_EQ(tier->Stats().state, "degraded");
  EXPECT_NE(tier->Stats().state_why.find("lease lapsed"), std::string::npos);
  tier->RunMaintenance();  // probes (c: regions missing), then repairs from the survivors
  tier->RunMaintenance();
  const auto counters = tier->counters();
  EXPECT_GT(counters.regions_lost, 0u);
  EXPECT_EQ(counters.extents_lost, 0u);
  EXPECT_EQ(counters.replicas_repaired, counters.replicas_lost);
  EXPECT_TRUE(tier->CheckWritable().ok());
  EXPECT_EQ(tier->Stats().state, "ok");
  for (auto& [e, data] : objects) {
    std::string out;
    Status s = ReadSync(*tier, e, data, &out);
    ASSERT_TRUE(s.ok()) << s.ToString();
    EXPECT_TRUE(out == data);
  }
  // Once a and b have freed it too (a second, longer absence), nothing is left: the
  // objects are lost, and say so (NOT_FOUND, which the store reports as a cache object's miss or
  // a retained object's DATA_LOSS); no bytes come back.
  a.lender->SetLiveBorrowers({});
  a.lender->SetLiveBorrowers({});
  b.lender->SetLiveBorrowers({});
  b.lender->SetLiveBorrowers({});
  c.lender->SetLiveBorrowers({});
  c.lender->SetLiveBorrowers({});
  tier->Suspect();
  tier->RunMaintenance();
  EXPECT_EQ(tier->counters().extents_lost, objects.size());
  std::string out;
  EXPECT_EQ(ReadSync(*tier, objects[0].first, objects[0].second, &out).code(),
            StatusCode::kNotFound);
}

TEST(Lender, AdoptsOnlyTheSameNodesEarlierIncarnation) {
  LenderConfig lc;
  lc.lend_bytes = 16 << 20;
  auto lender = std::move(Lender::Create(lc)).value();
  wire::peer::Request grant;
  grant.mutable_grant()->set_bytes(4 << 20);
  wire::peer::Response resp;
  lender->Handle({"alice", 1}, grant, &resp);
  const std::uint64_t region = resp.region();
  wire::peer::Request adopt;
  adopt.mutable_adopt()->set_previous_incarnation(1);
  wire::peer::Response by_mallory;
  lender->Handle({"mallory", 9}, adopt, &by_mallory);  // another node: nothing moves
  EXPECT_EQ(by_mallory.adopted_regions_size(), 0);
  wire::peer::Response same;
  lender->Handle({"alice", 1}, adopt, &same);  // not an earlier life
  EXPECT_EQ(same.code(), static_cast<std::uint32_t>(StatusCode::kInvalidArgument));
  wire::peer::Response back;
  lender->Handle({"alice", 2}, adopt, &back);
  ASSERT_EQ(back.adopted_regions_size(), 1);
  EXPECT_EQ(back.adopted_regions(0), region);
  wire::peer::RegionRange range;
  range.set_region(region);
  range.set_length(4096);
  EXPECT_TRUE(lender->BeginTransfer({"alice", 2}, range, false, {}).ok());
  EXPECT_EQ(lender->BeginTransfer({"alice", 1}, range, false, {}).status().code(),
            StatusCode::kNotFound);
  // alice's new incarnation is live: the region stays.
  lender->SetLiveBorrowers({{"alice", 2}});
  lender->SetLiveBorrowers({{"alice", 2}});
  EXPECT_EQ(lender->stats().regions, 1u);
}

// A borrower gave up on a write (its link stalled) and will put other bytes in that range: the
// fence cuts off the payload still arriving (its connection is shut down, and the fence waits
// for it to let go) and refuses writes sent before it. Before: the late payload went on landing
// in the region after the borrower had written another object there (#71's soak: an
// acknowledged object's only replica failed its checksum).
TEST(Lender, AFenceStopsALatePayloadAndRefusesWritesSentBeforeIt) {
  LenderConfig lc;
  lc.lend_bytes = 16 << 20;
  auto lender = std::move(Lender::Create(lc)).value();
  wire::peer::Request grant;
  grant.mutable_grant()->set_bytes(4 << 20);
  wire::peer::Response granted;
  lender->Handle({"alice", 1}, grant, &granted);
  const std::uint64_t region = granted.region();
  int sv[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  wire::peer::RegionRange range;
  range.set_region(region);
  range.set_length(4096);
  range.set_sequence(5);
  auto late =
      lender->BeginTransfer({"alice", 1}, range, true, [fd = sv[0]] { ::shutdown(fd, SHUT_RDWR); });
  ASSERT_TRUE(late.ok()) << late.status().ToString();
  // The server's thread receiving its payload: it lets go once its connection is shut down.
  transport::PeerTransfer receiving = std::move(late).value();
  std::thread server([&] {
    char byte;
    (void)::recv(sv[0], &byte, 1, 0);
    receiving.hold.reset();
  });
  wire::peer::Request fence;
  auto* f = fence.mutable_info()->add_fences();
  f->set_region(region);
  f->set_below(6);
  wire::peer::Response by_mallory;
  lender->Handle({"mallory", 9}, fence, &by_mallory);  // not hers: nothing fenced, nothing cut
  EXPECT_EQ(by_mallory.fenced_regions_size(), 0);
  wire::peer::Response fenced;
  lender->Handle({"alice", 1}, fence, &fenced);
  server.join();
  ASSERT_EQ(fenced.fenced_regions_size(), 1);
  EXPECT_EQ(fenced.fenced_regions(0), region);
  EXPECT_EQ(lender->BeginTransfer({"alice", 1}, range, true, {}).status().code(),
            StatusCode::kAborted);  // sent before the fence
  range.set_sequence(6);
  EXPECT_TRUE(lender->BeginTransfer({"alice", 1}, range, true, {}).ok());
  range.set_sequence(1);
  EXPECT_TRUE(lender->BeginTransfer({"alice", 1}, range, false, {}).ok());  // reads are not fenced
  EXPECT_EQ(lender->stats().fenced_writes, 2u);  // one cut off, one refused
  ::close(sv[0]);
  ::close(sv[1]);
}

TEST(RemoteTier, ACacheObjectHasOneCopyAndARetainedOneHasEveryReplica) {
  LendingNode a = StartLender("a"), b = StartLender("b"), c = StartLender("c");
  auto tier = Borrower({&a, &b, &c});
  const std::string data = Bytes(1u << 20, 77);
  AllocationHint cache;
  cache.cache = true;
  auto one = tier->Allocate(data.size(), cache);
  auto two = tier->Allocate(data.size(), {});
  ASSERT_TRUE(one.ok() && two.ok());
  EXPECT_EQ(tier->LocateForTest(*one).size(), 1u);
  EXPECT_EQ(tier->LocateForTest(*two).size(), 2u);
  ASSERT_TRUE(WriteSync(*tier, *one, data).ok());
  ASSERT_TRUE(WriteSync(*tier, *two, data).ok());
  EXPECT_EQ(tier->Stats().state, "ok");  // one copy is all a cache object wants
  std::string out;
  ASSERT_TRUE(ReadSync(*tier, *one, data, &out).ok());
  EXPECT_TRUE(out == data);
  // Its peer leaves: the bytes are gone, NOT_FOUND (the store's miss), never DATA_LOSS.
  const std::string holder = tier->LocateForTest(*one)[0].node_id;
  std::vector<RemoteMember> rest;
  for (auto* n : {&a, &b, &c}) {
    if (n->member.node_id != holder) {
      rest.push_back(n->member);
    } else {
      n->server->Stop();
    }
  }
  tier->SetMembers(rest);
  tier->RunMaintenance();
  EXPECT_EQ(ReadSync(*tier, *one, data, &out).code(), StatusCode::kNotFound);
  ASSERT_TRUE(ReadSync(*tier, *two, data, &out).ok());  // a retained one has another replica
  EXPECT_TRUE(out == data);
}

TEST(RemoteTier, NoRoomOnEnoughPeersIsResourceExhausted) {
  LendingNode a = StartLender("a", 8ull << 20);
  auto tier = Borrower({&a});  // one peer, two replicas wanted
  EXPECT_EQ(tier->CheckWritable().code(), StatusCode::kUnavailable);
  EXPECT_EQ(tier->Allocate(1 << 20, {}).status().code(), StatusCode::kResourceExhausted);
}

// Room one borrower took ahead of need goes back when another needs it. Before: the first to ask
// kept its reserve for as long as both ran, while the other found no room for its copies there;
// in the frozen-lender cluster test (e2e ClusterFailure) one or two of nine objects stayed on a
// single copy for good, in one run of five here and in a CI run of 2026-12-07.
TEST(RemoteTier, RoomKeptInReserveGoesBackToABorrowerThatNeedsIt) {
  LendingNode l = StartLender("l", 24ull << 20);
  RemoteTierConfig config = SmallConfig();  // 8 MiB regions, one kept in reserve
  config.replicas = 1;
  auto hoarder = Borrower({&l}, config, SystemClock::Default(), "hoarder");
  auto needy = Borrower({&l}, config, SystemClock::Default(), "needy");
  // The hoarder places one small copy, and takes another region to keep its reserve.
  const std::string small = Bytes(1u << 20, 1);
  auto kept = hoarder->Allocate(small.size(), {});
  ASSERT_TRUE(kept.ok());
  ASSERT_TRUE(WriteSync(*hoarder, *kept, small).ok());
  hoarder->RunMaintenance();
  ASSERT_EQ(l.lender->stats().granted_bytes, 24u << 20);
  // The needy one fills its region; the next copy finds no room, anywhere.
  std::vector<std::pair<Extent, std::string>> objects;
  for (std::uint32_t i = 0; i < 3; ++i) {
    const std::string data = Bytes(4u << 20, 10 + i);
    auto e = needy->Allocate(data.size(), {});
    if (i == 2) {
      ASSERT_EQ(e.status().code(), StatusCode::kResourceExhausted);
      break;
    }
    ASSERT_TRUE(e.ok());
    ASSERT_TRUE(WriteSync(*needy, *e, data).ok());
    objects.emplace_back(*e, data);
  }
  // It asks for the room all the same: refused, and the lender tells the others room is wanted.
  needy->RunMaintenance();
  EXPECT_EQ(l.lender->stats().unmet_grants, 1u);
  // The hoarder hears it and gives back the region that holds nothing, not the one with a copy.
  hoarder->RunMaintenance();
  EXPECT_EQ(hoarder->counters().regions_given_back, 1u);
  EXPECT_EQ(l.lender->stats().granted_bytes, 16u << 20);
  hoarder->RunMaintenance();  // nor does it take a reserve again while room is wanted
  EXPECT_EQ(l.lender->stats().granted_bytes, 16u << 20);
  std::string out;
  ASSERT_TRUE(ReadSync(*hoarder, *kept, small, &out).ok());
  EXPECT_TRUE(out == small);
  // The needy one is granted the room, and its copy goes there.
  needy->RunMaintenance();
  const std::string data = Bytes(4u << 20, 12);
  auto e = needy->Allocate(data.size(), {});
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  ASSERT_TRUE(WriteSync(*needy, *e, data).ok());
  objects.emplace_back(*e, data);
  ASSERT_NO_FATAL_FAILURE(ExpectEachReadsBack(*needy, objects));
}

// A set short of a copy with nowhere to rebuild it says so in the tier's state: before, the
// state said only "rebuilding them", whether a rebuild could start or not.
TEST(RemoteTier, ARepairWithNoPeerToGoToSaysSo) {
  LendingNode a = StartLender("a"), b = StartLender("b");
  auto tier = Borrower({&a, &b});  // two replicas: one on each
  const std::string data = Bytes(1u << 20, 3);
  auto e = tier->Allocate(data.size(), {});
  ASSERT_TRUE(e.ok());
  ASSERT_TRUE(WriteSync(*tier, *e, data).ok());
  b.server->Stop();
  tier->SetMembers({a.member});
  tier->RunMaintenance();  // b refuses connections and has left: gone
  ASSERT_EQ(tier->Peers().size(), 1u);
  const TierStats stats = tier->Stats();
  EXPECT_EQ(stats.state, "degraded");
  EXPECT_NE(stats.state_why.find("1 of them have no other answering peer with room"),
            std::string::npos)
      << stats.state_why;
  std::string out;
  ASSERT_TRUE(ReadSync(*tier, *e, data, &out).ok());  // the survivor serves
  EXPECT_TRUE(out == data);
}

// ---- the lender's side of the protocol ----

transport::PeerConnection* Connect(LendingNode& n, const std::string& secret, PeerIdentity who,
                                   std::unique_ptr<transport::PeerConnection>* holder,
                                   Status* status = nullptr) {
  auto c = transport::PeerConnection::Connect(n.member.address, *PeerAuth::FromSecret(secret), who,
                                              1000);
  if (status != nullptr) *status = c.status();
  if (!c.ok()) return nullptr;
  *holder = std::move(c).value();
  return holder->get();
}

TEST(Lender, RefusesAPeerWithoutTheSecret) {
  LendingNode a = StartLender("a");
  std::unique_ptr<transport::PeerConnection> conn;
  Status s;
  EXPECT_EQ(Connect(a, "another secret, also long enough", {"mallory", 1}, &conn, &s), nullptr);
  EXPECT_EQ(s.code(), StatusCode::kPermissionDenied) << s.ToString();
  // Bytes that are not a handshake at all: the connection is closed, nothing is granted.
  UniqueFd raw(::socket(AF_INET, SOCK_STREAM, 0));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(a.server->port());
  ASSERT_EQ(::connect(raw.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  const char garbage[] = "GET / HTTP/1.1\r\n\r\n";
  ASSERT_GT(::send(raw.get(), garbage, sizeof garbage, MSG_NOSIGNAL), 0);
  char sink[4096];
  while (::recv(raw.get(), sink, sizeof sink, 0) > 0) {
  }
  for (int i = 0; i < 100 && a.server->counters().auth_failures < 2; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(a.server->counters().auth_failures, 2u);
  EXPECT_EQ(a.lender->stats().regions, 0u);
}

TEST(Lender, RefusesStaleRegionsAndOthersRegions) {
  LendingNode a = StartLender("a");
  std::unique_ptr<transport::PeerConnection> h1, h2, h3;
  auto* alice = Connect(a, kSecret, {"alice", 1}, &h1);
  auto* bob = Connect(a, kSecret, {"bob", 2}, &h2);
  ASSERT_NE(alice, nullptr);
  ASSERT_NE(bob, nullptr);
  auto request = [&](auto fill) {
    wire::peer::Request r;
    r.set_lender_incarnation(a.member.incarnation);
    fill(r);
    return r;
  };
  wire::peer::Response resp;
  auto grant = request([](auto& r) { r.mutable_grant()->set_bytes(1 << 20); });
  ASSERT_TRUE(alice->Call(&grant, nullptr, 0, &resp).ok());
  const std::uint64_t region = resp.region();
  const std::string data(4096, 'x');
  auto write = request([&](auto& r) {
    r.mutable_write()->set_region(region);
    r.mutable_write()->set_length(data.size());
  });
  ASSERT_TRUE(alice->Call(&write, data.data(), data.size(), &resp).ok());
  // Bob may not touch alice's region, nor alice's next life.
  EXPECT_EQ(bob->Call(&write, data.data(), data.size(), &resp).code(), StatusCode::kNotFound);
  auto* reborn = Connect(a, kSecret, {"alice", 3}, &h3);
  ASSERT_NE(reborn, nullptr);
  std::string out(4096, '\0');
  auto read = request([&](auto& r) {
    r.mutable_read()->set_region(region);
    r.mutable_read()->set_length(out.size());
  });
  EXPECT_EQ(reborn->Call(&read, nullptr, 0, &resp, out.data(), out.size()).code(),
            StatusCode::kNotFound);
  // Out of the region's bounds.
  auto past = request([&](auto& r) {
    r.mutable_read()->set_region(region);
    r.mutable_read()->set_offset((1 << 20) - 10);
    r.mutable_read()->set_length(4096);
  });
  EXPECT_EQ(alice->Call(&past, nullptr, 0, &resp, out.data(), 4096).code(),
            StatusCode::kInvalidArgument);
  // A request addressed to an earlier life of the lender.
  auto old = read;
  old.set_lender_incarnation(a.member.incarnation + 1);
  EXPECT_EQ(alice->Call(&old, nullptr, 0, &resp, out.data(), out.size()).code(),
            StatusCode::kFailedPrecondition);
  ASSERT_TRUE(alice->Call(&read, nullptr, 0, &resp, out.data(), out.size()).ok());
  EXPECT_EQ(out, data);
  // Freed, and its id is never handed out again: a late read is refused.
  auto release = request([&](auto& r) { r.mutable_release()->set_region(region); });
  ASSERT_TRUE(alice->Call(&release, nullptr, 0, &resp).ok());
  ASSERT_TRUE(alice->Call(&grant, nullptr, 0, &resp).ok());
  EXPECT_NE(resp.region(), region);
  EXPECT_EQ(alice->Call(&read, nullptr, 0, &resp, out.data(), out.size()).code(),
            StatusCode::kNotFound);
  EXPECT_GE(a.lender->stats().stale_refusals, 3u);
}

TEST(Lender, FreesWhatABorrowerThatLeftHeldAfterTheGracePeriod) {
  ManualClock clock;
  LenderConfig lc;
  lc.lend_bytes = 16 << 20;
  lc.borrower_grace_ms = 1000;
  auto lender = std::move(Lender::Create(lc, &clock)).value();
  wire::peer::Request grant;
  grant.mutable_grant()->set_bytes(4 << 20);
  wire::peer::Response resp;
  lender->Handle({"alice", 1}, grant, &resp);
  ASSERT_EQ(resp.code(), 0u);
  lender->SetLiveBorrowers({{"alice", 1}});
  EXPECT_EQ(lender->stats().regions, 1u);
  lender->SetLiveBorrowers({});  // alice's lease lapsed
  clock.Advance(500'000);
  lender->SetLiveBorrowers({});
  EXPECT_EQ(lender->stats().regions, 1u);  // within the grace period
  clock.Advance(600'000);
  lender->SetLiveBorrowers({{"alice", 2}});  // back, but as another incarnation
  EXPECT_EQ(lender->stats().regions, 0u);
  EXPECT_EQ(lender->stats().regions_reclaimed, 1u);
}

// Grants of 1 MiB to `node` until the lender refuses one: the bytes it was granted.
std::uint64_t GrantUntilRefused(Lender& lender, const transport::PeerIdentity& node) {
  wire::peer::Request grant;
  grant.mutable_grant()->set_bytes(1 << 20);
  std::uint64_t granted = 0;
  for (int n = 0; n < 1024; ++n) {
    wire::peer::Response resp;
    lender.Handle(node, grant, &resp);
    if (resp.code() != 0) {
      EXPECT_EQ(resp.code(), static_cast<std::uint32_t>(StatusCode::kResourceExhausted));
      break;
    }
    granted += resp.region_bytes();
  }
  return granted;
}

// What every borrower's first probe is: it has proved on the peer link that it holds the secret.
void Speak(Lender& lender, const transport::PeerIdentity& node) {
  wire::peer::Request info;
  info.mutable_info();
  wire::peer::Response resp;
  lender.Handle(node, info, &resp);
  ASSERT_EQ(resp.code(), 0u);
}

std::uint64_t RoomFor(Lender& lender, const transport::PeerIdentity& node) {
  wire::peer::Response resp;
  lender.FillRoom(node, &resp);
  return resp.lend_free();
}

// A grant the lender cannot meet is told to every other borrower for room_wanted_ms, so that
// those holding room in reserve give it back; the asker is not told of its own ask.
TEST(Lender, AGrantItCannotMeetIsToldToTheOtherBorrowersForAWhile) {
  ManualClock clock;
  LenderConfig lc;
  lc.lend_bytes = 16 << 20;
  lc.room_wanted_ms = 5000;
  auto lender = std::move(Lender::Create(lc, &clock)).value();
  auto told = [&](const transport::PeerIdentity& who) {
    wire::peer::Response resp;
    lender->FillRoom(who, &resp);
    return resp.room_wanted();
  };
  wire::peer::Request grant;
  grant.mutable_grant()->set_bytes(8 << 20);
  wire::peer::Response granted;
  lender->Handle({"alice", 1}, grant, &granted);
  ASSERT_EQ(granted.code(), 0u);
  EXPECT_FALSE(told({"bob", 2}));                               // alice had all she asked for
  EXPECT_EQ(GrantUntilRefused(*lender, {"bob", 2}), 8u << 20);  // its last ask refused
  EXPECT_EQ(lender->stats().unmet_grants, 1u);
  EXPECT_TRUE(told({"alice", 1}));
  EXPECT_TRUE(told({"carol", 3}));
  EXPECT_FALSE(told({"bob", 2}));
  clock.Advance(4'000'000);
  EXPECT_TRUE(told({"alice", 1}));
  clock.Advance(1'000'000);
  EXPECT_FALSE(told({"alice", 1}));
}

TEST(Lender, AMemberThatAsksForEverythingLeavesTheOthersTheirShare) {
  LenderConfig lc;
  lc.lend_bytes = 60 << 20;  // half of it (the default share) is 10 MiB for each of three
  auto lender = std::move(Lender::Create(lc)).value();
  lender->SetLiveBorrowers({{"alice", 1}, {"bob", 2}, {"carol", 3}});
  for (auto who : {PeerIdentity{"alice", 1}, PeerIdentity{"bob", 2}, PeerIdentity{"carol", 3}}) {
    Speak(*lender, who);
  }
  EXPECT_EQ(RoomFor(*lender, {"alice", 1}), 40u << 20);  // all but bob's and carol's shares
  // alice (a member, so never reclaimed) asks for all she can get.
  EXPECT_EQ(GrantUntilRefused(*lender, {"alice", 1}), 40u << 20);
  EXPECT_EQ(RoomFor(*lender, {"alice", 1}), 0u);
  EXPECT_EQ(lender->stats().share_refusals, 1u);
  // A node that is not a member (yet) has no share and gets nothing of the others'.
  EXPECT_EQ(RoomFor(*lender, {"mallory", 9}), 0u);
  EXPECT_EQ(GrantUntilRefused(*lender, {"mallory", 9}), 0u);
  // bob and carol still get their shares, and bob, asking first, no more than his.
  EXPECT_EQ(RoomFor(*lender, {"bob", 2}), 10u << 20);
  EXPECT_EQ(GrantUntilRefused(*lender, {"bob", 2}), 10u << 20);
  EXPECT_EQ(GrantUntilRefused(*lender, {"carol", 3}), 10u << 20);
  EXPECT_EQ(lender->stats().granted_bytes, 60u << 20);
  EXPECT_EQ(lender->HeldBytesForTest(), 60u << 20);
}

// Before the membership is first heard no part can be kept for anyone: a lender in a cluster
// grants nothing then, so a member asking at the lender's start cannot take everything for good.
TEST(Lender, InAClusterNothingIsGrantedBeforeTheMembersAreHeard) {
  LenderConfig lc;
  lc.lend_bytes = 60 << 20;
  lc.grants_wait_for_members = true;
  auto lender = std::move(Lender::Create(lc)).value();
  EXPECT_EQ(RoomFor(*lender, {"alice", 1}), 0u);
  wire::peer::Request grant;
  grant.mutable_grant()->set_bytes(1 << 20);
  wire::peer::Response early;
  lender->Handle({"alice", 1}, grant, &early);
  EXPECT_EQ(early.code(), static_cast<std::uint32_t>(StatusCode::kUnavailable));
  EXPECT_EQ(lender->stats().granted_bytes, 0u);
  lender->SetLiveBorrowers({{"alice", 1}, {"bob", 2}, {"carol", 3}});
  Speak(*lender, {"bob", 2});
  Speak(*lender, {"carol", 3});
  EXPECT_EQ(GrantUntilRefused(*lender, {"alice", 1}), 40u << 20);
  EXPECT_EQ(GrantUntilRefused(*lender, {"bob", 2}), 10u << 20);
}

// A member record is only a record: anyone who can write to etcd can add one. A member that has
// not proved on the peer link that it holds the cluster's secret is kept its part only for a
// while after it is listed (its first probe is a second away), and then nothing.
TEST(Lender, AMemberThatNeverSpeaksOnThePeerLinkIsKeptNothingOnceListedAWhile) {
  ManualClock clock;
  LenderConfig lc;
  lc.lend_bytes = 60 << 20;
  lc.share_probation_ms = 5000;
  auto lender = std::move(Lender::Create(lc, &clock)).value();
  lender->SetLiveBorrowers({{"alice", 1}, {"bob", 2}, {"ghost", 3}});
  Speak(*lender, {"alice", 1});
  EXPECT_EQ(lender->stats().borrowing_members, 3u);  // bob and the ghost are just listed
  EXPECT_EQ(RoomFor(*lender, {"alice", 1}), 40u << 20);
  clock.Advance(6'000'000);
  Speak(*lender, {"bob", 2});
  lender->SetLiveBorrowers({{"alice", 1}, {"bob", 2}, {"ghost", 3}});
  EXPECT_EQ(lender->stats().borrowing_members, 2u);
  // Half of 60 MiB split between alice and bob alone: 15 MiB kept for bob, none for the ghost.
  EXPECT_EQ(RoomFor(*lender, {"alice", 1}), 45u << 20);
  EXPECT_EQ(GrantUntilRefused(*lender, {"alice", 1}), 45u << 20);
  EXPECT_EQ(GrantUntilRefused(*lender, {"bob", 2}), 15u << 20);
}

TEST(Lender, AShareAlreadyHeldIsNotKeptAgain) {
  LenderConfig lc;
  lc.lend_bytes = 64 << 20;
  lc.reserved_share = 0.25;  // 8 MiB for each of two
  auto lender = std::move(Lender::Create(lc)).value();
  lender->SetLiveBorrowers({{"alice", 1}, {"bob", 2}});
  Speak(*lender, {"bob", 2});
  wire::peer::Request grant;
  grant.mutable_grant()->set_bytes(6 << 20);
  wire::peer::Response resp;
  lender->Handle({"alice", 1}, grant, &resp);
  ASSERT_EQ(resp.code(), 0u);
  // alice holds 6 MiB of her 8: only the 2 she has not taken are kept from bob.
  EXPECT_EQ(RoomFor(*lender, {"bob", 2}), 56u << 20);
  EXPECT_EQ(GrantUntilRefused(*lender, {"bob", 2}), 56u << 20);
  EXPECT_EQ(GrantUntilRefused(*lender, {"alice", 1}), 2u << 20);
  // bob gives a region back: it is anyone's again, his share being held.
  wire::peer::Request release;
  release.mutable_release()->set_region(resp.region() + 1);  // bob's first region
  wire::peer::Response released;
  lender->Handle({"bob", 2}, release, &released);
  ASSERT_EQ(released.code(), 0u);
  EXPECT_EQ(RoomFor(*lender, {"alice", 1}), 1u << 20);
  EXPECT_EQ(lender->HeldBytesForTest(), 63u << 20);
  // A member alone in the cluster is kept nothing for: everything is its to ask for.
  auto solo = std::move(Lender::Create(lc)).value();
  solo->SetLiveBorrowers({{"alice", 1}});
  EXPECT_EQ(GrantUntilRefused(*solo, {"alice", 1}), 64u << 20);
  // A reserved share of 0 keeps nothing for anyone.
  lc.reserved_share = 0;
  auto open = std::move(Lender::Create(lc)).value();
  open->SetLiveBorrowers({{"alice", 1}, {"bob", 2}});
  Speak(*open, {"bob", 2});
  EXPECT_EQ(GrantUntilRefused(*open, {"alice", 1}), 64u << 20);
}

}  // namespace
}  // namespace tierpool
