// RemoteTier, the membership side and the maintenance thread's passes: peers met and dropped
// (SetMembers, Reincarnate), regions adopted after a new incarnation, probes, grants ahead of
// need and repairs of replica sets short of copies. The data path is in remote_tier.cc.
#include <algorithm>
#include <cstdlib>
#include <set>

#include <spdlog/spdlog.h>

#include "common/checksum.h"
#include "common/units.h"
#include "proto/peer.pb.h"
#include "tiers/remote_tier.h"
#include "tiers/remote_tier_peer.h"
#include "transport/peer_wire.h"

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
      std::unique_lock lock(jobs_mu_);
      maintenance_cv_.wait_for(lock, std::chrono::milliseconds(config_.maintenance_interval_ms),
                               [this] { return stopping_ || maintenance_wanted_; });
      if (stopping_) return;
      maintenance_wanted_ = false;
    }
    RunMaintenance();
  }
}

void RemoteTier::RunMaintenance() {
  std::lock_guard pass(maintenance_pass_mu_);
  AdoptRegions();
  ProbePeers();
  GrantRegions();
  RepairSets();
}

void RemoteTier::SetMembers(const std::vector<RemoteMember>& members) {
  std::lock_guard lock(mu_);
  borrowing_ = true;
  std::map<std::string, const RemoteMember*> now;
  for (const RemoteMember& m : members) {
    if (m.node_id != self_.node_id) now[m.node_id] = &m;
  }
  for (auto it = peers_.begin(); it != peers_.end();) {
    auto found = now.find(it->first);
    if (found == now.end() || found->second->incarnation != it->second->member.incarnation) {
      spdlog::warn("remote: peer {} (incarnation {:x}) is gone; dropping its replicas", it->first,
                   it->second->member.incarnation);
      DropPeerLocked(it->second);
      it = peers_.erase(it);
    } else {
      // Same incarnation at another address: new connections go there.
      std::lock_guard pool(it->second->pool_mu);
      it->second->member.address = found->second->address;
      it->second->address = found->second->address;
      ++it;
    }
  }
  for (const auto& [id, m] : now) {
    if (peers_.count(id) != 0) continue;
    auto p = std::make_shared<Peer>();
    p->member = *m;
    p->address = m->address;
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
    if (before > 0 && rs.empty()) ++counters_.extents_lost;
  }
}

void RemoteTier::StopBorrowing() {
  std::lock_guard lock(mu_);
  borrowing_ = false;
}

void RemoteTier::Reincarnate(std::uint64_t incarnation) {
  {
    std::lock_guard lock(mu_);
    if (incarnation == self_.incarnation) return;
    const std::uint64_t previous = self_.incarnation;
    self_.incarnation = incarnation;
    self_incarnation_ = incarnation;
    for (auto& [id, p] : peers_) {
      // Regions held under an even earlier incarnation, not yet adopted, stay under that one.
      if (!p->dead && !p->regions.empty() && p->adopt_from == 0) p->adopt_from = previous;
      std::lock_guard pool(p->pool_mu);
      p->idle.clear();
    }
  }
  WakeMaintenance();
}

void RemoteTier::WakeMaintenance() {
  {
    std::lock_guard jobs(jobs_mu_);
    maintenance_wanted_ = true;
  }
  maintenance_cv_.notify_one();
}

void RemoteTier::AdoptRegions() {
  std::vector<std::pair<std::shared_ptr<Peer>, std::uint64_t>> due;
  {
    std::lock_guard lock(mu_);
    for (auto& [id, p] : peers_) {
      if (!p->dead && p->adopt_from != 0) due.emplace_back(p, p->adopt_from);
    }
  }
  for (auto& [p, previous] : due) {
    wire::peer::Request request;
    request.mutable_adopt()->set_previous_incarnation(previous);
    wire::peer::Response response;
    Status s = Exchange(*p, &request, nullptr, 0, &response);
    // Not reached: the next pass asks again (a peer that died leaves through the membership).
    // Refused: the lender keeps nothing of ours.
    const bool answered = s.ok() || s.code() == StatusCode::kInvalidArgument ||
                          s.code() == StatusCode::kNotFound ||
                          s.code() == StatusCode::kResourceExhausted;
    if (!answered) continue;
    const std::set<std::uint64_t> kept(response.adopted_regions().begin(),
                                       response.adopted_regions().end());
    std::lock_guard lock(mu_);
    if (p->dead || p->adopt_from != previous) continue;
    p->adopt_from = 0;
    std::uint64_t lost = 0;
    for (auto it = p->regions.begin(); it != p->regions.end();) {
      if (kept.count(it->first) != 0) {
        ++counters_.regions_adopted;
        ++it;
        continue;
      }
      const std::uint64_t region = it->first;
      // (The peer captured by value: clang before 16 cannot capture a structured binding.)
      DropReplicasLocked(
          [&, peer = p](const Replica& r) { return r.peer == peer && r.region == region; });
      it = p->regions.erase(it);
      ++lost;
    }
    counters_.regions_not_adopted += lost;
    spdlog::info("remote: {} kept {} of our regions after we rejoined ({} were freed)",
                 p->member.node_id, kept.size(), lost);
  }
}

