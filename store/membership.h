// Cluster membership in etcd: this sidecar registers under /tierpool/<cluster>/members/<node id>
// with a lease that a thread of its own keeps alive (doing nothing else, so that a slow store
// never costs the node its membership), and a second thread watches the prefix for the others.
// The record holds the node's incarnation (fresh per registration), its peer address and what
// it lends; no per-object metadata goes into etcd.
//
// The record is for finding peers, not for judging them dead: a node keeps one incarnation for
// its process's life, and peers judge it gone by a restart (a new incarnation) or its silence on
// the peer link (tiers/remote_tier.h, store/lender.h). So a lease that etcd says has lapsed (the
// process was frozen, or cut off from etcd alone, or etcd restarted empty) costs no data: `lost`
// runs (check what peers still hold before using them again) and the node registers again under
// the same incarnation. A record deleted while the lease lives is written again. While etcd
// itself does not answer, nothing changes: a restarted etcd keeps its leases.
//
// The member list is handed on at every change and again after every lease renewal.
//
// Thread safety: callbacks run on the membership's threads, never two at once; the other
// methods may be called from any thread.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "store/etcd_client.h"
#include "tiers/remote_tier.h"

namespace tierpool {

struct MembershipConfig {
  std::string etcd;  // http://host:port
  std::string cluster = "default";
  std::string node_id;
  std::string peer_address;  // what peers connect to
  std::uint64_t lend_bytes = 0;
  bool borrows = true;      // lenders keep a part of what they lend for borrowing members only
  std::uint32_t ttl_s = 5;  // the lease; a dead node is noticed within about this long
  std::uint32_t etcd_timeout_ms = 2000;
  // The incarnation (0: a random one), kept across registrations for the process's life.
  std::uint64_t incarnation = 0;
  Status validate() const;
};

struct MembershipCallbacks {
  // The members now, this node included.
  std::function<void(const std::vector<RemoteMember>&)> members;
  // The lease lapsed (registering again follows).
  std::function<void()> lost;
};

class Membership {
 public:
  // INVALID_ARGUMENT for a config that does not validate (an --etcd that is not a URL).
  static Result<std::unique_ptr<Membership>> Create(MembershipConfig config,
                                                    MembershipCallbacks callbacks);
  ~Membership();
  // Registers (an error when etcd does not answer: a node told to join a cluster says so at
  // start), then starts the keep-alive and watch threads.
  Status Start();
  // Stops the threads and revokes the lease, so the others see this node leave at once.
  void Stop();
  std::vector<RemoteMember> Members() const;
  std::uint64_t incarnation() const;
  std::string prefix() const { return "/tierpool/" + config_.cluster + "/members/"; }

  // The record's JSON, and back (INVALID_ARGUMENT when malformed).
  static std::string Encode(const RemoteMember& m);
  static Result<RemoteMember> Decode(const std::string& value);
  // The node a key under `prefix` names (nothing for a key outside it, or the prefix alone).
  static std::optional<std::string> NodeOfKey(const std::string& prefix, const std::string& key);
  // A record read under `key`: decoded, and taken only as the record of the node the key names
  // under `prefix` (a record cannot speak for another node).
  static Result<RemoteMember> DecodeAt(const std::string& prefix, const std::string& key,
                                       const std::string& value);

 private:
  Membership(MembershipConfig config, MembershipCallbacks callbacks, EtcdClient etcd);
  Status Register(std::uint64_t incarnation);
  RemoteMember Self(std::uint64_t incarnation) const;
  void KeepAliveLoop();
  void WatchLoop();
  void Publish();  // calls callbacks_.members with the current map; requires callback_mu_

  const MembershipConfig config_;
  const MembershipCallbacks callbacks_;
  EtcdClient etcd_;        // for the keep-alive thread and registration
  EtcdClient watch_etcd_;  // the watch's own (CancelWatch ends it)
  mutable std::mutex mu_;
  std::condition_variable wake_;
  bool stopping_ = false;                        // guarded by mu_
  std::int64_t lease_ = 0;                       // guarded by mu_
  std::uint64_t incarnation_ = 0;                // guarded by mu_
  std::map<std::string, RemoteMember> members_;  // guarded by mu_
  std::mutex callback_mu_;                       // callbacks one at a time
  std::thread keepalive_;
  std::thread watch_;
};

}  // namespace tierpool
