// What the remote-tier tests share: lenders behind peer listeners on loopback TCP in this
// process, a borrowing RemoteTier sized for tests, and synchronous reads and writes through it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "store/lender.h"
#include "tests/testing/peer_transport.h"
#include "tiers/remote_tier.h"
#include "transport/peer_server.h"

namespace tierpool::testing {

extern const char kSecret[];

struct LendingNode {
  std::unique_ptr<Lender> lender;
  std::unique_ptr<transport::PeerServer> server;
  RemoteMember member;
};

// A lender of `bytes` (no grace period for borrowers that leave) listening on 127.0.0.1, with
// the listener's limits of `server` (its address is set here).
LendingNode StartLender(const std::string& id, std::uint64_t bytes = 64ull << 20,
                        transport::PeerServerConfig server = {});

// Two replicas, 8 MiB regions, 1 MiB pieces, a 500 ms I/O timeout; no maintenance thread (the
// tests run passes themselves); over UCX with TestsOverUcx.
RemoteTierConfig SmallConfig();

// A remote tier borrowing from `lenders` as node `node_id`, its first grants made.
std::unique_ptr<RemoteTier> Borrower(const std::vector<LendingNode*>& lenders,
                                     RemoteTierConfig config = SmallConfig(),
                                     const Clock* clock = SystemClock::Default(),
                                     const std::string& node_id = "borrower");

std::string Bytes(std::size_t n, std::uint32_t seed);
Status WriteSync(Tier& t, const Extent& e, const std::string& data);
Status ReadSync(Tier& t, const Extent& e, const std::string& want, std::string* out);
// Every object read back from `tier` and compared with its bytes (a test failure for each that
// does not come back, or comes back other).
void ExpectEachReadsBack(Tier& tier, const std::vector<std::pair<Extent, std::string>>& objects);

}  // namespace tierpool::testing