void RemoteTier::ProbePeers() {
  std::vector<std::shared_ptr<Peer>> due;
  std::vector<wire::peer::Request> probes;
  const std::uint64_t now = clock_->NowMicros();
  {
    std::lock_guard lock(mu_);
    for (auto& [id, p] : peers_) {
      if (p->dead) continue;
      // What the I/O threads heard since the last pass.
      if (p->heard_failure.exchange(false)) {
        ++p->failures;
        p->responsive = false;
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
    std::lock_guard lock(mu_);
    p->heard_failure = false;
    p->heard_success = false;
    p->heard_free = ~0ull;
    if (s.ok()) {
      p->responsive = true;
      p->lend_free = response.lend_free();
      DropMissingRegionsLocked(p, response);
    } else {
      if (p->responsive)
        spdlog::warn("remote: peer {} does not answer: {}", p->member.node_id, s.ToString());
      p->responsive = false;
      ++p->failures;
    }
  }
}

wire::peer::Request RemoteTier::ProbeLocked(Peer& p) {
  wire::peer::Request request;
  auto* info = request.mutable_info();
  // Regions still held under an earlier incarnation of ours are the adoption's to settle.
  if (p.adopt_from != 0) return request;
  const std::size_t n = std::min<std::size_t>(p.regions.size(), transport::kMaxInfoRegions);
  auto it = p.regions.lower_bound(p.next_region_check);
  for (std::size_t i = 0; i < n; ++i) {
    if (it == p.regions.end()) it = p.regions.begin();
    info->add_regions(it->first);
    ++it;
  }
  p.next_region_check = it == p.regions.end() ? 0 : it->first;
  return request;
}

void RemoteTier::DropMissingRegionsLocked(const std::shared_ptr<Peer>& p,
                                          const wire::peer::Response& response) {
  if (p->dead || p->adopt_from != 0) return;
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

void RemoteTier::GrantRegions() {
  struct Ask {
    std::shared_ptr<Peer> peer;
    std::uint64_t bytes;
  };
  std::vector<Ask> asks;
  {
    std::lock_guard lock(mu_);
    if (!borrowing_) return;
    const std::uint64_t want = std::max(config_.region_bytes, wanted_region_);
    // Room is short when little is free in all, or no free extent is large enough for a
    // typical object (a quarter region) or for the one that last found no room.
    const std::uint64_t extent = std::max(config_.region_bytes / 4, wanted_region_);
    wanted_region_ = 0;
    for (auto& [id, p] : peers_) {
      if (p->dead || !p->responsive || p->adopt_from != 0) continue;
      const std::uint64_t headroom = std::uint64_t{config_.headroom_regions} * config_.region_bytes;
      std::uint64_t largest = 0;
      for (const auto& [rid, r] : p->regions) {
        largest = std::max(largest, r.allocator.stats().largest_free_extent);
      }
      if (FreeGrantedLocked(*p) >= headroom && largest >= extent) continue;
      const std::uint64_t bytes = std::min(want, p->lend_free);
      if (bytes < (1u << 20)) continue;
      asks.push_back({p, bytes});
    }
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
      std::lock_guard lock(mu_);
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
  // Sets short of replicas, oldest first, up to a byte budget per pass.
  struct Job {
    std::uint64_t set_id;
    Replica source;
    Replica target;
    RecordInfo info;
  };
  std::vector<Job> jobs;
  {
    std::lock_guard lock(mu_);
    if (!borrowing_) return;
    std::uint64_t budget = config_.max_repair_bytes_per_pass;
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
      if (set.size > budget) break;
      std::set<Peer*> used;
      for (const Replica& r : set.replicas) used.insert(r.peer.get());
      Replica target;
      for (auto& [node, p] : peers_) {
        if (p->dead || !p->responsive || p->adopt_from != 0 || used.count(p.get()) != 0) continue;
        if (CarveLocked(*p, set.size, &target)) {
          target.peer = p;
          break;
        }
      }
      if (target.peer == nullptr) continue;  // no room elsewhere yet: the next pass tries again
      set.repairing = true;
      budget -= set.size;
      jobs.push_back({id, set.replicas.front(), target, set.info});
    }
  }
  for (Job& j : jobs) {
    std::unique_ptr<std::byte, decltype(&std::free)> buffer(
        static_cast<std::byte*>(std::malloc(std::max<std::uint64_t>(j.info.size, 1))), &std::free);
    Status s = buffer ? Transfer(*j.source.peer, j.source.region, j.source.range.offset,
                                 j.info.size, false, buffer.get())
                      : Status::ResourceExhausted("no memory for a repair");
    if (s.ok() && j.info.size > 0 && Xxh3(buffer.get(), j.info.size) != j.info.checksum) {
      s = Status::DataLoss("the surviving replica does not match its checksum");
    }
    if (s.ok()) {
      s = Transfer(*j.target.peer, j.target.region, j.target.range.offset, j.info.size, true,
                   buffer.get());
    }
    std::lock_guard lock(mu_);
    auto it = sets_.find(j.set_id);
    if (it == sets_.end() || !s.ok() || j.target.peer->dead) {
      if (!s.ok()) spdlog::warn("remote: repair of a replica failed: {}", s.ToString());
      ReleaseReplicaLocked(j.target);
      if (it != sets_.end()) it->second.repairing = false;
      continue;
    }
    it->second.repairing = false;
    it->second.replicas.push_back(j.target);
    ++counters_.replicas_repaired;
  }
}

}  // namespace tierpool
