// One UCX context and worker, driven by a thread of its own: the only thread that calls into
// UCX for it. Others hand it work with Post. The data path of the remote tier over UCX
// (transport/ucx_peer_server.h, transport/ucx_peer_client.h) is built on it; docs/protocol.md,
// "Peer data over UCX".
//
// UCX chooses the transport (UCX_TLS and the other UCX_* variables are read, as every UCX program
// does): RDMA verbs where a NIC has them, TCP and shared memory everywhere.
//
// Locking: mu_ guards the queue of posted tasks; the worker and everything reached from it belong
// to the progress thread.
#pragma once

#include <ucp/api/ucp.h>

#include <atomic>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/status.h"

namespace tierpool::transport {

struct UcxAmHandler {
  unsigned id = 0;
  ucp_am_recv_callback_t callback = nullptr;
  void* arg = nullptr;
};

class UcxWorker {
 public:
  // Starts the progress thread with these active-message handlers registered.
  static Result<std::unique_ptr<UcxWorker>> Create(const std::string& name,
                                                   const std::vector<UcxAmHandler>& handlers);
  // Runs what was posted, then stops the thread and destroys the worker: the owner closes its
  // endpoints first (on the thread, with Post).
  ~UcxWorker();
  UcxWorker(const UcxWorker&) = delete;
  UcxWorker& operator=(const UcxWorker&) = delete;

  // Runs `task` on the progress thread, soon.
  void Post(std::function<void()> task);
  // For the progress thread alone (tasks and callbacks).
  ucp_worker_h worker() const { return worker_; }
  // The worker's address, for a peer to reach it (ucp_ep_create).
  const std::string& address() const { return address_; }

 private:
  UcxWorker() = default;
  void Loop();
  bool RunPosted();

  ucp_context_h context_ = nullptr;
  ucp_worker_h worker_ = nullptr;
  int event_fd_ = -1;  // the worker's (ucp_worker_get_efd); -1: poll without sleeping long
  std::string address_;
  std::thread thread_;
  std::atomic<bool> stopping_{false};
  std::mutex mu_;
  std::deque<std::function<void()>> posted_;  // guarded by mu_
};

// The names of the RDMA-capable transports UCX finds on this host (rc, dc, ud over verbs), for
// --peer-transport auto.
std::vector<std::string> UcxRdmaTransports();

// A UCX status as ours.
Status FromUcs(ucs_status_t status, const std::string& what);

}  // namespace tierpool::transport
