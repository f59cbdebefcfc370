// How many objects the index may hold, in all and per namespace: what no tier's capacity bounds
// (a million empty objects with 1 KiB keys took 939 MB of the server's memory, issue #76).
//
// Counts are sloppy, so that a put touches no line other threads' puts write: each part of the
// index (store/object_index.h) keeps its own change and adds it to the shared counts every
// kFlushEvery objects, so a shared count is off by less than kFlushEvery per part (and per
// part and namespace). A put under the store's shared lock is let through while the shared counts
// are further than that slack from a limit; nearer, it goes to the exclusive path, which counts
// exactly (ObjectIndex::ObjectsExactly) and refuses with the limit's name.
//
// Locking: the shared counts are atomics; the namespace table has a mutex of its own, taken
// inside a part's lock (never the other way), when a part gets its first object of a namespace
// or loses its last.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

namespace tierpool {

class ObjectCountLimits {
 public:
  static constexpr std::int64_t kFlushEvery = 64;

  // One namespace's shared count; lives while a part has objects of it.
  struct NamespaceTotal {
    std::atomic<std::int64_t> objects{0};
    std::uint32_t entries = 0;  // parts with objects of it; guarded by mu_
  };

  // 0: no limit. Set before any object is made.
  void Set(std::uint64_t total, std::uint64_t per_namespace, std::uint64_t slack) {
    max_total_ = total;
    max_per_namespace_ = per_namespace;
    slack_ = slack;
  }
  std::uint64_t max_total() const { return max_total_; }
  std::uint64_t max_per_namespace() const { return max_per_namespace_; }

  NamespaceTotal* Attach(const std::string& ns) {
    std::lock_guard lock(mu_);
    auto& t = totals_[ns];
    if (!t) t = std::make_unique<NamespaceTotal>();
    ++t->entries;
    return t.get();
  }
  void Detach(const std::string& ns, NamespaceTotal* t, std::int64_t unflushed) {
    t->objects.fetch_add(unflushed, std::memory_order_relaxed);
    std::lock_guard lock(mu_);
    if (--t->entries == 0) totals_.erase(ns);
  }
  // A part's count of all objects, or of one namespace's, changed by delta: flushed to `shared`
  // once the part's change reaches kFlushEvery either way.
  static void Count(std::int64_t* unflushed, std::atomic<std::int64_t>* shared,
                    std::int64_t delta) {
    *unflushed += delta;
    if (*unflushed >= kFlushEvery || *unflushed <= -kFlushEvery) {
      shared->fetch_add(*unflushed, std::memory_order_relaxed);
      *unflushed = 0;
    }
  }
  std::atomic<std::int64_t>* total() { return &total_; }
  // Whether one more object of the namespace might pass a limit, by the sloppy counts.
  bool Near(const NamespaceTotal& ns) const {
    return Near(total_.load(std::memory_order_relaxed), max_total_) ||
           Near(ns.objects.load(std::memory_order_relaxed), max_per_namespace_);
  }
  // The same for any namespace: false while the total is far below both limits.
  bool AnyNear() const {
    const std::int64_t n = total_.load(std::memory_order_relaxed);
    return Near(n, max_total_) || Near(n, max_per_namespace_);
  }

 private:
  bool Near(std::int64_t count, std::uint64_t limit) const {
    return limit != 0 &&
           count + static_cast<std::int64_t>(slack_) >= static_cast<std::int64_t>(limit);
  }

  std::uint64_t max_total_ = 0, max_per_namespace_ = 0, slack_ = 0;
  std::atomic<std::int64_t> total_{0};
  std::mutex mu_;
  std::unordered_map<std::string, std::unique_ptr<NamespaceTotal>> totals_;  // guarded by mu_
};

}  // namespace tierpool
