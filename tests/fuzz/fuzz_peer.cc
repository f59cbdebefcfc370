// Bytes from another sidecar on the peer protocol (docs/protocol.md, "Peer protocol"). The first
// byte says who sends the rest:
//   0: a stranger, to the listener's half of the handshake (anyone who reaches the port);
//   1: a listener, to the connecting half (a borrower dialling an address it was told);
//   2: an authenticated borrower, as a stream of requests to a real lender (grants, reads and
//      writes of ranges, releases, adoptions), with borrowers leaving and the clock moving;
//   3: a member record in etcd, which every sidecar of the cluster may write.
// A transfer the lender allows must lie inside a region granted to the asker; the target
// checks that itself (lent memory is one mapping, where a sanitizer sees no bounds) and
// touches every byte of it.
#include <sys/socket.h>

#include <cstring>
#include <map>
#include <string>

#include "common/clock.h"
#include "common/posix.h"
#include "store/lender.h"
#include "store/membership.h"
#include "tests/fuzz/fuzz_target.h"
#include "tests/fuzz/quiet_logs.h"
#include "transport/framing.h"
#include "transport/peer_auth.h"
#include "transport/peer_wire.h"

namespace {

using namespace tierpool;

const transport::PeerAuth& Auth() {
  static const auto auth =
      transport::PeerAuth::FromSecret("the fuzz target's secret, long enough").value();
  return auth;
}

// Runs one half of the handshake against `bytes` as everything the other side ever sends.
void Handshake(bool listener, const std::uint8_t* bytes, std::size_t size) {
  int fds[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) std::abort();
  UniqueFd ours(fds[0]), theirs(fds[1]);
  // What fits in the socket's buffer (every input the fuzzer makes), then end of stream.
  std::size_t at = 0;
  while (at < size) {
    const ssize_t n = ::send(theirs.get(), bytes + at, size - at, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n <= 0) break;
    at += static_cast<std::size_t>(n);
  }
  ::shutdown(theirs.get(), SHUT_WR);
  const transport::PeerIdentity self{"fuzzed", 1};
  const auto deadline = transport::PeerDeadline::After(200);
  auto who = listener ? transport::AcceptHandshake(ours.get(), Auth(), self, deadline)
                      : transport::ConnectHandshake(ours.get(), Auth(), self, deadline);
  // Passing needs the secret's MAC over a nonce made for this handshake: never from bytes
  // written before it started.
  if (who.ok()) std::abort();
}

void Requests(const std::uint8_t* data, std::size_t size) {
  ManualClock clock;
  LenderConfig config;
  config.lend_bytes = 4 << 20;
  config.max_grant_bytes = 2 << 20;
  config.borrower_grace_ms = 50;
  config.grants_wait_for_members = size % 2 == 0;  // as tierpoold's lender, or not
  auto lender = Lender::Create(config, &clock);
  if (!lender.ok()) std::abort();
  const transport::PeerIdentity peers[] = {{"a", 1}, {"a", 2}, {"b", 3}};
  std::map<std::uint64_t, std::pair<std::string, std::uint64_t>> granted;  // id -> (node, bytes)
  std::size_t at = 0;
  for (int frames = 0; frames < 64 && size - at >= transport::kFrameHeaderSize; ++frames) {
    auto header = transport::DecodeFrameHeader(data + at, transport::kMaxPeerMessageBytes);
    if (!header.ok()) break;  // the listener closes the connection
    at += transport::kFrameHeaderSize;
    if (header->length > size - at) break;
    wire::peer::Request request;
    const bool parsed = request.ParseFromArray(data + at, static_cast<int>(header->length));
    at += header->length;
    if (!parsed) break;
    const auto& peer = peers[request.id() % 3];
    wire::peer::Response response;
    const bool write = request.op_case() == wire::peer::Request::kWrite;
    if (write || request.op_case() == wire::peer::Request::kRead) {
      const auto& range = write ? request.write() : request.read();
      auto t = (*lender)->BeginTransfer(peer, range, write, {});
      if (t.ok()) {
        auto g = granted.find(range.region());
        std::byte* base = (*lender)->RegionBytesForTest(range.region());
        if (g == granted.end() || g->second.first != peer.node_id || base == nullptr ||
            t->data < base || range.length() > g->second.second ||
            static_cast<std::uint64_t>(t->data - base) > g->second.second - range.length()) {
          std::abort();  // a transfer outside the asker's region
        }
        if (write) {
          std::memset(t->data, static_cast<int>(request.id() & 0xff), range.length());
        } else {
          volatile std::uint8_t sum = 0;
          for (std::uint64_t i = 0; i < range.length(); ++i) {
            sum = static_cast<std::uint8_t>(sum + static_cast<std::uint8_t>(t->data[i]));
          }
        }
      }
    } else {
      wire::peer::Response before;
      (*lender)->FillRoom(peer, &before);
      (*lender)->Handle(peer, request, &response);
      if (request.op_case() == wire::peer::Request::kGrant && response.code() == 0) {
        if (response.region_bytes() < request.grant().bytes() ||
            request.grant().bytes() > before.lend_free() ||  // past what others are kept
            !granted.emplace(response.region(), std::pair{peer.node_id, response.region_bytes()})
                 .second) {
          std::abort();  // less than asked for, or an id handed out twice
        }
      }
    }
    (*lender)->FillRoom(peer, &response);
    if (response.lend_free() > response.lend_capacity()) std::abort();
    // Every byte given out is counted against the node it was granted to, and no other.
    if ((*lender)->HeldBytesForTest() != (*lender)->stats().granted_bytes) std::abort();
    // Now and then the membership changes and time passes: borrowers that left lose their
    // regions after the grace period.
    clock.Advance((request.lender_incarnation() % 64) * 1000);
    if (request.id() % 5 == 4) {
      std::map<std::string, std::uint64_t> live;
      if (request.id() & 8) live["a"] = 1 + (request.id() >> 4) % 2;
      if (request.id() & 16) live["b"] = 3;
      (*lender)->SetLiveBorrowers(live);
    }
    if (request.id() % 97 == 96) (*lender)->DropAllForTest();
  }
  const LenderStats stats = (*lender)->stats();
  if (stats.granted_bytes > stats.capacity) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  tierpool::fuzz::QuietLogs();
  if (size == 0) return 0;
  switch (data[0] % 4) {
    case 0:
      Handshake(/*listener=*/true, data + 1, size - 1);
      break;
    case 1:
      Handshake(/*listener=*/false, data + 1, size - 1);
      break;
    case 2:
      Requests(data + 1, size - 1);
      break;
    default: {
      const std::string record(reinterpret_cast<const char*>(data + 1), size - 1);
      auto member = tierpool::Membership::Decode(record);
      if (member.ok() &&
          (member->node_id.empty() || member->incarnation == 0 || member->node_id.size() > 255 ||
           member->node_id.find('/') != std::string::npos)) {
        std::abort();
      }
      // Taken under its own node's key only.
      const std::string prefix = "/tierpool/default/members/";
      if (member.ok() &&
          (!tierpool::Membership::DecodeAt(prefix, prefix + member->node_id, record).ok() ||
           tierpool::Membership::DecodeAt(prefix, prefix + member->node_id + "x", record).ok())) {
        std::abort();
      }
    }
  }
  return 0;
}
