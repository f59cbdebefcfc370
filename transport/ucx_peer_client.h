// The borrower's side of the peer data path over UCX (transport/ucx_peer_server.h): one write or
// read of a lent region's range at a time per call, from any number of threads. A write's bytes
// go from the caller's buffer and a read's come into it with no copy of ours (UCX's rendezvous
// for large ones: RDMA where the NIC has it); a write is done when the lender says its bytes are
// in the region.
//
// A call that runs out of time (no word from the lender within stall_ms, or past stall_ms plus
// its bytes at the floor rate of transport/peer_wire.h) fails with DEADLINE_EXCEEDED; a late
// answer to it is dropped. Where UCX still reads or fills its buffer then, it closes its endpoint,
// which cancels what UCX had in flight there (the other calls on it fail UNAVAILABLE), and returns
// once UCX no longer touches the buffer: a late read never lands in a buffer its caller reused.
// The next call connects afresh.
//
// Locking: mu_ guards the calls in flight (ops_); endpoints belong to the worker's progress
// thread (transport/ucx_worker.h). Callers block on done_ with mu_ released.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "common/status.h"
#include "proto/peer.pb.h"
#include "transport/ucx_worker.h"

namespace tierpool::transport {

// How to reach one lender over UCX, as its peer listener offered it (Info.ucx_open).
struct UcxRoute {
  std::string key;      // the lender (node id and incarnation): one endpoint each
  std::string address;  // its worker's
  std::string token;    // names this borrower there
};

struct UcxCallResult {
  std::uint64_t lend_free = ~0ull;  // what the lender says it has free (~0: no answer)
};

class UcxPeerClient {
 public:
  static Result<std::unique_ptr<UcxPeerClient>> Create();
  ~UcxPeerClient();

  // Writes range.length() bytes of `data` into the range, or reads them into `data`. The
  // lender's refusal comes back as its Status (NOT_FOUND for a region freed there);
  // UNIMPLEMENTED when no UCX transport of this host reaches the lender's.
  Status Call(const UcxRoute& route, std::uint64_t lender_incarnation,
              const wire::peer::RegionRange& range, bool write, std::byte* data,
              std::uint32_t stall_ms, UcxCallResult* result);

  // For tests: the endpoint to `key` is closed as on a timeout.
  void CloseForTest(const std::string& key);

 private:
  struct Op;
  UcxPeerClient() = default;
  static ucs_status_t OnReply(void* arg, const void* header, std::size_t header_length, void* data,
                              std::size_t length, const ucp_am_recv_param_t* param);
  // kUcxAmStarted: a write's bytes are being fetched; the call's first word is in.
  static ucs_status_t OnStarted(void* arg, const void* header, std::size_t header_length,
                                void* data, std::size_t length, const ucp_am_recv_param_t* param);
  // On the progress thread.
  ucp_ep_h Endpoint(const UcxRoute& route, Status* error);
  void Send(const std::shared_ptr<Op>& op, const UcxRoute& route);
  void Close(const std::string& key, const Status& why);
  void Settle(Op* op);

  std::unique_ptr<UcxWorker> worker_;
  std::map<std::string, ucp_ep_h> endpoints_;  // the progress thread's
  // Error-handler arguments, one per endpoint key (kept: UCX may call after a close).
  std::map<std::string, std::unique_ptr<std::pair<UcxPeerClient*, std::string>>> ep_args_;
  std::mutex mu_;
  std::condition_variable done_;
  std::map<std::uint64_t, std::shared_ptr<Op>> ops_;  // guarded by mu_
  std::atomic<std::uint64_t> next_id_{1};
};

}  // namespace tierpool::transport
