#include "transport/ring_registry.h"

#include <algorithm>

namespace tierpool::transport {

Result<std::shared_ptr<RingRegistry::Entry>> RingRegistry::Open(std::function<void()> wake) {
  std::lock_guard lock(mu_);
  if (open_->fetch_add(1) >= max_rings_) {
    --*open_;
    return Status::ResourceExhausted("tierpoold has " + std::to_string(max_rings_) +
                                     " request rings open (--max-request-rings)");
  }
  auto ring = RequestRing::Create();
  if (!ring.ok()) {
    --*open_;
    return ring.status();
  }
  auto entry = std::make_shared<Entry>(std::move(ring).value());
  entry->wake = std::move(wake);
  entry->ring.control().server_polling.store(polling_threads_ > 0 ? 1 : 0);
  entries_.push_back(entry);
  count_.store(entries_.size(), std::memory_order_relaxed);
  return entry;
}

void RingRegistry::Close(const Entry* entry) {
  std::lock_guard lock(mu_);
  auto it = std::find_if(entries_.begin(), entries_.end(),
                         [entry](const auto& e) { return e.get() == entry; });
  if (it == entries_.end()) return;
  --*open_;
  *it = std::move(entries_.back());
  entries_.pop_back();
  count_.store(entries_.size(), std::memory_order_relaxed);
}

bool RingRegistry::Poll() {
  if (count_.load(std::memory_order_relaxed) == 0) return false;
  // Woken outside the lock: a session served inline may close its ring.
  std::vector<std::shared_ptr<Entry>> woken;
  {
    // Only the loop's thread takes mu_, so this never waits; a try-lock keeps it so if a
    // registry is ever shared again.
    std::unique_lock lock(mu_, std::try_to_lock);
    if (!lock.owns_lock()) return false;
    for (const auto& e : entries_) {
      const std::uint32_t seq = e->ring.control().request_seq.load(std::memory_order_acquire);
      std::uint32_t handed = e->handed.load(std::memory_order_relaxed);
      if (seq != handed && e->handed.compare_exchange_strong(handed, seq)) woken.push_back(e);
    }
  }
  const bool any = !woken.empty();
  for (const auto& e : woken) e->wake();
  return any;
}

bool RingRegistry::Sleep() {
  std::lock_guard lock(mu_);
  if (--polling_threads_ > 0 || entries_.empty()) return false;
  for (const auto& e : entries_) e->ring.control().server_polling.store(0);
  // A client that bumped request_seq before it could see server_polling at 0 sent no doorbell:
  // its request is seen here (both sides' accesses are sequentially consistent).
  for (const auto& e : entries_) {
    if (e->ring.control().request_seq.load() != e->handed.load()) return true;
  }
  return false;
}

void RingRegistry::Wake() {
  std::lock_guard lock(mu_);
  if (polling_threads_++ > 0) return;
  for (const auto& e : entries_) e->ring.control().server_polling.store(1);
}

}  // namespace tierpool::transport
