// The lender's side of the peer data path over UCX: writes and reads of lent regions arrive as
// active messages (transport/ucx_wire.h) and are checked by the same PeerHandler as on TCP
// (BeginTransfer: the region is the asker's, in range, not fenced), so a request for a region
// freed since, or another's, is refused here as there. A write's payload goes straight into the
// region (UCX's rendezvous: RDMA on a NIC that has it), a read's comes straight from it.
//
// Who asks is known by a token: PeerServer hands a borrower one (Open) over the authenticated
// TCP link, with this worker's address; a request with any other token is refused. Nothing of
// the lent memory is exposed to one-sided access: no region's remote key leaves this process, so
// a stale key cannot exist (docs/protocol.md, "Peer data over UCX").
//
// Threads: the UCX worker's progress thread runs every request (it never blocks: the handler's
// checks take its lock only briefly). Locking: mu_ guards the tokens; alive_->mu the server's
// address for fences; counters are atomics; moving_ is the progress thread's alone.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "transport/peer_server.h"
#include "transport/ucx_worker.h"

namespace tierpool::transport {

struct UcxOffer {
  std::string address;  // the worker's, for ucp_ep_create
  std::string token;    // kUcxTokenBytes, names the asker in every request
};

struct UcxPeerServerCounters {
  std::uint64_t requests = 0;
  std::uint64_t refused = 0;  // bad token, stale region, over the limit, malformed
  std::uint64_t bytes_in = 0;
  std::uint64_t bytes_out = 0;
};

class UcxPeerServer {
 public:
  // `incarnation` says the lender's incarnation now (requests naming another are refused).
  static Result<std::unique_ptr<UcxPeerServer>> Create(std::uint64_t max_payload_bytes,
                                                       PeerHandler* handler,
                                                       std::function<std::uint64_t()> incarnation);
  ~UcxPeerServer();

  // The address and the token for an authenticated peer; the same token while it lives, and a
  // new one for its next incarnation (the earlier one's stops working).
  UcxOffer Open(const PeerIdentity& peer);
  UcxPeerServerCounters counters() const;
  // For tests: the progress thread sleeps `ms` (a lender that stalls with requests in flight).
  void StallForTest(std::uint32_t ms);

 private:
  struct Transfer;
  // Lets a fence's stop (PeerHandler::BeginTransfer) reach this server while it lives: the lender
  // may hold a stop past it.
  struct Alive {
    std::mutex mu;
    UcxPeerServer* server = nullptr;  // guarded by mu
  };
  UcxPeerServer(std::uint64_t max_payload_bytes, PeerHandler* handler,
                std::function<std::uint64_t()> incarnation)
      : max_payload_bytes_(max_payload_bytes),
        handler_(handler),
        incarnation_(std::move(incarnation)) {}
  static ucs_status_t OnWrite(void* arg, const void* header, std::size_t header_length, void* data,
                              std::size_t length, const ucp_am_recv_param_t* param);
  static ucs_status_t OnRead(void* arg, const void* header, std::size_t header_length, void* data,
                             std::size_t length, const ucp_am_recv_param_t* param);
  ucs_status_t Serve(bool write, const void* header, std::size_t header_length, void* data,
                     std::size_t length, const ucp_am_recv_param_t* param);
  // Answers a request; a read's bytes go with it (the transfer's hold kept until they are sent).
  void Reply(ucp_ep_h ep, std::uint64_t id, const PeerIdentity* peer, const Status& status,
             std::unique_ptr<Transfer> read = nullptr);
  bool Lookup(const std::uint8_t* token, PeerIdentity* peer) const;
  // Tells the borrower that a write's bytes are being fetched (kUcxAmStarted).
  void Notify(ucp_ep_h ep, std::uint64_t id);
  // A transfer's receive or send canceled (a fence, or its region released), if UCX is still
  // moving its bytes. Progress thread.
  void Cancel(std::uint64_t transfer);

  const std::uint64_t max_payload_bytes_;
  PeerHandler* const handler_;
  const std::function<std::uint64_t()> incarnation_;
  std::unique_ptr<UcxWorker> worker_;
  std::shared_ptr<Alive> alive_ = std::make_shared<Alive>();
  // The progress thread's: transfers whose bytes UCX is moving (a write's receive, a read's
  // send), by transfer number.
  std::map<std::uint64_t, Transfer*> moving_;
  std::uint64_t next_transfer_ = 1;
  mutable std::mutex mu_;
  std::map<std::string, PeerIdentity> by_token_;  // guarded by mu_
  std::map<std::string, std::string> by_node_;    // guarded by mu_: node id -> its token
  std::atomic<std::uint64_t> requests_{0}, refused_{0}, bytes_in_{0}, bytes_out_{0};
};

}  // namespace tierpool::transport
