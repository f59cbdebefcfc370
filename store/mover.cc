#include "store/mover.h"

#include <chrono>
#include <cstdlib>
#include <limits>
#include <utility>

#include "common/logging.h"

namespace tierpool {

Status MoverConfig::validate() const {
  if (max_inflight_bytes_per_link == 0) {
    return Status::InvalidArgument("mover: max in-flight bytes per link must be > 0");
  }
  return Status::Ok();
}

struct Mover::Op {
  std::uint64_t id = 0;
  MoveRequest request;
  QueueKey key;
  std::uint64_t queued_us = 0;
  std::uint64_t started_us = 0;
  // Staging buffer when neither tier is host-mapped (e.g. nvme to remote).
  std::unique_ptr<std::byte, decltype(&std::free)> bounce{nullptr, &std::free};
};

struct Mover::Link {
  LinkStats stats;
  std::map<QueueKey, std::unique_ptr<Op>> queue;
  std::condition_variable wake;
  std::thread worker;
};

Mover::Mover(MoverConfig config, const Clock* clock) : config_(config), clock_(clock) {}

Mover::~Mover() { Stop(); }

Mover::Link& Mover::LinkFor(TierKind from, TierKind to) {
  auto& slot = links_[{from, to}];
  if (!slot) {
    slot = std::make_unique<Link>();
    slot->stats.from = from;
    slot->stats.to = to;
    Link* link = slot.get();
    link->worker = std::thread([this, link] { RunLink(link); });
  }
  return *slot;
}

std::uint64_t Mover::Submit(MoveRequest request) {
  auto op = std::make_unique<Op>();
  op->request = std::move(request);
  op->queued_us = clock_->NowMicros();
  std::unique_lock lock(mu_);
  op->id = next_id_++;
  const std::uint64_t id = op->id;
  if (stopping_) {
    lock.unlock();
    MoveResult r{Status::Unavailable("the mover is stopping"), op->queued_us, 0,
                 clock_->NowMicros(), false};
    op->request.done(r);
    return id;
  }
  const MoveRequest& req = op->request;
  Link& link = LinkFor(req.from->kind(), req.to->kind());
  std::uint64_t deadline =
      req.deadline_us == 0 ? std::numeric_limits<std::uint64_t>::max() : req.deadline_us;
  op->key = {-static_cast<int>(req.priority), deadline, id};
  ++link.stats.submitted;
  ++link.stats.queued;
  ++busy_;
  queued_.emplace(id, std::make_pair(&link, op->key));
  link.queue.emplace(op->key, std::move(op));
  link.wake.notify_one();
  return id;
}

bool Mover::Cancel(std::uint64_t id) {
  std::unique_ptr<Op> op;
  {
    std::lock_guard lock(mu_);
    auto it = queued_.find(id);
    if (it == queued_.end()) return false;
    auto [link, key] = it->second;
    queued_.erase(it);
    auto q = link->queue.find(key);
    op = std::move(q->second);
    link->queue.erase(q);
    --link->stats.queued;
    ++link->stats.cancelled;
    if (--busy_ == 0) idle_.notify_all();
  }
  return true;  // the operation is destroyed here, outside the lock; its callback never runs
}

bool Mover::Expedite(std::uint64_t id, MovePriority priority, std::uint64_t deadline_us) {
  std::lock_guard lock(mu_);
  auto it = queued_.find(id);
  if (it == queued_.end()) return false;
  auto& [link, key] = it->second;
  auto q = link->queue.find(key);
  std::unique_ptr<Op> op = std::move(q->second);
  link->queue.erase(q);
  auto& [neg_priority, deadline, seq] = op->key;
  neg_priority = std::min(neg_priority, -static_cast<int>(priority));
  if (deadline_us != 0) deadline = std::min(deadline, deadline_us);
  op->request.priority = static_cast<MovePriority>(-neg_priority);
  key = op->key;
  link->queue.emplace(op->key, std::move(op));
  link->wake.notify_one();
  return true;
}

void Mover::RunLink(Link* link) {
  std::unique_lock lock(mu_);
  for (;;) {
    link->wake.wait(lock, [&] {
      if (stopping_) return true;
      if (link->queue.empty()) return false;
      const std::uint64_t next = link->queue.begin()->second->request.info.size;
      return link->stats.inflight_ops == 0 ||
             link->stats.inflight_bytes + next <= config_.max_inflight_bytes_per_link;
    });
    if (stopping_) return;
    auto first = link->queue.begin();
    std::unique_ptr<Op> op = std::move(first->second);
    link->queue.erase(first);
    queued_.erase(op->id);
    --link->stats.queued;
    ++link->stats.inflight_ops;
    link->stats.inflight_bytes += op->request.info.size;
    op->started_us = clock_->NowMicros();
    lock.unlock();
    Execute(link, std::move(op));
    lock.lock();
  }
}

void Mover::Execute(Link* link, std::unique_ptr<Op> owned) {
  // The completion may run on another thread (an asynchronous tier), after this returns.
  Op* op = owned.release();
  const MoveRequest& req = op->request;
  auto done = [this, link, op](Status s) {
    if (config_.max_link_bytes_per_sec != 0) {
      // Rate cap: the copy ends no sooner than its bytes take at the capped rate.
      const auto min_us =
          static_cast<std::uint64_t>(1e6 * static_cast<double>(op->request.info.size) /
                                     static_cast<double>(config_.max_link_bytes_per_sec));
      const std::uint64_t took = clock_->NowMicros() - op->started_us;
      if (took < min_us) std::this_thread::sleep_for(std::chrono::microseconds(min_us - took));
    }
    Finish(link, op, std::move(s));
  };
  const std::byte* src = req.from->HostAddress(req.src);
  std::byte* dst = req.to->HostAddress(req.dst);
  if (src != nullptr) {
    req.to->Write(req.dst, req.info, src, std::move(done));
  } else if (dst != nullptr) {
    req.from->Read(req.src, req.info, dst, std::move(done));
  } else {
    // Neither side is host memory: stage through a buffer (both tiers check the bytes).
    op->bounce.reset(static_cast<std::byte*>(
        std::aligned_alloc(4096, std::max<std::uint64_t>(4096, req.src.length))));
    if (!op->bounce) {
      done(Status::ResourceExhausted("no memory to stage a move"));
      return;
    }
    req.from->Read(req.src, req.info, op->bounce.get(), [this, link, op](Status s) {
      if (!s.ok()) return Finish(link, op, std::move(s));
      op->request.to->Write(op->request.dst, op->request.info, op->bounce.get(),
                            [this, link, op](Status w) { Finish(link, op, std::move(w)); });
    });
  }
}

void Mover::Finish(Link* link, Op* raw, Status status) {
  std::unique_ptr<Op> op(raw);
  MoveResult result{std::move(status), op->queued_us, op->started_us, clock_->NowMicros(), false};
  result.missed_deadline =
      op->request.deadline_us != 0 && result.finished_us > op->request.deadline_us;
  auto done = std::move(op->request.done);
  {
    std::lock_guard lock(mu_);
    --link->stats.inflight_ops;
    link->stats.inflight_bytes -= op->request.info.size;
    link->stats.busy_us += result.finished_us - result.started_us;
    link->stats.latency.Record(result.finished_us - result.started_us);
    if (result.status.ok()) {
      ++link->stats.completed;
      link->stats.bytes += op->request.info.size;
    } else {
      ++link->stats.failed;
    }
    if (result.missed_deadline) ++link->stats.deadline_misses;
    if (config_.history > 0) {
      MoveRecord rec{link->stats.from,  link->stats.to,     op->request.info.size,
                     result.started_us, result.finished_us, result.status.ok()};
      if (history_.size() < config_.history) {
        history_.push_back(rec);
      } else {
        history_[history_next_] = rec;
        history_next_ = (history_next_ + 1) % history_.size();
      }
    }
    link->wake.notify_one();
  }
  op.reset();
  if (done) done(result);
  // Idle only once the callback has run: Drain promises its effects are visible.
  std::lock_guard lock(mu_);
  if (--busy_ == 0) idle_.notify_all();
}

void Mover::Drain() {
  std::unique_lock lock(mu_);
  idle_.wait(lock, [&] { return busy_ == 0; });
}

void Mover::Stop() {
  std::vector<std::unique_ptr<Op>> abandoned;
  std::vector<std::thread> workers;
  {
    std::lock_guard lock(mu_);
    if (stopped_) return;
    stopping_ = true;
    for (auto& [key, link] : links_) {
      for (auto& [k, op] : link->queue) abandoned.push_back(std::move(op));
      link->stats.cancelled += link->queue.size();
      link->stats.queued = 0;
      link->queue.clear();
      link->wake.notify_all();
    }
    queued_.clear();
  }
  for (auto& op : abandoned) {
    MoveResult r{Status::Unavailable("the mover stopped before this move started"), op->queued_us,
                 0, clock_->NowMicros(), false};
    if (op->request.done) op->request.done(r);
    std::lock_guard lock(mu_);
    if (--busy_ == 0) idle_.notify_all();
  }
  {
    std::unique_lock lock(mu_);
    idle_.wait(lock, [&] { return busy_ == 0; });
    for (auto& [key, link] : links_) workers.push_back(std::move(link->worker));
  }
  for (auto& w : workers) {
    if (w.joinable()) w.join();
  }
  std::lock_guard lock(mu_);
  stopped_ = true;  // the links stay, for their counters
}

std::vector<MoveRecord> Mover::RecentMoves(std::uint64_t since_us) const {
  std::lock_guard lock(mu_);
  std::vector<MoveRecord> out;
  const std::size_t n = history_.size();
  const std::size_t start = n < config_.history ? 0 : history_next_;
  for (std::size_t i = 0; i < n; ++i) {
    const MoveRecord& r = history_[(start + i) % n];
    if (r.finished_us >= since_us) out.push_back(r);
  }
  return out;
}

void Mover::VisitLinks(const std::function<void(const LinkStats&)>& visit) const {
  std::vector<LinkStats> copy;
  {
    std::lock_guard lock(mu_);
    for (const auto& [key, link] : links_) copy.push_back(link->stats);
  }
  for (const auto& s : copy) visit(s);
}

}  // namespace tierpool
