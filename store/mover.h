// The mover: the operation manager of data movement (the middle layer of store/; see
// docs/architecture.md "Store"). It owns a queue of copy operations per link (a source
// tier and a destination tier) and runs each link as one copy stream, as the replay models it:
// operations start in priority order, then deadline order, then submission order, with the bytes
// in flight on a link bounded. It copies bytes through the tiers' Read and Write; it never
// chooses what moves (the policy does) and knows nothing of objects.
//
// Locking: one internal mutex guards the queues and counters. Completion callbacks run on a
// mover thread (or a tier's completion thread) with no mover lock held, so they may call back
// into the mover and take the store's lock. No method blocks on I/O except Drain and Stop, which
// wait for operations to finish.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <thread>
#include <unordered_map>
#include <vector>

#include "common/clock.h"
#include "common/latency_histogram.h"
#include "common/status.h"
#include "tiers/tier.h"

namespace tierpool {

struct MoverConfig {
  // Bytes a link may have in flight at once; one operation larger than this runs alone.
  std::uint64_t max_inflight_bytes_per_link = 256ull << 20;
  // Caps each link's rate (bytes per second; 0: none): an operation completes no sooner than
  // its bytes take at this rate. Leaves memory bandwidth to the jobs, and lets a live replay
  // run a link at a known speed.
  std::uint64_t max_link_bytes_per_sec = 0;
  // Completed moves remembered for traces (RecentMoves); the oldest go first.
  std::uint32_t history = 65536;
  Status validate() const;
};

// One finished move, for traces (times on the mover's clock).
struct MoveRecord {
  TierKind from = TierKind::kDram;
  TierKind to = TierKind::kHbm;
  std::uint64_t bytes = 0;
  std::uint64_t started_us = 0;
  std::uint64_t finished_us = 0;
  bool ok = false;
};

// Higher runs first. Demand: a client waits for it. Planned: a prefetch with a deadline.
// Background: watermark demotions and spills.
enum class MovePriority : std::uint8_t { kBackground = 0, kPlanned = 1, kDemand = 2 };

struct MoveResult {
  Status status;
  std::uint64_t queued_us = 0;    // clock time when submitted
  std::uint64_t started_us = 0;   // when the copy began (0 when it never did)
  std::uint64_t finished_us = 0;  // when it ended
  bool missed_deadline = false;   // finished after its deadline
};

struct MoveRequest {
  Tier* from = nullptr;
  Extent src;
  Tier* to = nullptr;
  Extent dst;
  RecordInfo info;  // size and checksum of the bytes; both tiers check them
  MovePriority priority = MovePriority::kBackground;
  std::uint64_t deadline_us = 0;  // clock time; 0: none. Earlier first within a priority.
  // Called once when the operation ends (never for an operation removed by Cancel).
  std::function<void(const MoveResult&)> done;
};

// Counters of one link, reported through VisitLinks.
struct LinkStats {
  TierKind from = TierKind::kHbm;
  TierKind to = TierKind::kDram;
  std::uint64_t submitted = 0;
  std::uint64_t completed = 0;  // ended with OK
  std::uint64_t failed = 0;     // ended with an error
  std::uint64_t cancelled = 0;  // removed before they started
  std::uint64_t bytes = 0;      // moved by completed operations
  std::uint64_t deadline_misses = 0;
  std::uint64_t busy_us = 0;  // sum of operation durations
  std::uint64_t queued = 0;   // now
  std::uint64_t inflight_ops = 0;
  std::uint64_t inflight_bytes = 0;
  LatencySnapshot latency;  // of completed and failed operations, from start to end
};

class Mover {
 public:
  explicit Mover(MoverConfig config, const Clock* clock = SystemClock::Default());
  ~Mover();
  Mover(const Mover&) = delete;
  Mover& operator=(const Mover&) = delete;

  // Queues a copy and returns its id (never 0). After Stop, the operation ends at once with
  // UNAVAILABLE (its callback runs on the caller's thread).
  std::uint64_t Submit(MoveRequest request);
  // Removes a queued operation: true when it had not started (its callback will not run);
  // false when it is running or finished (its callback runs or ran).
  bool Cancel(std::uint64_t id);
  // Raises a queued operation's priority or moves its deadline earlier (a reader now waits for
  // it). False when it is no longer queued.
  bool Expedite(std::uint64_t id, MovePriority priority, std::uint64_t deadline_us);
  // Waits until no operation is queued or in flight.
  void Drain();
  // Ends queued operations with UNAVAILABLE, waits for those in flight, joins the threads.
  void Stop();

  void VisitLinks(const std::function<void(const LinkStats&)>& visit) const;
  // Moves that finished at or after since_us, oldest first (at most MoverConfig::history).
  std::vector<MoveRecord> RecentMoves(std::uint64_t since_us) const;

 private:
  struct Op;
  struct Link;
  // Ordering key: priority (higher first), deadline (earlier first, none last), submission.
  using QueueKey = std::tuple<int, std::uint64_t, std::uint64_t>;

  Link& LinkFor(TierKind from, TierKind to);  // requires mu_
  void RunLink(Link* link);
  void Execute(Link* link, std::unique_ptr<Op> op);
  void Finish(Link* link, Op* op, Status status);

  const MoverConfig config_;
  const Clock* clock_;
  mutable std::mutex mu_;
  std::condition_variable idle_;
  std::map<std::pair<TierKind, TierKind>, std::unique_ptr<Link>> links_;
  // id -> where a queued operation sits (its link and queue key), for Cancel and Expedite.
  std::unordered_map<std::uint64_t, std::pair<Link*, QueueKey>> queued_;
  std::uint64_t next_id_ = 1;
  std::uint64_t busy_ = 0;           // operations queued or in flight, all links
  std::vector<MoveRecord> history_;  // a ring of the last config_.history moves
  std::size_t history_next_ = 0;
  bool stopping_ = false;
  bool stopped_ = false;  // workers joined
};

}  // namespace tierpool
