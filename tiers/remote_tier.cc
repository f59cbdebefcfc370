#include "tiers/remote_tier.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <set>

#include <spdlog/spdlog.h>

#include "common/checksum.h"
#include "common/units.h"
#include "proto/peer.pb.h"
#include "transport/peer_connection.h"

namespace tierpool {

Status RemoteTierConfig::validate() const {
  if (replicas == 0) return Status::InvalidArgument("--remote-replicas must be at least 1");
  if (region_bytes < (1u << 20)) return Status::InvalidArgument("remote regions must be >= 1 MiB");
  if (io_threads == 0 || connections_per_peer == 0) {
    return Status::InvalidArgument("remote I/O threads and connections must be positive");
  }
  if (io_timeout_ms == 0) return Status::InvalidArgument("the remote I/O timeout must be positive");
  if (piece_bytes == 0 || piece_bytes > (64ull << 20)) {
    return Status::InvalidArgument("remote transfer pieces must be of 1 byte to 64 MiB");
  }
  return Status::Ok();
}

// Everything known of one peer. Shared with I/O jobs, which may outlive its membership.
struct RemoteTier::Peer {
  RemoteMember member;
  // guarded by RemoteTier::mu_
  std::map<std::uint64_t, Region> regions;
  std::uint64_t lend_free = 0;
  bool responsive = true;
  bool dead = false;
  // Our earlier incarnation, under which this peer still holds our regions until they are
  // adopted by the current one (0: nothing to adopt). Nothing is carved there meanwhile.
  std::uint64_t adopt_from = 0;
  std::uint64_t failures = 0;
  std::uint64_t next_probe_us = 0;
  // guarded by pool_mu (taken after RemoteTier::mu_ when both are held)
  std::mutex pool_mu;
  std::vector<std::unique_ptr<transport::PeerConnection>> idle;
  std::string address;  // where to connect: member.address, which may move
  // Room and failures reported by the I/O threads, folded in under mu_ by the next pass.
  std::atomic<std::uint64_t> heard_free{~0ull};
  std::atomic<bool> heard_failure{false};
  std::atomic<bool> heard_success{false};
};

RemoteTier::RemoteTier(RemoteTierConfig config, transport::PeerAuth auth,
                       transport::PeerIdentity self, const Clock* clock)
    : config_(config),
      auth_(std::move(auth)),
      clock_(clock),
      self_incarnation_(self.incarnation),
      self_(std::move(self)) {
  for (std::uint32_t i = 0; i < config_.io_threads; ++i) {
    workers_.emplace_back([this] { WorkerLoop(); });
  }
  maintenance_ = std::thread([this] { MaintenanceLoop(); });
}

RemoteTier::~RemoteTier() {
  {
    std::lock_guard lock(jobs_mu_);
    stopping_ = true;
  }
  jobs_cv_.notify_all();
  maintenance_cv_.notify_all();
  maintenance_.join();
  for (auto& w : workers_) w.join();
}

void RemoteTier::Post(std::function<void()> job) {
  {
    std::lock_guard lock(jobs_mu_);
    jobs_.push_back(std::move(job));
  }
  jobs_cv_.notify_one();
}

void RemoteTier::WorkerLoop() {
  for (;;) {
    std::function<void()> job;
    {
      std::unique_lock lock(jobs_mu_);
      jobs_cv_.wait(lock, [this] { return stopping_ || !jobs_.empty(); });
      // Queued jobs still run at shutdown: each ends a mover operation someone waits for.
      if (jobs_.empty()) return;
      job = std::move(jobs_.front());
      jobs_.pop_front();
    }
    job();
  }
}

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

Status RemoteTier::Exchange(Peer& peer, wire::peer::Request* request, const void* payload,
                            std::uint64_t payload_length, wire::peer::Response* response,
                            void* read_dst, std::uint64_t read_capacity) {
  std::unique_ptr<transport::PeerConnection> conn;
  std::string address;
  {
    std::lock_guard lock(peer.pool_mu);
    while (!peer.idle.empty() && !conn) {
      conn = std::move(peer.idle.back());
      peer.idle.pop_back();
      // Made as an earlier incarnation of ours: the lender would take it for that one.
      if (conn->client().incarnation != self_incarnation_) conn.reset();
    }
    address = peer.address;
  }
  if (!conn) {
    transport::PeerIdentity self;
    {
      std::lock_guard lock(mu_);
      self = self_;
    }
    auto c = transport::PeerConnection::Connect(address, auth_, self, config_.io_timeout_ms);
    if (!c.ok()) {
      peer.heard_failure = true;
      return c.status();
    }
    if ((*c)->server().node_id != peer.member.node_id ||
        (*c)->server().incarnation != peer.member.incarnation) {
      // Someone else answers at that address now (the peer restarted): not the lender we know.
      peer.heard_failure = true;
      return Status::Unavailable("peer " + peer.member.node_id + " at " + address + " is now " +
                                 (*c)->server().node_id + " incarnation " +
                                 std::to_string((*c)->server().incarnation));
    }
    conn = std::move(c).value();
  }
  request->set_lender_incarnation(peer.member.incarnation);
  Status s = conn->Call(request, payload, payload_length, response, read_dst, read_capacity);
  if (conn->broken()) {
    peer.heard_failure = true;
    return s;
  }
  peer.heard_free = response->lend_free();
  peer.heard_success = true;
  std::lock_guard lock(peer.pool_mu);
  if (peer.idle.size() < config_.connections_per_peer &&
      conn->client().incarnation == self_incarnation_) {
    peer.idle.push_back(std::move(conn));
  }
  return s;
}

Status RemoteTier::Transfer(Peer& peer, std::uint64_t region, std::uint64_t offset,
                            std::uint64_t length, bool write, std::byte* data) {
  for (std::uint64_t done = 0; done < length;) {
    const std::uint64_t n = std::min(config_.piece_bytes, length - done);
    wire::peer::Request request;
    wire::peer::RegionRange* range = write ? request.mutable_write() : request.mutable_read();
    range->set_region(region);
    range->set_offset(offset + done);
    range->set_length(n);
    wire::peer::Response response;
    Status s = write ? Exchange(peer, &request, data + done, n, &response)
                     : Exchange(peer, &request, nullptr, 0, &response, data + done, n);
    if (!s.ok()) {
      return Status(s.code(), std::string(write ? "writing to" : "reading from") + " peer " +
                                  peer.member.node_id + ": " + s.message());
    }
    done += n;
  }
  return Status::Ok();
}

bool RemoteTier::CarveLocked(Peer& peer, std::uint64_t size, Replica* out) {
  for (auto& [id, region] : peer.regions) {
    if (auto r = region.allocator.Allocate(size)) {
      *out = Replica{nullptr, id, *r};
      return true;
    }
  }
  return false;
}

std::uint64_t RemoteTier::FreeGrantedLocked(const Peer& peer) const {
  std::uint64_t free = 0;
  for (const auto& [id, region] : peer.regions) free += region.allocator.stats().free_bytes;
  return free;
}

void RemoteTier::ReleaseReplicaLocked(const Replica& r) {
  if (r.peer == nullptr || r.peer->dead) return;
  auto it = r.peer->regions.find(r.region);
  if (it != r.peer->regions.end()) (void)it->second.allocator.Free(r.range);
}

Result<Extent> RemoteTier::Allocate(std::uint64_t size, const AllocationHint& hint) {
  if (size == 0) return Status::InvalidArgument("empty remote extent");
  std::lock_guard lock(mu_);
  if (!borrowing_) return Status::Unavailable("remote: this node lost its cluster lease");
  // Peers with the most granted room first, so replicas spread.
  std::vector<Peer*> order;
  for (auto& [id, p] : peers_) {
    if (!p->dead && p->responsive && p->adopt_from == 0) order.push_back(p.get());
  }
  std::sort(order.begin(), order.end(), [this](const Peer* a, const Peer* b) {
    return FreeGrantedLocked(*a) > FreeGrantedLocked(*b);
  });
  ReplicaSet set;
  set.size = size;
  set.wanted = hint.cache ? 1 : config_.replicas;
  for (Peer* p : order) {
    if (set.replicas.size() == set.wanted) break;
    Replica r;
    if (!CarveLocked(*p, size, &r)) continue;
    r.peer = peers_.at(p->member.node_id);
    set.replicas.push_back(r);
  }
  if (set.replicas.size() < set.wanted) {
    for (const Replica& r : set.replicas) ReleaseReplicaLocked(r);
    ++failed_allocations_;
    wanted_region_ = std::max(wanted_region_, size);
    WakeMaintenance();
    return Status::ResourceExhausted("remote: no room for " + FormatBytes(size) + " on " +
                                     std::to_string(set.wanted) + " peers (" +
                                     std::to_string(order.size()) + " responsive)");
  }
  const std::uint64_t id = next_set_++;
  const std::uint64_t length = set.replicas.front().range.length;
  sets_.emplace(id, std::move(set));
  used_ += length;
  peak_used_ = std::max(peak_used_, used_);
  ++allocations_;
  return Extent{0, id, length};
}

Status RemoteTier::Free(const Extent& extent) {
  std::lock_guard lock(mu_);
  auto it = sets_.find(extent.offset);
  if (it == sets_.end())
    return Status::NotFound("no remote extent " + std::to_string(extent.offset));
  for (const Replica& r : it->second.replicas) ReleaseReplicaLocked(r);
  used_ -= it->second.replicas.empty() ? extent.length : it->second.replicas.front().range.length;
  sets_.erase(it);
  ++frees_;
  return Status::Ok();
}

void RemoteTier::WriteImpl(const Extent& dst, const RecordInfo& info, const std::byte* src,
                           IoCompletion done) {
  std::vector<Replica> replicas;
  {
    std::lock_guard lock(mu_);
    auto it = sets_.find(dst.offset);
    if (it == sets_.end()) {
      done(Status::NotFound("no remote extent " + std::to_string(dst.offset)));
      return;
    }
    replicas = it->second.replicas;
  }
  if (info.size > 0 && Xxh3(src, info.size) != info.checksum) {
    done(Status::DataLoss("bytes to write to remote do not match their checksum"));
    return;
  }
  // Every replica at once, each on a worker; the last to finish completes the write.
  struct Pending {
    std::mutex mu;
    std::size_t left;
    Status first_error;
    IoCompletion done;
  };
  auto pending = std::make_shared<Pending>();
  pending->left = replicas.size();
  pending->done = std::move(done);
  const std::uint64_t set_id = dst.offset;
  for (const Replica& r : replicas) {
    Post([this, r, info, src, pending, set_id] {
      Status s =
          Transfer(*r.peer, r.region, r.range.offset, info.size, true, const_cast<std::byte*>(src));
      bool last = false;
      Status result;
      {
        std::lock_guard lock(pending->mu);
        if (!s.ok() && pending->first_error.ok()) pending->first_error = s;
        last = --pending->left == 0;
        result = pending->first_error;
      }
      if (!last) return;
      {
        std::lock_guard lock(mu_);
        if (!result.ok()) ++write_errors_;
        auto it = sets_.find(set_id);
        if (result.ok() && it != sets_.end()) {
          it->second.info = info;
          it->second.written = true;
        }
      }
      pending->done(result);
    });
  }
}

void RemoteTier::ReadImpl(const Extent& src, const RecordInfo& info, std::byte* dst,
                          IoCompletion done) {
  std::vector<Replica> replicas;
  {
    std::lock_guard lock(mu_);
    auto it = sets_.find(src.offset);
    if (it == sets_.end()) {
      done(Status::NotFound("no remote extent " + std::to_string(src.offset)));
      return;
    }
    replicas = it->second.replicas;
    // Responsive peers first: a frozen one costs a timeout only when nothing else is left.
    std::stable_partition(replicas.begin(), replicas.end(),
                          [](const Replica& r) { return r.peer->responsive; });
  }
  Post([this, replicas, info, dst, done = std::move(done)] {
    Status last = Status::DataLoss("remote: every replica of this object is lost");
    bool mismatch = false;
    for (std::size_t i = 0; i < replicas.size(); ++i) {
      const Replica& r = replicas[i];
      Status s = Transfer(*r.peer, r.region, r.range.offset, info.size, false, dst);
      const bool wrong = s.ok() && info.size > 0 && Xxh3(dst, info.size) != info.checksum;
      if (wrong) {
        mismatch = true;
        s = Status::DataLoss("remote copy on " + r.peer->member.node_id +
                             " does not match its checksum");
      }
      if (s.ok()) {
        if (i > 0) {
          std::lock_guard lock(mu_);
          ++counters_.read_failovers;
        }
        done(Status::Ok());
        return;
      }
      spdlog::warn("remote read: {}", s.ToString());
      std::lock_guard lock(mu_);
      ++(wrong ? checksum_failures_ : read_errors_);
      last = s;
    }
    // Never unchecked bytes: whatever the last replica left in dst is not returned as OK. A
    // replica that could not be read may be readable later (a frozen peer): UNAVAILABLE.
    if (mismatch) {
      done(Status::DataLoss("remote: no replica has the right bytes (" + last.message() + ")"));
    } else if (replicas.empty()) {
      done(last);
    } else {
      done(Status::Unavailable("remote: no replica could be read (" + last.message() + ")"));
    }
  });
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
      DropReplicasLocked([&](const Replica& r) { return r.peer == p && r.region == region; });
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
  const std::uint64_t now = clock_->NowMicros();
  {
    std::lock_guard lock(mu_);
    for (auto& [id, p] : peers_) {
      // What the I/O threads heard since the last pass.
      if (p->heard_failure.exchange(false)) {
        ++p->failures;
        p->responsive = false;
      }
      if (p->heard_success.exchange(false)) p->responsive = true;
      if (const std::uint64_t f = p->heard_free.exchange(~0ull); f != ~0ull) p->lend_free = f;
      if (now >= p->next_probe_us) {
        p->next_probe_us = now + std::uint64_t{config_.probe_interval_ms} * 1000;
        due.push_back(p);
      }
    }
  }
  for (auto& p : due) {
    wire::peer::Request request;
    request.mutable_info();
    wire::peer::Response response;
    Status s = Exchange(*p, &request, nullptr, 0, &response);
    std::lock_guard lock(mu_);
    p->heard_failure = false;
    p->heard_success = false;
    p->heard_free = ~0ull;
    if (s.ok()) {
      p->responsive = true;
      p->lend_free = response.lend_free();
    } else {
      if (p->responsive)
        spdlog::warn("remote: peer {} does not answer: {}", p->member.node_id, s.ToString());
      p->responsive = false;
      ++p->failures;
    }
  }
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
    std::lock_guard lock(mu_);
    a.peer->lend_free = response.lend_free();
    if (!s.ok()) {
      ++counters_.grant_failures;
      spdlog::debug("remote: {} granted nothing: {}", a.peer->member.node_id, s.ToString());
      continue;
    }
    ++counters_.grants;
    if (a.peer->dead) continue;  // dropped meanwhile; its lender frees the region in time
    a.peer->regions.emplace(
        response.region(),
        Region{response.region_bytes(), ExtentAllocator({response.region_bytes(), 4096})});
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

std::uint64_t RemoteTier::capacity() const {
  std::lock_guard lock(mu_);
  return CapacityLocked();
}

std::uint64_t RemoteTier::CapacityLocked() const {
  std::uint64_t raw = 0;
  for (const auto& [id, p] : peers_) {
    if (p->dead) continue;
    for (const auto& [rid, r] : p->regions) raw += r.bytes;
    raw += p->lend_free;
  }
  return raw / config_.replicas;
}

std::uint64_t RemoteTier::used_bytes() const {
  std::lock_guard lock(mu_);
  return used_;
}

Status RemoteTier::CheckWritable() {
  std::lock_guard lock(mu_);
  if (!borrowing_) return Status::Unavailable("remote: this node lost its cluster lease");
  std::size_t responsive = 0;
  for (const auto& [id, p] : peers_) {
    // A failure the I/O threads just heard counts now, not at the next pass: no more moves are
    // sent to a peer that stopped answering.
    responsive += !p->dead && p->responsive && !p->heard_failure ? 1 : 0;
  }
  if (responsive < config_.replicas) {
    return Status::Unavailable("remote: " + std::to_string(responsive) + " responsive peers, " +
                               std::to_string(config_.replicas) + " replicas wanted");
  }
  return Status::Ok();
}

TierStats RemoteTier::Stats() const {
  TierStats s;
  s.kind = TierKind::kRemote;
  std::lock_guard lock(mu_);
  s.capacity = CapacityLocked();
  s.used_bytes = used_;
  s.peak_used_bytes = peak_used_;
  s.allocations = allocations_;
  s.frees = frees_;
  s.failed_allocations = failed_allocations_;
  s.backend = "tcp/" + std::to_string(config_.replicas) + " replicas";
  s.read_errors = read_errors_;
  s.write_errors = write_errors_;
  s.checksum_failures = checksum_failures_;
  bool short_of_replicas = false;
  for (const auto& [id, set] : sets_) short_of_replicas |= set.replicas.size() < set.wanted;
  std::size_t responsive = 0;
  bool adopting = false;
  for (const auto& [id, p] : peers_) {
    responsive += p->responsive ? 1 : 0;
    adopting |= p->adopt_from != 0;
  }
  if (!borrowing_ || short_of_replicas || adopting || responsive < peers_.size()) {
    s.state = "degraded";
  } else if (responsive < config_.replicas) {
    s.state = "no peers";
  }
  return s;
}

std::vector<RemotePeerInfo> RemoteTier::Peers() const {
  std::lock_guard lock(mu_);
  std::vector<RemotePeerInfo> out;
  for (const auto& [id, p] : peers_) {
    RemotePeerInfo info;
    info.member = p->member;
    info.responsive = p->responsive;
    info.lend_free = p->lend_free;
    info.failures = p->failures;
    for (const auto& [rid, r] : p->regions) {
      info.granted_bytes += r.bytes;
      info.used_bytes += r.allocator.stats().used_bytes;
      ++info.regions;
    }
    out.push_back(std::move(info));
  }
  return out;
}

RemoteTierCounters RemoteTier::counters() const {
  std::lock_guard lock(mu_);
  return counters_;
}

std::vector<RemoteTier::ReplicaLocation> RemoteTier::LocateForTest(const Extent& extent) const {
  std::lock_guard lock(mu_);
  std::vector<ReplicaLocation> out;
  auto it = sets_.find(extent.offset);
  if (it == sets_.end()) return out;
  for (const Replica& r : it->second.replicas) {
    out.push_back({r.peer->member.node_id, r.region, r.range.offset});
  }
  return out;
}

}  // namespace tierpool
