// The remote tier: DRAM that peer sidecars lend (store/lender.h), reached over authenticated TCP
// (transport/peer_connection.h). Level 2: dram spills here before nvme.
//
// Memory is granted by each lender in regions (region_bytes at a time, ahead of need, by this
// tier's own thread), and objects' extents are carved out of those regions here, so Allocate
// and Free never touch the network (the store calls them under its lock). Every extent has
// `replicas` copies on different peers, written in parallel; a read takes the first replica
// whose bytes match the checksum, so one peer's death or a corrupted copy loses nothing.
//
// A peer is gone when that is known, not when etcd forgets it: when the membership names it as
// a new incarnation (it restarted), when it left the membership and refuses connections (nothing
// listens there), or when it has not answered for peer_lost_ms. Then its replicas are dropped
// and re-created from the survivors in the background; the tier says "degraded" until they are.
// A peer that left the membership but still answers is kept (etcd restarted empty, or a record
// deleted: the peer and our bytes there are fine). A peer met anew is asked first to free what
// it held of ours before (Info.release_all), and used once it answers.
//
// Room ahead of need yields to need: a lender that could not grant another borrower's ask says
// so (Response.room_wanted), and regions here that hold nothing go back to it; a copy this tier
// finds no room for on a peer is asked for there even when the peer says it has none, so that
// the others hear it.
//
// A cache object (AllocationHint::cache) has one copy: losing it costs a refetch, not data.
//
// An Extent of this tier names a replica set: offset is the set's id (arena_id is 0).
//
// Threads: io_threads workers run reads and writes (blocking on sockets, bounded by
// io_timeout_ms per piece); one maintenance thread asks lenders for regions, probes peers and
// repairs replica sets. Locking: mu_ guards peers, regions and replica sets; no socket I/O
// happens under it. Each peer's connection pool and address have a lock of their own, taken
// after mu_ when both are held; a member's node id and incarnation never change, nor do ours.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "common/byte_rate_limiter.h"
#include "common/clock.h"
#include "common/mutex.h"
#include "tiers/extent_allocator.h"
#include "tiers/tier.h"
#include "transport/peer_auth.h"

