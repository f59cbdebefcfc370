#include "tests/cluster/lending_node.h"

#include <gtest/gtest.h>

#include <future>
#include <random>

#include "common/checksum.h"
#include "transport/peer_auth.h"

namespace tierpool::testing {

using transport::PeerAuth;
using transport::PeerIdentity;

const char kSecret[] = "a test secret of enough bytes, not for production";

LendingNode StartLender(const std::string& id, std::uint64_t bytes,
                        transport::PeerServerConfig sc) {
  LendingNode n;
  LenderConfig lc;
  lc.lend_bytes = bytes;
  lc.borrower_grace_ms = 0;
  n.lender = std::move(Lender::Create(lc)).value();
  sc.listen = "127.0.0.1:0";
  if (TestsOverUcx()) sc.ucx = true;
  const PeerIdentity self{id, transport::RandomIncarnation()};
  n.server = std::make_unique<transport::PeerServer>(sc, *PeerAuth::FromSecret(kSecret), self,
                                                     n.lender.get());
  EXPECT_TRUE(n.server->Start().ok());
  n.member = {id, self.incarnation, "127.0.0.1:" + std::to_string(n.server->port()), bytes};
  return n;
}

RemoteTierConfig SmallConfig() {
  RemoteTierConfig c;
  c.replicas = 2;
  c.region_bytes = 8ull << 20;
  c.headroom_regions = 1;
  c.io_timeout_ms = 500;
  c.piece_bytes = 1ull << 20;        // several pieces per object
  c.background_maintenance = false;  // tests run passes themselves
  c.probe_interval_ms = 0;
  c.ucx = TestsOverUcx();
  return c;
}

std::unique_ptr<RemoteTier> Borrower(const std::vector<LendingNode*>& lenders,
                                     RemoteTierConfig config, const Clock* clock,
                                     const std::string& node_id) {
  auto tier = std::make_unique<RemoteTier>(config, *PeerAuth::FromSecret(kSecret),
                                           PeerIdentity{node_id, 42}, clock);
  std::vector<RemoteMember> members;
  for (auto* l : lenders) members.push_back(l->member);
  tier->SetMembers(members);
  tier->RunMaintenance();  // grants
  return tier;
}

std::string Bytes(std::size_t n, std::uint32_t seed) {
  std::string s(n, '\0');
  std::mt19937 rng(seed);
  for (auto& c : s) c = static_cast<char>(rng());
  return s;
}

Status WriteSync(Tier& t, const Extent& e, const std::string& data) {
  std::promise<Status> done;
  RecordInfo info{1, 1, data.size(), Xxh3(data.data(), data.size())};
  t.Write(e, info, reinterpret_cast<const std::byte*>(data.data()),
          [&](Status s) { done.set_value(s); });
  return done.get_future().get();
}

Status ReadSync(Tier& t, const Extent& e, const std::string& want, std::string* out) {
  out->assign(e.length, '\0');
  std::promise<Status> done;
  RecordInfo info{1, 1, want.size(), Xxh3(want.data(), want.size())};
  t.Read(e, info, reinterpret_cast<std::byte*>(out->data()), [&](Status s) { done.set_value(s); });
  Status s = done.get_future().get();
  out->resize(want.size());
  return s;
}

void ExpectEachReadsBack(Tier& tier, const std::vector<std::pair<Extent, std::string>>& objects) {
  for (const auto& [e, data] : objects) {
    std::string out;
    ASSERT_TRUE(ReadSync(tier, e, data, &out).ok());
    EXPECT_TRUE(out == data);
  }
}

}  // namespace tierpool::testing
