// RemoteTier, the membership side and the maintenance thread's passes: peers met and dropped
// (SetMembers, DropLostPeersLocked, Suspect), probes, grants ahead of need and repairs of
// replica sets short of copies. The data path is in remote_tier.cc.
#include <algorithm>
#include <cstdlib>
#include <set>
#include <utility>

#include <spdlog/spdlog.h>

#include "common/checksum.h"
#include "common/units.h"
#include "proto/peer.pb.h"
#include "tiers/remote_tier.h"
#include "tiers/remote_tier_peer.h"
#include "transport/peer_wire.h"
#include "transport/ucx_wire.h"

namespace tierpool {
namespace {

// The most a lender may grant for `asked` bytes: it may round a region up, to 2 MiB at most
// (docs/protocol.md, "Peer protocol").
std::uint64_t MaxGrantFor(std::uint64_t asked) {
  constexpr std::uint64_t kRounding = 2ull << 20;
  return (asked + kRounding - 1) / kRounding * kRounding;
}

}  // namespace

void RemoteTier::MaintenanceLoop() {
  for (;;) {
    {
      UniqueMutexLock lock(jobs_mu_);
      maintenance_cv_.wait_for(
          lock.native(), std::chrono::milliseconds(config_.maintenance_interval_ms),
          [this]() REQUIRES(jobs_mu_) { return stopping_ || maintenance_wanted_; });
      if (stopping_) return;
      maintenance_wanted_ = false;
    }
    RunMaintenance();
  }
}

void RemoteTier::RunMaintenance() {
  MutexLock pass(maintenance_pass_mu_);
  ProbePeers();
  GrantRegions();
  RepairSets();
}

void RemoteTier::SetMembers(const std::vector<RemoteMember>& members) {
  MutexLock lock(mu_);
  std::map<std::string, const RemoteMember*> now;
  for (const RemoteMember& m : members) {
    if (m.node_id != self_.node_id) now[m.node_id] = &m;
  }
  for (auto it = peers_.begin(); it != peers_.end();) {
    Peer& p = *it->second;
    auto found = now.find(it->first);
    if (found != now.end() && found->second->incarnation != p.member.incarnation) {
      spdlog::warn("remote: peer {} restarted (incarnation {:x}, was {:x}); dropping its replicas",
                   it->first, found->second->incarnation, p.member.incarnation);
      DropPeerLocked(it->second);
      it = peers_.erase(it);  // met anew below, as the new incarnation
      continue;
    }
    if (found == now.end()) {
      if (!p.introduced) {  // never reached: it holds nothing of ours
        it = peers_.erase(it);
        continue;
      }
      if (p.in_membership) {
        spdlog::warn("remote: peer {} left the membership; kept while it answers", it->first);
      }
      p.in_membership = false;
      ++it;
      continue;
    }
    if (!p.in_membership) spdlog::info("remote: peer {} is a member again", it->first);
    p.in_membership = true;
    // Same incarnation at another address: new connections go there.
    MutexLock pool(p.pool_mu);
    p.member.address = found->second->address;
    p.address = found->second->address;
    ++it;
  }
  for (const auto& [id, m] : now) {
    if (peers_.count(id) != 0) continue;
    auto p = std::make_shared<Peer>();
    p->member = *m;
    {
      MutexLock pool(p->pool_mu);  // (nobody else has it yet)
      p->address = m->address;
    }
    p->lend_free = m->lend_bytes;
    peers_[id] = std::move(p);
    spdlog::info("remote: peer {} at {} lends {}", id, m->address, FormatBytes(m->lend_bytes));
  }
  WakeMaintenance();
}

void RemoteTier::DropPeerLocked(const std::shared_ptr<Peer>& peer) {
  peer->dead = true;
  ++counters_.peers_lost;
  DropReplicasLocked([&](const Replica& r) { return r.peer == peer; });
  peer->regions.clear();
}

void RemoteTier::DropReplicasLocked(const std::function<bool(const Replica&)>& gone) {
  for (auto& [id, set] : sets_) {
    auto& rs = set.replicas;
    const std::size_t before = rs.size();
    rs.erase(std::remove_if(rs.begin(), rs.end(), gone), rs.end());
    counters_.replicas_lost += before - rs.size();
    if (before > 0 && rs.empty()) SetEmptiedLocked(id, set);
  }
}

void RemoteTier::DropLostPeersLocked(std::uint64_t now_us) {
  const std::uint64_t bound = std::uint64_t{config_.peer_lost_ms} * 1000;
  for (auto it = peers_.begin(); it != peers_.end();) {
    Peer& p = *it->second;
    const bool silent_too_long = p.silent_since_us != 0 && now_us - p.silent_since_us >= bound;
    // Left the membership and nothing listens at its address: it stopped, or died.
    const bool stopped = !p.in_membership && p.heard_refused;
    if (!silent_too_long && !stopped) {
      ++it;
      continue;
    }
    spdlog::warn("remote: peer {} is gone ({}); dropping its replicas", it->first,
                 stopped ? "it left the membership and refuses connections"
                         : "silent for " + std::to_string(config_.peer_lost_ms) + " ms");
    if (silent_too_long) ++counters_.peers_lost_silent;
    DropPeerLocked(it->second);
    // Still a member: the next view meets it anew (and it frees what it held of ours then).
    it = peers_.erase(it);
  }
}

void RemoteTier::Suspect() {
  {
    MutexLock lock(mu_);
    for (auto& [id, p] : peers_) {
      if (!p->introduced) continue;
      p->unconfirmed = true;
      p->next_probe_us = 0;
    }
  }
  spdlog::warn(
      "remote: this node's cluster lease lapsed; checking every peer still holds our "
      "regions before using it again");
  WakeMaintenance();
}

void RemoteTier::WakeMaintenance() {
  {
    MutexLock jobs(jobs_mu_);
    maintenance_wanted_ = true;
  }
  maintenance_cv_.notify_one();
}

void RemoteTier::ProbePeers() {
  std::vector<std::shared_ptr<Peer>> due;
  std::vector<wire::peer::Request> probes;
  const std::uint64_t now = clock_->NowMicros();
  {
    MutexLock lock(mu_);
    for (auto& [id, p] : peers_) {
      if (p->dead) continue;
      // What the I/O threads heard since the last pass.
      if (p->heard_failure.exchange(false)) {
        ++p->failures;
        p->responsive = false;
        if (p->silent_since_us == 0) p->silent_since_us = now;
      }
      if (p->heard_success.exchange(false)) p->responsive = true;
      if (const std::uint64_t f = p->heard_free.exchange(~0ull); f != ~0ull) p->lend_free = f;
      if (now >= p->next_probe_us || p->heard_missing.exchange(false)) {
        p->next_probe_us = now + std::uint64_t{config_.probe_interval_ms} * 1000;
        due.push_back(p);
        probes.push_back(ProbeLocked(*p));
      }
    }
  }
  for (std::size_t i = 0; i < due.size(); ++i) {
    auto& p = due[i];
    wire::peer::Response response;
    Status s = Exchange(*p, &probes[i], nullptr, 0, &response);
    if (!s.ok() && s.code() != StatusCode::kDeadlineExceeded) {
      // Perhaps a kept connection the peer had closed: once more on a fresh one (a silent peer,
      // DEADLINE_EXCEEDED, is not asked twice).
      response.Clear();
      s = Exchange(*p, &probes[i], nullptr, 0, &response);
    }
    MutexLock lock(mu_);
    p->heard_failure = false;
    p->heard_success = false;
    p->heard_free = ~0ull;
    if (s.ok()) {
      p->responsive = true;
      p->silent_since_us = 0;
      p->lend_free = response.lend_free();
      p->room_wanted = response.room_wanted();
      if (probes[i].info().release_all()) p->introduced = true;
      if (probes[i].info().ucx_open() && !response.ucx_address().empty() &&
          response.ucx_token().size() == transport::kUcxTokenBytes) {
        auto route = std::make_shared<transport::UcxRoute>();
        route->key = p->member.node_id + "/" + std::to_string(p->member.incarnation);
        route->address = response.ucx_address();
        route->token = response.ucx_token();
        MutexLock pool(p->pool_mu);
        p->ucx = std::move(route);
      }
      DropMissingRegionsLocked(p, response);
      ReleaseFencedLocked(*p, probes[i].info(), response);
      // Every region of ours there checked (in turns when there are many) since our lease
      // lapsed: it is used again.
      if (p->unconfirmed && p->next_region_check == 0) p->unconfirmed = false;
    } else {
      if (p->responsive || !p->introduced)
        spdlog::warn("remote: peer {} does not answer: {}", p->member.node_id, s.ToString());
      p->responsive = false;
      if (p->silent_since_us == 0) p->silent_since_us = now;
      ++p->failures;
    }
  }
  MutexLock lock(mu_);
  DropLostPeersLocked(clock_->NowMicros());
}

wire::peer::Request RemoteTier::ProbeLocked(Peer& p) {
  wire::peer::Request request;
  auto* info = request.mutable_info();
  if (ucx_ != nullptr) {
    MutexLock pool(p.pool_mu);
    // Until it offers its UCX data path; a lender without one answers without it, every time.
    if (p.ucx == nullptr && !p.ucx_unreachable) info->set_ucx_open(true);
  }
  if (!p.introduced) {
    info->set_release_all(true);  // we hold none of its regions: it may free what it kept
    return request;
  }
  const std::size_t n = std::min<std::size_t>(p.regions.size(), transport::kMaxInfoRegions);
  auto it = p.regions.lower_bound(p.next_region_check);
  for (std::size_t i = 0; i < n; ++i) {
    if (it == p.regions.end()) it = p.regions.begin();
    info->add_regions(it->first);
    ++it;
  }
  p.next_region_check = it == p.regions.end() ? 0 : it->first;
  for (const auto& [id, region] : p.regions) {
    if (region.fenced.empty() || info->fences_size() == transport::kMaxInfoRegions) continue;
    std::uint64_t below = 0;
    for (const auto& f : region.fenced) below = std::max(below, f.second);
    auto* fence = info->add_fences();
    fence->set_region(id);
    fence->set_below(below);
  }
  return request;
}

void RemoteTier::ReleaseFencedLocked(Peer& p, const wire::peer::Info& asked,
                                     const wire::peer::Response& response) {
  std::map<std::uint64_t, std::uint64_t> sent;
  for (const auto& f : asked.fences()) sent[f.region()] = f.below();
  for (std::uint64_t id : response.fenced_regions()) {
    auto region = p.regions.find(id);
    auto fence = sent.find(id);
    if (region == p.regions.end() || fence == sent.end()) continue;
    auto& held = region->second.fenced;
    for (auto it = held.begin(); it != held.end();) {
      if (it->second > fence->second) {
        ++it;  // failed after the probe left: the next one fences it
        continue;
      }
      (void)region->second.allocator.Free(it->first);
      ++counters_.ranges_fenced;
      it = held.erase(it);
    }
  }
}

void RemoteTier::DropMissingRegionsLocked(const std::shared_ptr<Peer>& p,
                                          const wire::peer::Response& response) {
  if (p->dead) return;
  std::uint64_t lost = 0;
  for (std::uint64_t region : response.missing_regions()) {
    if (p->regions.erase(region) == 0) continue;  // not asked about, or gone already
    DropReplicasLocked(
        [&, peer = p](const Replica& r) { return r.peer == peer && r.region == region; });
    ++lost;
  }
  if (lost == 0) return;
  counters_.regions_lost += lost;
  spdlog::error(
      "remote: {} no longer holds {} of our regions (freed behind our back: its lease table, "
      "or a request that did not come from us); their replicas are dropped and repaired from "
      "the others",
      p->member.node_id, lost);
}

void RemoteTier::GiveBackIdleRegionsLocked(
    const std::shared_ptr<Peer>& p,
    std::vector<std::pair<std::shared_ptr<Peer>, std::uint64_t>>* released) {
  for (auto it = p->regions.begin(); it != p->regions.end();) {
    // Nothing carved from it, nothing held for a fence: no replica names it.
    if (it->second.allocator.stats().used_bytes != 0 || !it->second.fenced.empty()) {
      ++it;
      continue;
    }
    released->emplace_back(p, it->first);
    ++counters_.regions_given_back;
    it = p->regions.erase(it);
  }
}

void RemoteTier::GrantRegions() {
  struct Ask {
    std::shared_ptr<Peer> peer;
    std::uint64_t bytes;
  };
  std::vector<Ask> asks;
  std::vector<std::pair<std::shared_ptr<Peer>, std::uint64_t>> given_back;
  {
    MutexLock lock(mu_);
    const std::uint64_t want = std::max(config_.region_bytes, wanted_region_);
    // Room is short when little is free in all, or no free extent is large enough for a
    // typical object (a quarter region) or for the one that last found no room.
    const std::uint64_t extent = std::max(config_.region_bytes / 4, wanted_region_);
    wanted_region_ = 0;
    for (auto& [id, p] : peers_) {
      const std::uint64_t needed = std::exchange(p->room_needed, 0);
      if (!UsableLocked(*p)) continue;
      if (p->room_wanted && needed == 0) {
        // Another borrower needs room there: what we hold in reserve goes back to it.
        GiveBackIdleRegionsLocked(p, &given_back);
        continue;
      }
      const std::uint64_t headroom = std::uint64_t{config_.headroom_regions} * config_.region_bytes;
      std::uint64_t largest = 0;
      for (const auto& [rid, r] : p->regions) {
        largest = std::max(largest, r.allocator.stats().largest_free_extent);
      }
      if (FreeGrantedLocked(*p) >= headroom && largest >= std::max(extent, needed)) continue;
      std::uint64_t bytes = std::min(std::max(want, needed), p->lend_free);
      // A copy found no room there: asked for even beyond the room it offers, so that a refusal
      // tells the borrowers holding room in reserve there to give it back.
      if (needed > 0) bytes = std::max(bytes, needed);
      if (bytes < (1u << 20) && needed == 0) continue;
      asks.push_back({p, bytes});
    }
  }
  for (auto& [peer, region] : given_back) {
    wire::peer::Request release;
    release.mutable_release()->set_region(region);
    wire::peer::Response released;
    (void)Exchange(*peer, &release, nullptr, 0, &released);
  }
  for (auto& a : asks) {
    wire::peer::Request request;
    request.mutable_grant()->set_bytes(a.bytes);
    wire::peer::Response response;
    Status s = Exchange(*a.peer, &request, nullptr, 0, &response);
    const std::uint64_t region = response.region();
    const std::uint64_t bytes = response.region_bytes();
    bool give_back = false;
    {
      MutexLock lock(mu_);
      a.peer->lend_free = response.lend_free();
      // A lender's word is checked like any peer's: a region of another size than asked for
      // would be taken for room it never lent (or overflow the sums of room), and an id that is
      // 0 or already ours would confuse two regions.
      const bool new_id = region != 0 && a.peer->regions.count(region) == 0;
      if (s.ok() && (!new_id || bytes == 0 || bytes > MaxGrantFor(a.bytes))) {
        spdlog::warn(
            "remote: {} answered a grant of {} bytes with region {} of {} bytes; not taken",
            a.peer->member.node_id, a.bytes, region, bytes);
        s = Status::Internal("a grant reply that does not match its request");
        give_back = new_id;  // a region it named, not one of ours
      }
      if (!s.ok()) {
        ++counters_.grant_failures;
        spdlog::debug("remote: {} granted nothing: {}", a.peer->member.node_id, s.ToString());
      } else {
        ++counters_.grants;
        // A peer dropped meanwhile: its lender frees the region in time.
        if (!a.peer->dead) {
          a.peer->regions.emplace(region, Region{bytes, ExtentAllocator({bytes, 4096})});
        }
      }
    }
    if (give_back) {
      wire::peer::Request release;
      release.mutable_release()->set_region(region);
      wire::peer::Response released;
      (void)Exchange(*a.peer, &release, nullptr, 0, &released);
    }
  }
}

void RemoteTier::RepairSets() {
  // Sets short of replicas, oldest first, as fast as --remote-repair-rate lets them start.
  struct Job {
    std::uint64_t set_id;
    Replica source;
    Replica target;
    RecordInfo info;
  };
  std::vector<Job> jobs;
  {
    MutexLock lock(mu_);
    repairs_without_room_ = 0;
    std::vector<std::uint64_t> ids;
    for (auto& [id, set] : sets_) {
      if (set.written && !set.repairing && !set.replicas.empty() &&
          set.replicas.size() < set.wanted) {
        ids.push_back(id);
      }
    }
    std::sort(ids.begin(), ids.end());
    for (std::uint64_t id : ids) {
      ReplicaSet& set = sets_.at(id);
      std::set<Peer*> used;
      for (const Replica& r : set.replicas) used.insert(r.peer.get());
      Replica target;
      for (auto& [node, p] : peers_) {
        if (!UsableLocked(*p) || used.count(p.get()) != 0) continue;
        if (CarveLocked(*p, set.size, &target)) {
          target.peer = p;
          break;
        }
        p->room_needed = std::max(p->room_needed, set.size);  // the next grant pass asks for it
      }
      if (target.peer == nullptr) {
        ++repairs_without_room_;  // no room elsewhere yet: the next pass tries again
        continue;
      }
      if (!repair_limit_.TryTake(set.size)) {
        ReleaseReplicaLocked(target);
        break;
      }
      set.repairing = true;
      jobs.push_back({id, set.replicas.front(), target, set.info});
    }
  }
  for (Job& j : jobs) {
    std::unique_ptr<std::byte, decltype(&std::free)> buffer(
        static_cast<std::byte*>(std::malloc(std::max<std::uint64_t>(j.info.size, 1))), &std::free);
    Status s = buffer ? Transfer(*j.source.peer, j.source.region, j.source.range.offset,
                                 j.info.size, false, buffer.get())
                      : Status::ResourceExhausted("no memory for a repair");
    bool corrupt_source = false;
    if (s.ok() && j.info.size > 0 && Xxh3(buffer.get(), j.info.size) != j.info.checksum) {
      s = Status::DataLoss("the surviving replica does not match its checksum");
      corrupt_source = true;
    }
    if (s.ok()) {
      s = Transfer(*j.target.peer, j.target.region, j.target.range.offset, j.info.size, true,
                   buffer.get());
    }
    MutexLock lock(mu_);
    if (corrupt_source) {
      ++checksum_failures_;
      DropCorruptReplicaLocked(j.set_id, j.source);  // the next pass repairs from another
    }
    auto it = sets_.find(j.set_id);
    if (it == sets_.end() || !s.ok() || j.target.peer->dead) {
      if (!s.ok()) spdlog::warn("remote: repair of a replica failed: {}", s.ToString());
      if (!s.ok()) j.target.fence_below = next_write_.load();  // its write may have begun
      ReleaseReplicaLocked(j.target);
      if (it != sets_.end()) it->second.repairing = false;
      continue;
    }
    it->second.repairing = false;
    it->second.replicas.push_back(j.target);
    ++counters_.replicas_repaired;
    counters_.repair_bytes += j.info.size;
  }
}

}  // namespace tierpool
