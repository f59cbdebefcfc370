// A sidecar's part in a cluster: what it lends (store/lender.h) behind the peer listener
// (transport/peer_server.h), what it borrows (the remote tier, tiers/remote_tier.h), and its
// membership in etcd (store/membership.h), wired together: the membership's view of the others
// goes to the remote tier (peers) and to the lender (borrowers), and a lapsed lease makes the
// remote tier check what its peers still hold before using them again (the node registers again
// under the same incarnation).
//
// Thread safety: Create, TakeRemoteTier, Start and Stop from one thread; the rest from any.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "proto/tierpool.pb.h"
#include "store/lender.h"
#include "store/membership.h"
#include "tiers/remote_tier.h"
#include "transport/peer_server.h"

namespace tierpool {

struct ClusterConfig {
  std::string etcd;  // http://host:port; empty: not in a cluster
  std::string cluster = "default";
  std::string node_id;         // default: the host name
  std::string peer_listen;     // host:port for peers
  std::string peer_advertise;  // what peers connect to (default: peer_listen)
  std::string peer_auth;       // the shared-secret file
  std::uint64_t lend_bytes = 0;
  std::uint32_t member_ttl_s = 5;
  RemoteTierConfig remote;  // remote.replicas 0: borrow nothing
  LenderConfig lender;
  transport::PeerServerConfig peer_server;
  bool enabled() const { return !etcd.empty(); }
  Status validate() const;
};

class Cluster {
 public:
  static Result<std::unique_ptr<Cluster>> Create(ClusterConfig config);
  ~Cluster();
  // The remote tier for the store (null when this node borrows nothing); the cluster keeps a
  // pointer to it, so the store must outlive Stop.
  std::unique_ptr<RemoteTier> TakeRemoteTier() { return std::move(remote_owned_); }
  // Listens for peers, then joins the membership.
  Status Start();
  // Leaves the membership (revoking the lease) and closes the peer listener.
  void Stop();

  const ClusterConfig& config() const { return config_; }
  std::uint64_t incarnation() const;
  std::uint16_t peer_port() const { return server_ ? server_->port() : 0; }
  std::vector<RemoteMember> Members() const;
  const RemoteTier* remote() const { return remote_; }
  const Lender* lender() const { return lender_.get(); }
  // Every counter of the cluster's parts (lender, peer listener, remote tier), by name.
  void VisitCounters(const std::function<void(const std::string&, std::uint64_t)>& visit) const;
  // Members as `tierpool peers` lists them (this node included).
  void FillMembers(wire::StatReply* reply) const;

 private:
  explicit Cluster(ClusterConfig config) : config_(std::move(config)) {}
  MembershipConfig MembershipConfigFor(const std::string& advertise) const;
  MembershipCallbacks Callbacks();
  ClusterConfig config_;
  std::unique_ptr<Lender> lender_;
  std::unique_ptr<transport::PeerServer> server_;
  std::unique_ptr<RemoteTier> remote_owned_;
  RemoteTier* remote_ = nullptr;
  std::unique_ptr<Membership> membership_;
  // Handles the peer protocol with nothing to lend: every grant is refused.
  std::unique_ptr<transport::PeerHandler> no_lending_;
};

}  // namespace tierpool