namespace tierpool {

namespace transport {
class PeerConnection;
class UcxPeerClient;
struct UcxRoute;
}  // namespace transport
namespace wire::peer {
class Request;
class Response;
class Info;
class RegionRange;
}  // namespace wire::peer

// A peer as the membership knows it.
struct RemoteMember {
  std::string node_id;
  std::uint64_t incarnation = 0;
  std::string address;           // host:port of its peer listener
  std::uint64_t lend_bytes = 0;  // what it lends in all
  bool borrows = true;           // it places copies on peers (--remote-replicas above 0)
};

struct RemoteTierConfig {
  std::uint32_t replicas = 2;                // copies of every extent, on different peers
  std::uint64_t region_bytes = 64ull << 20;  // asked of a lender at a time
  std::uint32_t headroom_regions = 1;        // granted-but-free room kept per peer
  std::uint32_t io_threads = 4;
  std::uint32_t connections_per_peer = 4;  // kept open; more are opened when busy
  // Connecting, and each piece of a transfer as a whole (request, payload and reply): a 16 MiB
  // piece needs 8 MB/s, well below any link between nodes, even shared by the io_threads.
  std::uint32_t io_timeout_ms = 2000;
  std::uint64_t piece_bytes = 16ull << 20;  // one request's payload
  std::uint32_t maintenance_interval_ms = 200;
  // false: no maintenance thread at all, and the owner runs every pass with RunMaintenance (tests
  // that check what a tier looks like between a change and its repair; a membership change would
  // otherwise wake the thread at once).
  bool background_maintenance = true;
  std::uint32_t probe_interval_ms = 1000;  // Info to each peer: room, and liveness
  // Copies rebuilt after a loss (from a surviving replica here, or from another tier's copy by
  // the store) start at most this many bytes a second, so clients' transfers come first
  // (--remote-repair-rate; 0: no bound).
  std::uint64_t repair_bytes_per_sec = 256ull << 20;
  // A peer silent this long is gone: its replicas are rebuilt elsewhere (--remote-peer-lost-ms).
  std::uint32_t peer_lost_ms = 30'000;
  // Move replicas' bytes over UCX (transport/ucx_peer_client.h) with lenders that offer it; the
  // rest, and grants and probes, stay on TCP frames (--peer-transport ucx; auto resolves to it
  // where UCX finds an RDMA device).
  bool ucx = false;
  Status validate() const;
};

// One peer, for `tierpool peers` and stat.
struct RemotePeerInfo {
  RemoteMember member;
  bool responsive = true;           // its last request or probe succeeded
  bool in_membership = true;        // false: it left it, and is kept while it answers
  std::uint64_t lend_free = 0;      // as it last said
  std::uint64_t granted_bytes = 0;  // regions it granted this node
  std::uint64_t used_bytes = 0;     // of those, holding replicas
  std::uint64_t regions = 0;
  std::uint64_t failures = 0;     // requests that failed
  std::string transport = "tcp";  // its data path: "tcp", or "ucx" once it offered one
};

struct RemoteTierCounters {
  std::uint64_t peers_lost = 0;         // known gone: restarted, stopped, or silent too long
  std::uint64_t peers_lost_silent = 0;  // of those, silent for peer_lost_ms
  std::uint64_t replicas_lost = 0;      // with them
  std::uint64_t replicas_repaired = 0;  // re-created on another peer
  std::uint64_t replicas_corrupt = 0;   // dropped: their bytes failed the checksum (then rebuilt)
  std::uint64_t extents_lost = 0;       // every replica gone: reads fail with DATA_LOSS
  std::uint64_t read_failovers = 0;     // a replica failed and another served the read
  std::uint64_t grants = 0;
  std::uint64_t grant_failures = 0;
  // Regions a lender no longer held for us while both of us lived on (its probe's answer): their
  // replicas are dropped (replicas_lost, extents_lost) and repaired from the survivors.
  std::uint64_t regions_lost = 0;
  // Now (not a count of events): written objects with fewer copies than wanted, being rebuilt.
  std::uint64_t under_replicated = 0;
  std::uint64_t repair_bytes = 0;  // bytes of the replicas rebuilt
  // Ranges whose write failed, held until their lender fenced late payloads, and given back.
  std::uint64_t ranges_fenced = 0;
  // Regions that held nothing, given back because their lender said another borrower wanted room.
  std::uint64_t regions_given_back = 0;
  std::uint64_t ucx_bytes_written = 0;  // replicas' bytes moved over UCX
  std::uint64_t ucx_bytes_read = 0;
};

class RemoteTier final : public Tier {
 public:
  RemoteTier(RemoteTierConfig config, transport::PeerAuth auth, transport::PeerIdentity self,
             const Clock* clock = SystemClock::Default());
  ~RemoteTier() override;
  RemoteTier(const RemoteTier&) = delete;
  RemoteTier& operator=(const RemoteTier&) = delete;

  TierKind kind() const override { return TierKind::kRemote; }
  std::uint32_t level() const override { return 2; }
  bool keeps_retained_alone() const override { return config_.replicas >= 2; }
  Result<Extent> Allocate(std::uint64_t size, const AllocationHint& hint) override;
  Status Free(const Extent& extent) override;
  std::byte* HostAddress(const Extent&) override { return nullptr; }
  std::vector<ArenaInfo> Arenas() const override { return {}; }
  TierStats Stats() const override;
  // Object bytes the tier could hold: what the live peers granted and still lend, over the
  // number of replicas.
  std::uint64_t capacity() const override;
  std::uint64_t used_bytes() const override;
  // UNAVAILABLE with fewer usable peers than replicas: answering, and (after Suspect) known to
  // still hold our regions.
  Status CheckWritable() override;
  // Some replica's peer answers (or was not heard failing since it last did).
  bool LikelyReadable(const Extent& extent) const override;
  // Extents written whose every replica went with its peers, since the last call.
  std::vector<LostCopy> TakeLostCopies() override;

  // The cluster's members (this node's record is skipped). A member named as another incarnation
  // than before restarted: its replicas are dropped and repaired from the survivors. One missing
  // is kept while it answers (see above).
  void SetMembers(const std::vector<RemoteMember>& members);
  // This node's cluster lease lapsed (it was frozen, or cut off from etcd): a lender that did not
  // hear from it meanwhile may have freed its regions. Each peer is used again once a probe has
  // checked our regions there; those freed are dropped (regions_lost) and repaired.
  void Suspect();
  std::vector<RemotePeerInfo> Peers() const;
  RemoteTierCounters counters() const;
  // Runs one maintenance pass now (grants, probes, repairs): tests call it instead of waiting.
  void RunMaintenance();
  // For tests: where each replica of a set lives (node id, region, offset in the region).
  struct ReplicaLocation {
    std::string node_id;
    std::uint64_t region = 0;
    std::uint64_t offset = 0;
  };
  std::vector<ReplicaLocation> LocateForTest(const Extent& extent) const;

