// The lender: the memory this sidecar lends to its peers (--lend), served over the peer
// listener (transport/peer_server.h). A borrower is granted regions of it and writes and reads
// bytes in them; it never maps them. Lent memory is an arena of its own, beside the dram tier's
// (the node gives dram + lend to tierpool).
//
// Regions are owned by the borrower incarnation that was granted them and carry an id that is
// never reused while the lender runs (and requests name the lender's incarnation), so a request
// for a region freed since, or granted in an earlier life, is refused instead of served with
// someone else's bytes. A region being read or written is freed only once that transfer ends.
// What a borrower that left held is freed once it has been neither a member nor heard on the
// peer link for a grace period: etcd losing its record (restarted empty, a key deleted, the
// borrower cut from etcd alone) loses nobody's bytes while the borrower still talks to us. A
// borrower that meets this lender anew asks it to free what its incarnation held here before
// (Info.release_all): it dropped this lender as gone meanwhile, and would never release those.
//
// Members share what is lent: reserved_share of it is split evenly among the live members (the
// borrowers the membership names that have proved on the peer link that they hold the cluster's
// secret, or were listed only moments ago), and each member's part of it that it has not taken
// is kept from everyone else. The rest goes to whoever asks first. So a member that asks for
// everything (the cluster's secret is the trust boundary, but a buggy or greedy member holds it
// too) leaves each other member at least its part, and a node alone with its lender may take
// everything. A peer that is not a member has no part. Every reply tells the asker the room it may
// still ask for (FillRoom), not the lender's free bytes.
//
// Borrowers take room ahead of need (a region kept in reserve), so whoever asks first may hold
// room it does not use while another borrower has copies to place and none is left. A grant this
// lender cannot meet is told, for room_wanted_ms, to every other borrower in its replies
// (Response.room_wanted): each gives back the regions it uses nothing of, and keeps none in
// reserve meanwhile.
//
// A write's payload goes straight into its region, so one its borrower gave up on (a stalled
// link) could land after the borrower put another object there; the borrower fences the region
// first (Info.fences): writes numbered below the fence are refused, and those still arriving
// are cut off (their connections shut down, their UCX receives canceled) before the fence is
// answered.
//
// Locking: mu_ guards the regions and the allocator (clang checks it: GUARDED_BY, REQUIRES);
// bytes are copied (by the peer server's connection threads) with it released, under a transfer
// hold. A fence waits on transfer_ended_ (with mu_ released) for the writes it cut off to let go.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "common/clock.h"
#include "common/mutex.h"
#include "tiers/extent_allocator.h"
#include "tiers/memfd_arena.h"
#include "transport/peer_server.h"

namespace tierpool {

struct LenderConfig {
  std::uint64_t lend_bytes = 0;
  std::uint64_t max_grant_bytes = 1ull << 30;  // one region at most
  // How long a borrower's incarnation must be both missing from the membership and silent on
  // the peer link before its regions are freed.
  std::uint32_t borrower_grace_ms = 30'000;
  bool populate = false;  // fault the lent pages in at start
  // The part of lend_bytes split evenly among the live members and kept for each until it takes
  // its part (0: first come, first served; 1: even parts and nothing more while others live).
  double reserved_share = 0.5;
  // Grant nothing until the membership has been heard once (SetLiveBorrowers): before that no
  // part could be kept for anyone, and a member asking first could take everything for good.
  // tierpoold sets it; a lender outside a cluster (tests, benchmarks) need not.
  bool grants_wait_for_members = false;
  // A member's part is kept for it this long after it is first listed; after that, only once it
  // has spoken on the peer link (proved it holds the secret): a record anyone wrote into etcd
  // keeps nothing from anyone for long.
  std::uint32_t share_probation_ms = 10'000;
  // How long an ask for room that was refused is told to the other borrowers (longer than their
  // probe interval, so each hears it).
  std::uint32_t room_wanted_ms = 5'000;
  Status validate() const;
};

struct LenderStats {
  std::uint64_t capacity = 0;
  std::uint64_t granted_bytes = 0;
  std::uint64_t regions = 0;
  std::uint64_t borrowers = 0;          // incarnations holding regions
  std::uint64_t stale_refusals = 0;     // requests naming a region that is gone or not theirs
  std::uint64_t regions_reclaimed = 0;  // freed because their borrower left
  std::uint64_t regions_adopted = 0;    // taken over by their borrower's next incarnation
  std::uint64_t regions_released_unknown = 0;  // freed at a borrower's word (Info.release_all)
  std::uint64_t share_refusals = 0;            // grants refused for room kept for other members
  // Grants refused for want of room (share refusals among them): room_wanted is said meanwhile.
  std::uint64_t unmet_grants = 0;
  std::uint64_t fenced_writes = 0;      // writes refused or cut off by their borrower's fence
  std::uint64_t borrowing_members = 0;  // live members reserved_share is split among
};

class Lender final : public transport::PeerHandler {
 public:
  static Result<std::unique_ptr<Lender>> Create(const LenderConfig& config,
                                                const Clock* clock = SystemClock::Default());

