// Maps wire requests onto the ObjectStore: the server's RequestHandler.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <string>

#include "common/latency_histogram.h"
#include "store/namespace_policy.h"
#include "store/object_store.h"
#include "store/plan_binding.h"
#include "transport/peer_auth.h"
#include "transport/unix_server.h"

namespace tierpool {

class GetKeys;  // store/packed_items.h

class Cluster;

struct ServiceConfig {
  std::uint32_t max_frame_bytes = transport::kDefaultMaxFrameBytes;
  // Puts and AUTO gets up to this size carry their bytes in the frame; larger ones go through
  // the shared arena. 8 KiB: from 16-32 KiB up, bytes through the socket cost more than the
  // arena path's round trips (docs/benchmarks/redis.md, "The local path beside Redis").
  std::uint64_t inline_threshold_bytes = 8 * 1024;
  std::uint32_t max_batch_items = 4096;
  Status validate() const;
};

class StoreService final : public transport::RequestHandler {
 public:
  StoreService(ServiceConfig config, ObjectStore* store);
  bool Handle(std::uint64_t session_id, const transport::PeerCredentials& peer,
              const wire::Request& request, wire::Response* response,
              std::vector<int>* fds) override;
  void OnDisconnect(std::uint64_t session_id) override;
  // Puts that would wait for room, promotes. Gets have no probe: a pin that must wait refuses on
  // the I/O thread (NoWaitScope) and a worker carries the batch on.
  bool MayBlock(std::uint64_t session_id, const wire::Request& request) override;
  bool Holds(std::uint64_t session_id) override;
  // Who may use which namespace; without it, every connection may use every namespace.
  void set_policy(const NamespacePolicy* policy) { policy_ = policy; }
  // Lets stat report transport counters too.
  void set_transport(const transport::UnixServer* server) { transport_ = server; }
  // Plans (RegisterPlan, Progress, UnregisterPlan); without it those get UNIMPLEMENTED.
  void set_plans(PlanRegistry* plans) { plans_ = plans; }
  // --persist: a request that removes a name of the last good snapshot is answered once its
  // tombstone is durable, and runs on a worker so that the I/O thread never waits for a sync.
  void set_persist_journal(PersistJournal* journal) { journal_ = journal; }
  // Lets stat report the cluster: members, what is lent and borrowed.
  void set_cluster(const Cluster* cluster) { cluster_ = cluster; }
  // What `tierpool stat` shows; /metrics renders the same reply. Safe from any thread.
  void Stat(wire::StatReply* reply);

 private:
  // What Handle does; Handle times it for the latency histograms. Checks what every request
  // must pass, then hands it to its message's handler.
  bool HandleRequest(std::uint64_t session_id, const transport::PeerCredentials& peer,
                     const wire::Request& request, wire::Response* response, std::vector<int>* fds);
  // One request, as its handler sees it.
  struct Call {
    std::uint64_t session;
    const transport::PeerCredentials& peer;
    const wire::Request& req;
    wire::Response* resp;
    std::vector<int>* fds;  // descriptors sent with the reply
  };
  // One handler per message; each returns whether there is a reply (false: one-way).
  bool OnHello(const Call& call);
  bool OnReserve(const Call& call);
  bool OnCommit(const Call& call);
  bool OnAbort(const Call& call);
  bool OnPutInline(const Call& call);
  bool OnGet(const Call& call);
  bool OnRelease(const Call& call);
  bool OnDel(const Call& call);
  bool OnList(const Call& call);
  bool OnStat(const Call& call);
  bool OnPromote(const Call& call);
  bool OnRegisterPlan(const Call& call);
  bool OnProgress(const Call& call);
  bool OnUnregisterPlan(const Call& call);
  void RecordLatency(const wire::Request& request, const wire::Response& response,
                     std::uint64_t took_us);
  // Stat's parts (store/service_stat.cc): the tiers, then named counters through `add`.
  using CounterSink = std::function<void(const std::string&, std::uint64_t)>;
  void AddTierStats(const StoreStats& s, wire::StatReply* reply) const;
  void AddStoreCounters(const StoreStats& s, const CounterSink& add) const;
  void AddTransportCounters(const CounterSink& add) const;
  void AddLinkCounters(const StoreStats& s, const CounterSink& add) const;
  void AddNamespaceCounters(const CounterSink& add) const;
  void AddJobs(const CounterSink& add, wire::StatReply* reply) const;
  void AddLatencies(const StoreStats& s, wire::StatReply* reply) const;
  // keys: req's, plain and packed (store/packed_items.h).
  void HandleGet(std::uint64_t session, const transport::PeerCredentials& peer,
                 const wire::GetRequest& req, const GetKeys& keys, wire::GetReply* reply);
  // The get's items from `answered` on that the shared path can pin, pinned at once
  // (ObjectStore::PinAllShared); (*ahead_at)[i]: item i's entry in *ahead, or -1.
  void PinAhead(std::uint64_t session, const transport::PeerCredentials& peer, const GetKeys& keys,
                int answered, const PinOptions& options,
                std::vector<std::optional<Result<PinnedObject>>>* ahead,
                std::vector<int>* ahead_at);
  // Takes back what was done ahead for items no answer took (a worker does them again): their
  // pins let go, their lookups not counted.
  void ReleaseAhead(std::uint64_t session,
                    const std::vector<std::optional<Result<PinnedObject>>>& ahead);
  // Whether the peer is sent (and so may use) the arenas of a pool, of a namespace's pool.
  bool MapsPool(const transport::PeerCredentials& peer, std::uint32_t pool) const;
  bool MapsNamespace(const transport::PeerCredentials& peer, const std::string& ns) const;
  static Status NotMapped(const std::string& ns);
  Result<PutSpec> CheckedSpec(const transport::PeerCredentials& peer, const wire::PutSpec& w) const;
  // PERMISSION_DENIED when the request names a namespace the connection's user may not use.
  Status CheckNamespaces(const transport::PeerCredentials& peer, const wire::Request& request);

  ServiceConfig config_;
  ObjectStore* store_;
  const transport::UnixServer* transport_ = nullptr;
  PlanRegistry* plans_ = nullptr;
  PersistJournal* journal_ = nullptr;
  // Whether req may remove a name the journal watches (it then runs on a worker).
  bool MayRemoveWatched(const wire::Request& req);
  std::atomic<const Cluster*> cluster_{nullptr};
  const NamespacePolicy* policy_ = nullptr;
  std::chrono::steady_clock::time_point started_ = std::chrono::steady_clock::now();
  // This process among the daemons that ever served the socket (HelloReply.incarnation).
  const std::uint64_t incarnation_ = transport::RandomIncarnation();
  // Request handling time by operation and size class (common/latency_histogram.h).
  enum LatencyOp { kPutOp, kGetOp, kReserveOp, kCommitOp, kLatencyOps };
  std::array<std::array<LatencyHistogram, kSizeClasses>, kLatencyOps> latency_;
};

}  // namespace tierpool
