// RemoteTier's record of one peer, shared by remote_tier.cc (data path) and
// remote_tier_maintenance.cc (membership, grants, probes, adoption, repair). Internal to tiers/.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "tiers/remote_tier.h"
#include "transport/peer_connection.h"
#include "transport/ucx_peer_client.h"

namespace tierpool {

// Everything known of one peer. Shared with I/O jobs, which may outlive its membership.
struct RemoteTier::Peer {
  RemoteMember member;
  // guarded by RemoteTier::mu_ (the analysis cannot name another object's mutex here)
  std::map<std::uint64_t, Region> regions;
  std::uint64_t lend_free = 0;
  // Its last request or probe succeeded. A peer just met is not, until its first probe (which
  // also frees whatever it held of ours before: Info.release_all) answers.
  bool responsive = false;
  bool introduced = false;    // that first probe answered
  bool in_membership = true;  // (a peer that left it is kept while it answers)
  bool unconfirmed = false;   // our lease lapsed: not used until a probe says it holds our regions
  bool dead = false;
  std::uint64_t silent_since_us = 0;  // its first failure since it last answered (0: answering)
  std::uint64_t failures = 0;
  std::uint64_t next_probe_us = 0;
  // Where the next probe's check of our regions starts (the region id after the last checked):
  // a peer holding more than kMaxInfoRegions of ours has them checked in turns.
  std::uint64_t next_region_check = 0;
  // It said another borrower wants room it cannot give (Response.room_wanted): regions of ours
  // there that hold nothing go back, and none is asked for ahead of need.
  bool room_wanted = false;
  // The most a placement or repair found no room for there since the last grant pass: asked for
  // even when it says it has no such room, so that it tells the others room is wanted.
  std::uint64_t room_needed = 0;
  // Taken after RemoteTier::mu_ when both are held.
  Mutex pool_mu;
  std::vector<std::unique_ptr<transport::PeerConnection>> idle GUARDED_BY(pool_mu);
  std::string address GUARDED_BY(pool_mu);  // where to connect: member.address, which may move
  // Its UCX data path, once it offered one (Info.ucx_open); null: TCP frames.
  std::shared_ptr<const transport::UcxRoute> ucx GUARDED_BY(pool_mu);
  // No UCX transport of ours reaches it: TCP frames for good.
  bool ucx_unreachable GUARDED_BY(pool_mu) = false;
  // Room and failures reported by the I/O threads, folded in under mu_ by the next pass.
  std::atomic<std::uint64_t> heard_free{~0ull};
  std::atomic<bool> heard_failure{false};
  std::atomic<bool> heard_success{false};
  // A connection was refused outright: nothing listens at its address (it stopped or died).
  std::atomic<bool> heard_refused{false};
  // A transfer was told a region of ours is not ours there: probe now, not at the next interval.
  std::atomic<bool> heard_missing{false};
};

}  // namespace tierpool