  void Handle(const transport::PeerIdentity& peer, const wire::peer::Request& request,
              wire::peer::Response* response) override;
  Result<transport::PeerTransfer> BeginTransfer(const transport::PeerIdentity& peer,
                                                const wire::peer::RegionRange& range, bool write,
                                                transport::TransferStop stop) override;
  void FillRoom(const transport::PeerIdentity& peer, wire::peer::Response* response) override;

  // The borrowers the membership knows now (node id -> incarnation; not this node), at every
  // change and after every lease renewal. Regions of incarnations missing from it, and not heard
  // on the peer link, for longer than borrower_grace_ms are freed; these members, once heard,
  // are the ones reserved_share is split among.
  void SetLiveBorrowers(const std::map<std::string, std::uint64_t>& live);
  // For tests: everything lent is freed behind its borrowers' backs.
  void DropAllForTest();
  LenderStats stats() const;
  // For tests: the bytes of a region (to corrupt them on purpose).
  std::byte* RegionBytesForTest(std::uint64_t region);
  // For tests: the bytes counted against the nodes that hold them (equal to what the allocator
  // has given out, regions being freed included).
  std::uint64_t HeldBytesForTest() const;

 private:
  // A transfer in flight: a write's number (RegionRange.sequence), and how to stop it (a fence
  // stops the writes below it; a released region stops every transfer on it).
  struct InFlight {
    bool write = false;
    std::uint64_t sequence = 0;
    transport::TransferStop stop;
  };
  struct Region {
    std::string node_id;
    std::uint64_t incarnation = 0;
    AllocatedRange range;
    bool released = false;    // freed once no transfer is in flight
    std::uint64_t fence = 0;  // writes numbered below it are refused (Info.fences)
    std::map<std::uint64_t, InFlight> in_flight;  // by transfer id
  };
  Lender(LenderConfig config, std::unique_ptr<MemfdArena> arena, const Clock* clock);
  void EndTransfer(std::uint64_t id, std::uint64_t transfer) EXCLUDES(mu_);
  // Info.fences: raises each region's fence, stops the writes below it still arriving, and waits
  // (a second at most) for them to end; lists in the response the regions done.
  void FenceLocked(UniqueMutexLock& lock, const transport::PeerIdentity& peer,
                   const wire::peer::Info& info, wire::peer::Response* response) REQUIRES(mu_);
  void ReleaseLocked(std::unordered_map<std::uint64_t, Region>::iterator it) REQUIRES(mu_);
  // Every region one borrower incarnation holds; returns how many.
  std::uint64_t ReleaseHolderLocked(const std::string& node, std::uint64_t incarnation)
      REQUIRES(mu_);
  // Free bytes that `node` may ask for: what is free, less what other members' parts keep.
  std::uint64_t RoomForLocked(const std::string& node) const REQUIRES(mu_);
  // Whether a member has a part: it has spoken on the peer link as that incarnation, or was
  // listed less than share_probation_ms ago.
  bool SharesLocked(const std::string& member, std::uint64_t incarnation) const REQUIRES(mu_);
  // A grant to `node` could not be met: the others are told room is wanted for a while.
  void NoteUnmetLocked(const std::string& node) REQUIRES(mu_);
  // Whether a borrower other than `node` was refused room within room_wanted_ms.
  bool RoomWantedByOthersLocked(const std::string& node) const REQUIRES(mu_);

  const LenderConfig config_;
  std::unique_ptr<MemfdArena> arena_;
  const Clock* clock_;
  mutable Mutex mu_;
  ExtentAllocator allocator_ GUARDED_BY(mu_);
  std::unordered_map<std::uint64_t, Region> regions_ GUARDED_BY(mu_);
  std::map<std::pair<std::string, std::uint64_t>, std::uint64_t> missing_since_ GUARDED_BY(mu_);
  std::uint64_t next_region_ GUARDED_BY(mu_) = 1;
  std::uint64_t next_transfer_ GUARDED_BY(mu_) = 1;
  std::condition_variable transfer_ended_;  // with mu_: a fence waits for the writes it stopped
  std::map<std::string, std::uint64_t> live_ GUARDED_BY(mu_);
  // When each borrower incarnation last made an authenticated request here.
  std::map<std::pair<std::string, std::uint64_t>, std::uint64_t> heard_ GUARDED_BY(mu_);
  // When each live member incarnation was first listed.
  std::map<std::pair<std::string, std::uint64_t>, std::uint64_t> listed_since_ GUARDED_BY(mu_);
  bool members_heard_ GUARDED_BY(mu_) = false;
  // Bytes granted to each node (every incarnation) and not freed yet.
  std::unordered_map<std::string, std::uint64_t> held_ GUARDED_BY(mu_);
  // Until when each node that was refused room is said to want it (expired ones pruned).
  std::map<std::string, std::uint64_t> room_wanted_until_ GUARDED_BY(mu_);
  LenderStats counters_ GUARDED_BY(mu_);
};

}  // namespace tierpool