 protected:
  void ReadImpl(const Extent& src, const RecordInfo& info, std::byte* dst,
                IoCompletion done) override;
  void WriteImpl(const Extent& dst, const RecordInfo& info, const std::byte* src,
                 IoCompletion done) override;

 private:
  struct Peer;
  struct Region {
    std::uint64_t bytes = 0;
    ExtentAllocator allocator;
    // Ranges whose write failed, held back from the allocator until the lender has fenced the
    // writes numbered below `second` (a late payload would land on whatever went there next).
    std::vector<std::pair<AllocatedRange, std::uint64_t>> fenced;
  };
  struct Replica {
    std::shared_ptr<Peer> peer;
    std::uint64_t region = 0;
    AllocatedRange range;
    std::uint64_t fence_below = 0;  // a write to it failed: its lender must fence below this
    // The same range of the same peer (a copy of the Replica taken for I/O names its original).
    bool Names(const Replica& other) const {
      return peer == other.peer && region == other.region && range.offset == other.range.offset;
    }
  };
  struct ReplicaSet {
    std::uint64_t size = 0;    // bytes asked for
    std::uint32_t wanted = 0;  // copies: config_.replicas, or 1 for a cache object
    std::vector<Replica> replicas;
    RecordInfo info;  // set once written: what repairs check against
    bool written = false;
    bool repairing = false;
  };

  // One piece-by-piece transfer of a replica's bytes; no lock held.
  Status Transfer(Peer& peer, std::uint64_t region, std::uint64_t offset, std::uint64_t length,
                  bool write, std::byte* data);
  // One piece of a Transfer: over TCP frames (Exchange), or over the peer's UCX data path.
  Status MoveOverTcp(Peer& peer, const wire::peer::RegionRange& range, bool write, std::byte* data);
  Status MoveOverUcx(Peer& peer, const transport::UcxRoute& route,
                     const wire::peer::RegionRange& range, bool write, std::byte* data);
  // A lender answered, whatever it said: it lives. Notes its room (at most what it lends, which
  // this returns) and, when it said a region of ours is gone, brings the next probe forward.
  std::uint64_t HeardAnswer(Peer& peer, std::uint64_t lend_free, bool region_missing);
  // One request to the peer on a pooled connection (opened when none is idle); the reply's
  // room figures are kept. A broken connection is closed, and the peer marked unresponsive.
  Status Exchange(Peer& peer, wire::peer::Request* request, const void* payload,
                  std::uint64_t payload_length, wire::peer::Response* response,
                  void* read_dst = nullptr, std::uint64_t read_capacity = 0);
  void Post(std::function<void()> job);
  void WorkerLoop();
  void MaintenanceLoop();
  void WakeMaintenance();
  // Regions ahead of need from each peer, and room asked for where a copy found none; regions
  // that hold nothing go back to a peer that says another borrower wants room.
  void GrantRegions();
  // Takes p's regions that hold nothing out of our books, for GrantRegions to release.
  void GiveBackIdleRegionsLocked(
      const std::shared_ptr<Peer>& p,
      std::vector<std::pair<std::shared_ptr<Peer>, std::uint64_t>>* released) REQUIRES(mu_);
  void ProbePeers();
  // Drops the peers known gone (see the top of this file).
  void DropLostPeersLocked(std::uint64_t now_us) REQUIRES(mu_);
  // Answering, checked since a lapse of our lease, and not just heard failing.
  bool UsableLocked(const Peer& p) const REQUIRES(mu_);
  // An Info request for p, asking after the next kMaxInfoRegions of our regions there (or, for a
  // peer just met, asking it to free what it held of ours before).
  wire::peer::Request ProbeLocked(Peer& p) REQUIRES(mu_);
  // Drops the regions the peer's Info reply says it no longer holds for us, with their replicas.
  void DropMissingRegionsLocked(const std::shared_ptr<Peer>& p,
                                const wire::peer::Response& response) REQUIRES(mu_);
  void RepairSets();
  // Carves `size` bytes out of peer's regions; false when none has room.
  bool CarveLocked(Peer& peer, std::uint64_t size, Replica* out) REQUIRES(mu_);
  // Gives the replica's range back (or, after a failed write, holds it for a fence).
  void ReleaseReplicaLocked(const Replica& r) REQUIRES(mu_);
  // A replica whose bytes failed their checksum: dropped (and counted), so that a repair makes
  // a good one from another replica, or the store learns the copy is lost.
  void DropCorruptReplicaLocked(std::uint64_t set_id, const Replica& bad) REQUIRES(mu_);
  // A write to this replica of set_id failed: its range is fenced on release.
  void NoteFailedWriteLocked(std::uint64_t set_id, const Replica& failed) REQUIRES(mu_);
  // The set's last replica went: counted, and reported to the store (TakeLostCopies).
  void SetEmptiedLocked(std::uint64_t set_id, const ReplicaSet& set) REQUIRES(mu_);
  // The ranges a probe's answer says are fenced go back to their regions' allocators.
  void ReleaseFencedLocked(Peer& p, const wire::peer::Info& asked,
                           const wire::peer::Response& response) REQUIRES(mu_);
  void DropPeerLocked(const std::shared_ptr<Peer>& peer) REQUIRES(mu_);
  // Removes every replica for which gone() holds, counting what is lost with it.
  void DropReplicasLocked(const std::function<bool(const Replica&)>& gone) REQUIRES(mu_);
  std::uint64_t FreeGrantedLocked(const Peer& peer) const REQUIRES(mu_);
  std::uint64_t CapacityLocked() const REQUIRES(mu_);
  // Sets with fewer copies than wanted (the tier's "degraded", and the counter).
  std::uint64_t UnderReplicatedLocked() const REQUIRES(mu_);

