#include "store/lender.h"

#include <sys/socket.h>

#include <chrono>
#include <set>

#include <spdlog/spdlog.h>

#include "common/units.h"
#include "transport/peer_wire.h"

namespace tierpool {

Status LenderConfig::validate() const {
  if (lend_bytes == 0) return Status::InvalidArgument("--lend must be positive to lend");
  if (max_grant_bytes == 0) return Status::InvalidArgument("the largest grant must be positive");
  if (!(reserved_share >= 0 && reserved_share <= 1)) {
    return Status::InvalidArgument("--lend-reserved-share must be from 0 to 1");
  }
  return Status::Ok();
}

Result<std::unique_ptr<Lender>> Lender::Create(const LenderConfig& config, const Clock* clock) {
  TIERPOOL_RETURN_IF_ERROR(config.validate());
  MemfdArenaOptions options;
  options.name = "tierpool-lent";
  options.size = config.lend_bytes;
  options.populate = config.populate;
  auto arena = MemfdArena::Create(options);
  if (!arena.ok()) return arena.status();
  return std::unique_ptr<Lender>(new Lender(config, std::move(arena).value(), clock));
}

Lender::Lender(LenderConfig config, std::unique_ptr<MemfdArena> arena, const Clock* clock)
    : config_(config),
      arena_(std::move(arena)),
      clock_(clock),
      allocator_(ExtentAllocatorConfig{arena_->size(), 4096}) {
  counters_.capacity = arena_->size();
}

void Lender::FillRoom(const transport::PeerIdentity& peer, wire::peer::Response* response) {
  MutexLock lock(mu_);
  response->set_lend_capacity(allocator_.stats().capacity);
  response->set_lend_free(RoomForLocked(peer.node_id));
  response->set_room_wanted(RoomWantedByOthersLocked(peer.node_id));
}

void Lender::NoteUnmetLocked(const std::string& node) {
  ++counters_.unmet_grants;
  const std::uint64_t now = clock_->NowMicros();
  // Pruned here, so the map holds no more than the nodes refused within the window.
  for (auto it = room_wanted_until_.begin(); it != room_wanted_until_.end();) {
    it = it->second <= now ? room_wanted_until_.erase(it) : std::next(it);
  }
  room_wanted_until_[node] = now + std::uint64_t{config_.room_wanted_ms} * 1000;
}

bool Lender::RoomWantedByOthersLocked(const std::string& node) const {
  const std::uint64_t now = clock_->NowMicros();
  for (const auto& [who, until] : room_wanted_until_) {
    if (who != node && until > now) return true;
  }
  return false;
}

bool Lender::SharesLocked(const std::string& member, std::uint64_t incarnation) const {
  if (heard_.count({member, incarnation}) != 0) return true;
  // A member just listed has its part kept while it comes up (its first probe is a second
  // away), so that another member asking first cannot take it; one silent past that has none.
  auto listed = listed_since_.find({member, incarnation});
  return listed != listed_since_.end() &&
         clock_->NowMicros() - listed->second < std::uint64_t{config_.share_probation_ms} * 1000;
}

std::uint64_t Lender::RoomForLocked(const std::string& node) const {
  if (config_.grants_wait_for_members && !members_heard_) return 0;
  const std::uint64_t free = allocator_.stats().free_bytes;
  // O(members) per reply: clusters have tens to hundreds of nodes. A member has a part only once
  // it has proved on the peer link that it holds the cluster's secret: a record written into
  // etcd by anyone else keeps nothing from anyone.
  std::uint64_t sharers = 0;
  bool asker_shares = false;
  for (const auto& [member, incarnation] : live_) {
    if (!SharesLocked(member, incarnation)) continue;
    ++sharers;
    asker_shares = asker_shares || member == node;
  }
  const std::uint64_t others = sharers - (asker_shares ? 1 : 0);
  if (others == 0 || config_.reserved_share <= 0) return free;
  // Each member's part; a stranger asking changes nobody's.
  const std::uint64_t part = static_cast<std::uint64_t>(
      config_.reserved_share * static_cast<double>(allocator_.stats().capacity) /
      static_cast<double>(sharers));
  std::uint64_t kept = 0;
  for (const auto& [member, incarnation] : live_) {
    if (member == node || !SharesLocked(member, incarnation)) continue;
    auto h = held_.find(member);
    const std::uint64_t held = h == held_.end() ? 0 : h->second;
    if (held < part) kept += part - held;
  }
  return free > kept ? free - kept : 0;
}

void Lender::Handle(const transport::PeerIdentity& peer, const wire::peer::Request& request,
                    wire::peer::Response* response) {
  auto refuse = [response](const Status& s) {
    response->set_code(static_cast<std::uint32_t>(s.code()));
    response->set_message(s.message());
  };
  UniqueMutexLock lock(mu_);
  heard_[{peer.node_id, peer.incarnation}] = clock_->NowMicros();
  switch (request.op_case()) {
    case wire::peer::Request::kGrant: {
      const std::uint64_t bytes = request.grant().bytes();
      if (bytes == 0 || bytes > config_.max_grant_bytes) {
        refuse(Status::InvalidArgument("a grant must be of 1 byte to " +
                                       FormatBytes(config_.max_grant_bytes)));
        return;
      }
      if (config_.grants_wait_for_members && !members_heard_) {
        refuse(Status::Unavailable("this lender has not heard the cluster's members yet"));
        return;
      }
      if (const std::uint64_t room = RoomForLocked(peer.node_id);
          bytes > room && bytes <= allocator_.stats().free_bytes) {
        ++counters_.share_refusals;
        NoteUnmetLocked(peer.node_id);
        refuse(Status::ResourceExhausted(
            "no " + FormatBytes(bytes) + " left to lend to " + peer.node_id + " (" +
            FormatBytes(room) + " of it; the rest of what is free is kept for other members)"));
        return;
      }
      auto range = allocator_.Allocate(bytes);
      if (!range) {
        NoteUnmetLocked(peer.node_id);
        refuse(Status::ResourceExhausted("no " + FormatBytes(bytes) + " left to lend (" +
                                         FormatBytes(allocator_.stats().free_bytes) + " free)"));
        return;
      }
      const std::uint64_t id = next_region_++;
      regions_[id] = Region{peer.node_id, peer.incarnation, *range, 0, false};
      held_[peer.node_id] += range->length;
      response->set_region(id);
      response->set_region_bytes(range->length);
      spdlog::debug("lent region {} ({}) to {}", id, FormatBytes(range->length), peer.node_id);
      return;
    }
    case wire::peer::Request::kRelease: {
      auto it = regions_.find(request.release().region());
      if (it == regions_.end() || it->second.released || it->second.node_id != peer.node_id ||
          it->second.incarnation != peer.incarnation) {
        ++counters_.stale_refusals;
        refuse(Status::NotFound("no region " + std::to_string(request.release().region()) +
                                " of yours here"));
        return;
      }
      ReleaseLocked(it);
      return;
    }
    case wire::peer::Request::kInfo: {
      if (request.info().regions_size() > transport::kMaxInfoRegions ||
          request.info().fences_size() > transport::kMaxInfoRegions) {
        refuse(Status::InvalidArgument("an info request asks after at most " +
                                       std::to_string(transport::kMaxInfoRegions) + " regions"));
        return;
      }
      if (request.info().release_all()) {
        const std::uint64_t freed = ReleaseHolderLocked(peer.node_id, peer.incarnation);
        counters_.regions_released_unknown += freed;
        if (freed > 0) {
          spdlog::info("freed {} regions {} no longer knows of (it met this node anew)", freed,
                       peer.node_id);
        }
      }
      for (std::uint64_t id : request.info().regions()) {
        auto it = regions_.find(id);
        if (it == regions_.end() || it->second.released || it->second.node_id != peer.node_id ||
            it->second.incarnation != peer.incarnation) {
          response->add_missing_regions(id);
        }
      }
      if (request.info().fences_size() > 0) FenceLocked(lock, peer, request.info(), response);
      return;
    }
    case wire::peer::Request::kAdopt: {
      // Only the same node's earlier life: the regions move to the incarnation that asks.
      const std::uint64_t previous = request.adopt().previous_incarnation();
      if (previous == 0 || previous == peer.incarnation) {
        refuse(Status::InvalidArgument("adopt names no earlier incarnation"));
        return;
      }
      for (auto& [id, r] : regions_) {
        if (r.released || r.node_id != peer.node_id || r.incarnation != previous) continue;
        r.incarnation = peer.incarnation;
        response->add_adopted_regions(id);
      }
      counters_.regions_adopted += static_cast<std::uint64_t>(response->adopted_regions_size());
      if (response->adopted_regions_size() > 0) {
        spdlog::info("{} came back as incarnation {:x} and kept {} regions", peer.node_id,
                     peer.incarnation, response->adopted_regions_size());
      }
      return;
    }
    default:
      refuse(Status::InvalidArgument("unknown peer request"));
  }
}

Result<transport::PeerTransfer> Lender::BeginTransfer(const transport::PeerIdentity& peer,
                                                      const wire::peer::RegionRange& range,
                                                      bool write, transport::TransferStop stop) {
  MutexLock lock(mu_);
  heard_[{peer.node_id, peer.incarnation}] = clock_->NowMicros();
  auto it = regions_.find(range.region());
  if (it == regions_.end() || it->second.released || it->second.node_id != peer.node_id ||
      it->second.incarnation != peer.incarnation) {
    ++counters_.stale_refusals;
    return Status::NotFound("no region " + std::to_string(range.region()) +
                            " of yours here (freed, or granted to another)");
  }
  Region& r = it->second;
  if (range.length() == 0 || range.offset() > r.range.length ||
      range.length() > r.range.length - range.offset()) {
    return Status::InvalidArgument("range outside region " + std::to_string(range.region()));
  }
  if (write && range.sequence() < r.fence) {
    ++counters_.fenced_writes;
    return Status::Aborted("a write to region " + std::to_string(range.region()) +
                           " sent before its borrower gave up on it (fenced)");
  }
  const std::uint64_t transfer = next_transfer_++;
  r.in_flight[transfer] = InFlight{write, range.sequence(), std::move(stop)};
  transport::PeerTransfer t;
  t.data = arena_->base() + r.range.offset + range.offset();
  const std::uint64_t id = range.region();
  t.hold =
      std::shared_ptr<void>(nullptr, [this, id, transfer](void*) { EndTransfer(id, transfer); });
  return t;
}

void Lender::EndTransfer(std::uint64_t id, std::uint64_t transfer) {
  MutexLock lock(mu_);
  auto it = regions_.find(id);
  if (it == regions_.end()) return;
  auto& in_flight = it->second.in_flight;
  auto t = in_flight.find(transfer);
  if (t == in_flight.end()) return;
  if (t->second.write) transfer_ended_.notify_all();  // a fence may wait for it
  in_flight.erase(t);
  if (in_flight.empty() && it->second.released) ReleaseLocked(it);
}

void Lender::FenceLocked(UniqueMutexLock& lock, const transport::PeerIdentity& peer,
                         const wire::peer::Info& info, wire::peer::Response* response) {
  // The caller's regions among those named (one it no longer holds takes no write: fenced).
  std::map<std::uint64_t, std::uint64_t> below;
  for (const auto& f : info.fences()) {
    auto it = regions_.find(f.region());
    if (it == regions_.end()) {
      response->add_fenced_regions(f.region());
      continue;
    }
    Region& r = it->second;
    if (r.node_id != peer.node_id || r.incarnation != peer.incarnation) continue;
    r.fence = std::max(r.fence, f.below());
    below[f.region()] = r.fence;
  }
  // A payload still arriving for a write below the fence is cut off where it is (its stop: the
  // TCP connection shut down, the UCX receive canceled), and the transfer then lets go.
  auto stopping = [&](std::uint64_t id) REQUIRES(mu_) {
    auto it = regions_.find(id);
    if (it == regions_.end()) return false;
    for (const auto& [transfer, w] : it->second.in_flight) {
      if (w.write && w.sequence < below[id]) return true;
    }
    return false;
  };
  for (const auto& [id, fence] : below) {
    for (const auto& [transfer, w] : regions_.at(id).in_flight) {
      if (w.write && w.sequence < fence && w.stop) {
        w.stop();
        ++counters_.fenced_writes;
      }
    }
  }
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(1);
  for (const auto& entry : below) {
    const std::uint64_t id = entry.first;  // (clang 14 cannot capture a structured binding)
    if (transfer_ended_.wait_until(lock.native(), until,
                                   [&]() REQUIRES(mu_) { return !stopping(id); })) {
      response->add_fenced_regions(id);
    }
  }
}

void Lender::ReleaseLocked(std::unordered_map<std::uint64_t, Region>::iterator it) {
  it->second.released = true;
  if (!it->second.in_flight.empty()) {
    // Freed when the last transfer ends; none of their bytes matter now, so they are stopped (a
    // transfer its borrower gave up on over UCX would otherwise hold the region until UCX's
    // keepalive found that borrower's endpoint gone).
    for (const auto& [transfer, w] : it->second.in_flight) {
      if (w.stop) w.stop();
    }
    return;
  }
  (void)allocator_.Free(it->second.range);
  auto h = held_.find(it->second.node_id);
  if (h != held_.end() && (h->second -= std::min(h->second, it->second.range.length)) == 0) {
    held_.erase(h);
  }
  regions_.erase(it);
}

void Lender::SetLiveBorrowers(const std::map<std::string, std::uint64_t>& live) {
  MutexLock lock(mu_);
  live_ = live;
  members_heard_ = true;
  const std::uint64_t now = clock_->NowMicros();
  for (auto it = listed_since_.begin(); it != listed_since_.end();) {
    auto found = live.find(it->first.first);
    it = found != live.end() && found->second == it->first.second ? std::next(it)
                                                                  : listed_since_.erase(it);
  }
  for (const auto& [member, incarnation] : live)
    listed_since_.emplace(std::pair{member, incarnation}, now);
  const std::uint64_t grace = std::uint64_t{config_.borrower_grace_ms} * 1000;
  std::set<std::pair<std::string, std::uint64_t>> holders;
  for (const auto& [id, r] : regions_) {
    if (!r.released) holders.insert({r.node_id, r.incarnation});
  }
  for (auto it = missing_since_.begin(); it != missing_since_.end();) {
    it = holders.count(it->first) != 0 ? std::next(it) : missing_since_.erase(it);
  }
  for (auto it = heard_.begin(); it != heard_.end();) {
    // Kept while it holds regions or is a member (its share), dropped once it is neither.
    auto found = live.find(it->first.first);
    const bool member = found != live.end() && found->second == it->first.second;
    it = member || holders.count(it->first) != 0 ? std::next(it) : heard_.erase(it);
  }
  for (const auto& h : holders) {
    auto found = live.find(h.first);
    if (found != live.end() && found->second == h.second) {
      missing_since_.erase(h);
      continue;
    }
    // Gone from the membership is not gone: etcd may have lost its record (restarted empty, a
    // key deleted, the node cut from etcd alone) while it still uses what it holds here. Only a
    // borrower neither a member nor heard on the peer link for the grace period has left.
    auto [m, fresh] = missing_since_.emplace(h, now);
    if (fresh || now - m->second < grace) continue;
    if (auto heard = heard_.find(h); heard != heard_.end() && now - heard->second < grace) continue;
    const std::uint64_t freed = ReleaseHolderLocked(h.first, h.second);
    counters_.regions_reclaimed += freed;
    missing_since_.erase(m);
    heard_.erase(h);
    spdlog::info("freed {} regions lent to {} (incarnation {:x}), gone from the cluster", freed,
                 h.first, h.second);
  }
}

std::uint64_t Lender::ReleaseHolderLocked(const std::string& node, std::uint64_t incarnation) {
  std::uint64_t freed = 0;
  for (auto it = regions_.begin(); it != regions_.end();) {
    auto next = std::next(it);
    if (!it->second.released && it->second.node_id == node &&
        it->second.incarnation == incarnation) {
      ReleaseLocked(it);
      ++freed;
    }
    it = next;
  }
  return freed;
}

void Lender::DropAllForTest() {
  MutexLock lock(mu_);
  for (auto it = regions_.begin(); it != regions_.end();) {
    auto next = std::next(it);
    if (!it->second.released) ReleaseLocked(it);
    it = next;
  }
  missing_since_.clear();
}

LenderStats Lender::stats() const {
  MutexLock lock(mu_);
  LenderStats s = counters_;
  s.capacity = allocator_.stats().capacity;
  s.granted_bytes = allocator_.stats().used_bytes;
  std::set<std::pair<std::string, std::uint64_t>> borrowers;
  for (const auto& [id, r] : regions_) {
    if (!r.released) {
      ++s.regions;
      borrowers.insert({r.node_id, r.incarnation});
    }
  }
  s.borrowers = borrowers.size();
  s.borrowing_members = 0;
  for (const auto& [member, incarnation] : live_) {
    s.borrowing_members += SharesLocked(member, incarnation) ? 1 : 0;
  }
  return s;
}

std::byte* Lender::RegionBytesForTest(std::uint64_t region) {
  MutexLock lock(mu_);
  auto it = regions_.find(region);
  return it == regions_.end() ? nullptr : arena_->base() + it->second.range.offset;
}

std::uint64_t Lender::HeldBytesForTest() const {
  MutexLock lock(mu_);
  std::uint64_t sum = 0;
  for (const auto& [node, bytes] : held_) sum += bytes;
  return sum;
}

}  // namespace tierpool
