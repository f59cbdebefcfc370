#include "tiers/remote_tier.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <set>

#include <spdlog/spdlog.h>

#include "common/checksum.h"
#include "common/units.h"
#include "proto/peer.pb.h"
#include "tiers/remote_tier_peer.h"
#include "transport/peer_connection.h"

namespace tierpool {

Status RemoteTierConfig::validate() const {
  if (replicas == 0) return Status::InvalidArgument("--remote-replicas must be at least 1");
  if (region_bytes < (1u << 20)) return Status::InvalidArgument("remote regions must be >= 1 MiB");
  if (io_threads == 0 || connections_per_peer == 0) {
    return Status::InvalidArgument("remote I/O threads and connections must be positive");
  }
  if (io_timeout_ms == 0) return Status::InvalidArgument("the remote I/O timeout must be positive");
  if (peer_lost_ms == 0) return Status::InvalidArgument("--remote-peer-lost-ms must be positive");
  if (piece_bytes == 0 || piece_bytes > (64ull << 20)) {
    return Status::InvalidArgument("remote transfer pieces must be of 1 byte to 64 MiB");
  }
  return Status::Ok();
}

RemoteTier::RemoteTier(RemoteTierConfig config, transport::PeerAuth auth,
                       transport::PeerIdentity self, const Clock* clock)
    : config_(config),
      auth_(std::move(auth)),
      clock_(clock),
      self_(std::move(self)),
      // A quarter second's bytes at once: a repair pass every 200 ms stays near the rate.
      repair_limit_(config.repair_bytes_per_sec, config.repair_bytes_per_sec / 4 + 1, clock) {
  if (config_.ucx) {
    auto ucx = transport::UcxPeerClient::Create();
    if (ucx.ok()) {
      ucx_ = std::move(ucx).value();
    } else {
      spdlog::error("remote: no UCX data path ({}); replicas move over TCP frames",
                    ucx.status().ToString());
    }
  }
  for (std::uint32_t i = 0; i < config_.io_threads; ++i) {
    workers_.emplace_back([this] { WorkerLoop(); });
  }
  if (config_.background_maintenance) maintenance_ = std::thread([this] { MaintenanceLoop(); });
}

RemoteTier::~RemoteTier() {
  {
    MutexLock lock(jobs_mu_);
    stopping_ = true;
  }
  jobs_cv_.notify_all();
  maintenance_cv_.notify_all();
  if (maintenance_.joinable()) maintenance_.join();
  for (auto& w : workers_) w.join();
}

void RemoteTier::Post(std::function<void()> job) {
  {
    MutexLock lock(jobs_mu_);
    jobs_.push_back(std::move(job));
  }
  jobs_cv_.notify_one();
}

void RemoteTier::WorkerLoop() {
  for (;;) {
    std::function<void()> job;
    {
      UniqueMutexLock lock(jobs_mu_);
      jobs_cv_.wait(lock.native(),
                    [this]() REQUIRES(jobs_mu_) { return stopping_ || !jobs_.empty(); });
      // Queued jobs still run at shutdown: each ends a mover operation someone waits for.
      if (jobs_.empty()) return;
      job = std::move(jobs_.front());
      jobs_.pop_front();
    }
    job();
  }
}

Status RemoteTier::Exchange(Peer& peer, wire::peer::Request* request, const void* payload,
                            std::uint64_t payload_length, wire::peer::Response* response,
                            void* read_dst, std::uint64_t read_capacity) {
  std::unique_ptr<transport::PeerConnection> conn;
  std::string address;
  {
    MutexLock lock(peer.pool_mu);
    if (!peer.idle.empty()) {
      conn = std::move(peer.idle.back());
      peer.idle.pop_back();
    }
    address = peer.address;
  }
  if (!conn) {
    // Only the member we know proves it is there, and we prove ourselves to it alone: someone
    // else at that address (the peer restarted, or a relay passing another lender's challenge
    // through) gets nothing.
    const transport::PeerIdentity member{peer.member.node_id, peer.member.incarnation};
    bool refused = false;
    auto c = transport::PeerConnection::Connect(address, auth_, self_, config_.io_timeout_ms,
                                                &member, &refused);
    if (!c.ok()) {
      peer.heard_failure = true;
      peer.heard_refused = refused;
      return Status(c.status().code(),
                    "peer " + peer.member.node_id + " at " + address + ": " + c.status().message());
    }
    conn = std::move(c).value();
  }
  request->set_lender_incarnation(peer.member.incarnation);
  Status s = conn->Call(request, payload, payload_length, response, read_dst, read_capacity);
  if (conn->broken()) {
    peer.heard_failure = true;
    // The others kept idle are likely broken too (the peer stopped or restarted): the next
    // request connects afresh, and learns at once whether anything listens there.
    MutexLock lock(peer.pool_mu);
    peer.idle.clear();
    return s;
  }
  response->set_lend_free(
      HeardAnswer(peer, response->lend_free(),
                  s.code() == StatusCode::kNotFound &&
                      (request->has_read() || request->has_write() || request->has_release())));
  MutexLock lock(peer.pool_mu);
  if (peer.idle.size() < config_.connections_per_peer) {
    peer.idle.push_back(std::move(conn));
  }
  return s;
}

std::uint64_t RemoteTier::HeardAnswer(Peer& peer, std::uint64_t lend_free, bool region_missing) {
  if (region_missing) {
    peer.heard_missing = true;  // the lender freed a region of ours: the next pass checks all
    WakeMaintenance();
  }
  // What a lender says it has free is never more than it lends (its membership record): a
  // larger figure would be counted as room, and summed over peers could wrap.
  const std::uint64_t free = std::min(lend_free, peer.member.lend_bytes);
  peer.heard_free = free;
  peer.heard_success = true;
  peer.heard_refused = false;
  return free;
}

Status RemoteTier::MoveOverTcp(Peer& peer, const wire::peer::RegionRange& range, bool write,
                               std::byte* data) {
  wire::peer::Request request;
  *(write ? request.mutable_write() : request.mutable_read()) = range;
  wire::peer::Response response;
  return write ? Exchange(peer, &request, data, range.length(), &response)
               : Exchange(peer, &request, nullptr, 0, &response, data, range.length());
}

Status RemoteTier::MoveOverUcx(Peer& peer, const transport::UcxRoute& route,
                               const wire::peer::RegionRange& range, bool write, std::byte* data) {
  transport::UcxCallResult result;
  Status s = ucx_->Call(route, peer.member.incarnation, range, write, data, config_.io_timeout_ms,
                        &result);
  if (result.lend_free != ~0ull) {
    // Answered: the lender lives, whatever it said.
    HeardAnswer(peer, result.lend_free, s.code() == StatusCode::kNotFound);
  } else if (!s.ok() && s.code() != StatusCode::kUnimplemented) {
    peer.heard_failure = true;
  }
  if (s.ok()) (write ? ucx_bytes_written_ : ucx_bytes_read_) += range.length();
  return s;
}

Status RemoteTier::Transfer(Peer& peer, std::uint64_t region, std::uint64_t offset,
                            std::uint64_t length, bool write, std::byte* data) {
  std::shared_ptr<const transport::UcxRoute> route;
  if (ucx_ != nullptr) {
    MutexLock lock(peer.pool_mu);
    route = peer.ucx;
  }
  for (std::uint64_t done = 0; done < length;) {
    wire::peer::RegionRange range;
    range.set_region(region);
    range.set_offset(offset + done);
    range.set_length(std::min(config_.piece_bytes, length - done));
    if (write) range.set_sequence(next_write_++);
    Status s = route != nullptr ? MoveOverUcx(peer, *route, range, write, data + done)
                                : MoveOverTcp(peer, range, write, data + done);
    if (route != nullptr && s.code() == StatusCode::kUnimplemented) {
      // UCX has no transport between us (its address names devices we cannot reach): this peer
      // stays on TCP frames, which reached it all along. Nothing of this piece went over UCX.
      spdlog::warn("remote: {}; peer {} stays on TCP", s.message(), peer.member.node_id);
      MutexLock lock(peer.pool_mu);
      peer.ucx = nullptr;
      peer.ucx_unreachable = true;
      route = nullptr;
      continue;
    }
    if (!s.ok()) {
      return Status(s.code(), std::string(write ? "writing to" : "reading from") + " peer " +
                                  peer.member.node_id + (route != nullptr ? " over UCX" : "") +
                                  ": " + s.message());
    }
    done += range.length();
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
  if (it == r.peer->regions.end()) return;
  if (r.fence_below == 0) {
    (void)it->second.allocator.Free(r.range);
  } else {
    it->second.fenced.emplace_back(r.range, r.fence_below);  // the next probe fences it
  }
}

void RemoteTier::DropCorruptReplicaLocked(std::uint64_t set_id, const Replica& bad) {
  auto it = sets_.find(set_id);
  if (it == sets_.end()) return;
  auto& rs = it->second.replicas;
  auto found = std::find_if(rs.begin(), rs.end(), [&](const Replica& r) { return r.Names(bad); });
  if (found == rs.end()) return;  // dropped already (by another read, or with its peer)
  spdlog::error("remote: a replica on {} no longer matches its checksum; dropped, to be rebuilt",
                bad.peer->member.node_id);
  ReleaseReplicaLocked(*found);
  rs.erase(found);
  ++counters_.replicas_corrupt;
  if (rs.empty()) SetEmptiedLocked(set_id, it->second);
}

void RemoteTier::SetEmptiedLocked(std::uint64_t set_id, const ReplicaSet& set) {
  ++counters_.extents_lost;
  // Named by arena and offset, as the store records it (its length is the store's).
  if (set.written) lost_.push_back({set.info.object_id, Extent{0, set_id, 0}});
}

void RemoteTier::NoteFailedWriteLocked(std::uint64_t set_id, const Replica& failed) {
  auto it = sets_.find(set_id);
  if (it == sets_.end()) return;
  for (Replica& r : it->second.replicas) {
    // Every write numbered so far is below it, this one's pieces included.
    if (r.Names(failed)) r.fence_below = next_write_.load();
  }
}

Result<Extent> RemoteTier::Allocate(std::uint64_t size, const AllocationHint& hint) {
  if (size == 0) return Status::InvalidArgument("empty remote extent");
  MutexLock lock(mu_);
  // Peers with the most granted room first, so replicas spread.
  std::vector<Peer*> order;
  for (auto& [id, p] : peers_) {
    if (UsableLocked(*p)) order.push_back(p.get());
  }
  std::sort(order.begin(), order.end(), [this](const Peer* a, const Peer* b) REQUIRES(mu_) {
    return FreeGrantedLocked(*a) > FreeGrantedLocked(*b);
  });
  ReplicaSet set;
  set.size = size;
  set.wanted = hint.cache ? 1 : config_.replicas;
  std::vector<Peer*> short_of_room;
  for (Peer* p : order) {
    if (set.replicas.size() == set.wanted) break;
    Replica r;
    if (!CarveLocked(*p, size, &r)) {
      short_of_room.push_back(p);
      continue;
    }
    r.peer = peers_.at(p->member.node_id);
    set.replicas.push_back(r);
  }
  if (set.replicas.size() == set.wanted && hint.repair && !repair_limit_.TryTake(size)) {
    for (const Replica& r : set.replicas) ReleaseReplicaLocked(r);
    return Status::ResourceExhausted("remote: rebuilding lost copies at --remote-repair-rate (" +
                                     FormatBytes(config_.repair_bytes_per_sec) + "/s); later");
  }
  if (set.replicas.size() < set.wanted) {
    for (const Replica& r : set.replicas) ReleaseReplicaLocked(r);
    ++failed_allocations_;
    wanted_region_ = std::max(wanted_region_, size);
    for (Peer* p : short_of_room) p->room_needed = std::max(p->room_needed, size);
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
  MutexLock lock(mu_);
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
    MutexLock lock(mu_);
    auto it = sets_.find(dst.offset);
    if (it == sets_.end()) {
      done(Status::NotFound("no remote extent " + std::to_string(dst.offset)));
      return;
    }
    replicas = it->second.replicas;
  }
  // Every replica at once, each on a worker, while this thread checks the source against its
  // checksum: the hash pass and the sends overlap (issue #70), and whichever of them finishes
  // last completes the write. Bytes sent before the check fails are never acknowledged: the
  // write fails and the store frees the extent.
  struct Pending {
    Mutex mu;
    std::size_t left GUARDED_BY(mu);
    Status first_error GUARDED_BY(mu);
    IoCompletion done;
  };
  auto pending = std::make_shared<Pending>();
  {
    MutexLock lock(pending->mu);          // (nobody else has it yet)
    pending->left = replicas.size() + 1;  // the replicas, and the check
  }
  pending->done = std::move(done);
  const std::uint64_t set_id = dst.offset;
  auto finish = [this, pending, set_id, info](const Status& s) {
    bool last = false;
    Status result;
    {
      MutexLock lock(pending->mu);
      if (!s.ok() && pending->first_error.ok()) pending->first_error = s;
      last = --pending->left == 0;
      result = pending->first_error;
    }
    if (!last) return;
    {
      MutexLock lock(mu_);
      if (!result.ok()) ++write_errors_;
      auto it = sets_.find(set_id);
      if (result.ok() && it != sets_.end()) {
        it->second.info = info;
        it->second.written = true;
      }
    }
    pending->done(result);
  };
  for (const Replica& r : replicas) {
    Post([this, r, info, src, set_id, finish] {
      Status s =
          Transfer(*r.peer, r.region, r.range.offset, info.size, true, const_cast<std::byte*>(src));
      if (!s.ok()) {
        MutexLock lock(mu_);
        NoteFailedWriteLocked(set_id, r);
      }
      finish(s);
    });
  }
  finish(info.size > 0 && Xxh3(src, info.size) != info.checksum
             ? Status::DataLoss("bytes to write to remote do not match their checksum")
             : Status::Ok());
}

void RemoteTier::ReadImpl(const Extent& src, const RecordInfo& info, std::byte* dst,
                          IoCompletion done) {
  std::vector<Replica> replicas;
  {
    MutexLock lock(mu_);
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
  const std::uint64_t set_id = src.offset;
  Post([this, replicas, info, dst, set_id, done = std::move(done)] {
    // No replica left (their peers left the cluster): the bytes are gone, NOT_FOUND, which the
    // store reads as a cache object evicted or a retained one lost.
    Status last = Status::NotFound("remote: every replica of this object is lost");
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
          MutexLock lock(mu_);
          ++counters_.read_failovers;
        }
        done(Status::Ok());
        return;
      }
      spdlog::warn("remote read: {}", s.ToString());
      MutexLock lock(mu_);
      ++(wrong ? checksum_failures_ : read_errors_);
      if (wrong) DropCorruptReplicaLocked(set_id, r);  // rebuilt from a good one
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

std::uint64_t RemoteTier::capacity() const {
  MutexLock lock(mu_);
  return CapacityLocked();
}

std::uint64_t RemoteTier::CapacityLocked() const {
  std::uint64_t raw = 0;
  for (const auto& [id, p] : peers_) {
    if (p->dead) continue;
    std::uint64_t lent = p->lend_free;  // at most its lend_bytes (Exchange)
    for (const auto& [rid, r] : p->regions) lent += r.bytes;
    raw += std::min(lent, p->member.lend_bytes);  // a peer lends no more than it says it lends
  }
  return raw / config_.replicas;
}

bool RemoteTier::UsableLocked(const Peer& p) const {
  // A failure the I/O threads just heard counts now, not at the next pass: no more moves are
  // sent to a peer that stopped answering.
  return !p.dead && p.responsive && !p.unconfirmed && !p.heard_failure;
}

std::uint64_t RemoteTier::UnderReplicatedLocked() const {
  std::uint64_t n = 0;
  for (const auto& [id, set] : sets_) n += set.replicas.size() < set.wanted ? 1 : 0;
  return n;
}

std::vector<LostCopy> RemoteTier::TakeLostCopies() {
  MutexLock lock(mu_);
  return std::exchange(lost_, {});
}

bool RemoteTier::LikelyReadable(const Extent& extent) const {
  MutexLock lock(mu_);
  auto it = sets_.find(extent.offset);
  if (it == sets_.end()) return true;  // the read says what is wrong
  for (const Replica& r : it->second.replicas) {
    if (!r.peer->dead && r.peer->responsive && !r.peer->heard_failure) return true;
  }
  return it->second.replicas.empty();  // none left: the read says NOT_FOUND at once
}

std::uint64_t RemoteTier::used_bytes() const {
  MutexLock lock(mu_);
  return used_;
}

Status RemoteTier::CheckWritable() {
  MutexLock lock(mu_);
  std::size_t responsive = 0;
  for (const auto& [id, p] : peers_) responsive += UsableLocked(*p) ? 1 : 0;
  if (responsive < config_.replicas) {
    return Status::Unavailable("remote: " + std::to_string(responsive) + " responsive peers, " +
                               std::to_string(config_.replicas) + " replicas wanted");
  }
  return Status::Ok();
}

TierStats RemoteTier::Stats() const {
  TierStats s;
  s.kind = TierKind::kRemote;
  MutexLock lock(mu_);
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
  const std::uint64_t short_sets = UnderReplicatedLocked();
  std::size_t responsive = 0;
  std::vector<std::string> why;
  for (const auto& [id, p] : peers_) {
    responsive += p->responsive ? 1 : 0;
    if (p->unconfirmed) {
      why.push_back("checking that peer " + p->member.node_id +
                    " still holds our regions (this node's cluster lease lapsed)");
    } else if (!p->responsive && p->introduced) {
      // (A member never reached holds nothing of ours: it degrades nothing. It may not even
      // exist: anyone who can write to etcd can add a record.)
      why.push_back("peer " + p->member.node_id + " at " + p->member.address +
                    " does not answer (" + std::to_string(p->failures) + " failures)");
    }
  }
  if (short_sets > 0) {
    why.push_back(std::to_string(short_sets) + " objects have fewer copies than wanted (a peer " +
                  "that left: rebuilding them)");
  }
  if (repairs_without_room_ > 0) {
    // Not rebuilding those: said, so that an operator looks at --lend rather than waits.
    why.push_back(std::to_string(repairs_without_room_) +
                  " of them have no other answering peer with room for another copy");
  }
  if (!why.empty()) {
    s.state = "degraded";
  } else if (responsive < config_.replicas) {
    s.state = "no peers";
    why.push_back(std::to_string(responsive) + " peers answer, fewer than the " +
                  std::to_string(config_.replicas) + " replicas wanted");
  }
  for (const auto& w : why) s.state_why += (s.state_why.empty() ? "" : "; ") + w;
  return s;
}

std::vector<RemotePeerInfo> RemoteTier::Peers() const {
  MutexLock lock(mu_);
  std::vector<RemotePeerInfo> out;
  for (const auto& [id, p] : peers_) {
    RemotePeerInfo info;
    info.member = p->member;
    info.responsive = p->responsive;
    info.in_membership = p->in_membership;
    info.lend_free = p->lend_free;
    info.failures = p->failures;
    {
      MutexLock pool(p->pool_mu);
      if (p->ucx != nullptr) info.transport = "ucx";
    }
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
  MutexLock lock(mu_);
  RemoteTierCounters c = counters_;
  c.under_replicated = UnderReplicatedLocked();
  c.ucx_bytes_written = ucx_bytes_written_.load();
  c.ucx_bytes_read = ucx_bytes_read_.load();
  return c;
}

std::vector<RemoteTier::ReplicaLocation> RemoteTier::LocateForTest(const Extent& extent) const {
  MutexLock lock(mu_);
  std::vector<ReplicaLocation> out;
  auto it = sets_.find(extent.offset);
  if (it == sets_.end()) return out;
  for (const Replica& r : it->second.replicas) {
    out.push_back({r.peer->member.node_id, r.region, r.range.offset});
  }
  return out;
}

}  // namespace tierpool