  const RemoteTierConfig config_;
  const transport::PeerAuth auth_;
  std::unique_ptr<transport::UcxPeerClient> ucx_;  // with config_.ucx
  const Clock* clock_;

  const transport::PeerIdentity self_;  // this process's life: never changes
  mutable Mutex mu_;
  std::map<std::string, std::shared_ptr<Peer>> peers_ GUARDED_BY(mu_);
  std::unordered_map<std::uint64_t, ReplicaSet> sets_ GUARDED_BY(mu_);
  std::uint64_t next_set_ GUARDED_BY(mu_) = 1;
  std::uint64_t used_ GUARDED_BY(mu_) = 0;  // sum of set sizes
  std::uint64_t peak_used_ GUARDED_BY(mu_) = 0;
  // Sets the last repair pass found no peer with room for (the tier's state says so).
  std::uint64_t repairs_without_room_ GUARDED_BY(mu_) = 0;
  std::uint64_t wanted_region_ GUARDED_BY(mu_) = 0;  // a failed Allocate's size, for the next grant
  RemoteTierCounters counters_ GUARDED_BY(mu_);
  ByteRateLimiter repair_limit_ GUARDED_BY(mu_);  // repairs here and the store's rebuilds
  std::vector<LostCopy> lost_ GUARDED_BY(mu_);    // for TakeLostCopies
  // Numbers every write request (RegionRange.sequence), so that a lender can fence late ones.
  std::atomic<std::uint64_t> next_write_{1};
  std::atomic<std::uint64_t> ucx_bytes_written_{0}, ucx_bytes_read_{0};
  std::uint64_t allocations_ GUARDED_BY(mu_) = 0;
  std::uint64_t frees_ GUARDED_BY(mu_) = 0;
  std::uint64_t failed_allocations_ GUARDED_BY(mu_) = 0;
  std::uint64_t checksum_failures_ GUARDED_BY(mu_) = 0;
  std::uint64_t read_errors_ GUARDED_BY(mu_) = 0;
  std::uint64_t write_errors_ GUARDED_BY(mu_) = 0;

  Mutex jobs_mu_;
  std::condition_variable jobs_cv_;
  std::deque<std::function<void()>> jobs_ GUARDED_BY(jobs_mu_);
  bool stopping_ GUARDED_BY(jobs_mu_) = false;
  std::condition_variable maintenance_cv_;  // with jobs_mu_
  bool maintenance_wanted_ GUARDED_BY(jobs_mu_) = false;
  std::vector<std::thread> workers_;
  std::thread maintenance_;
  Mutex maintenance_pass_mu_;  // one pass at a time (the thread, or RunMaintenance)
};

}  // namespace tierpool
