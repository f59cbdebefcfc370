// The planner's resident tensors ordered by the start of their next prefetch window, for picking
// eviction victims: the one whose window opens last first, ties by the larger tensor index (the
// order a std::set of (window, tensor) walked backwards gives, which the plans were made with).
//
// Windows are steps of the planned iterations, so the set is a bucket per step: a tensor's
// insert and erase (every touch of a resident tensor does both) cost a search in one small
// bucket, and walking down from the latest window skips empty buckets through a two-level bitmap.
// A red-black tree of (window, tensor) pairs spent about a quarter of a planning pass (perf, on
// EfficientNet-V2-L under h100) walking and rebalancing its nodes.
//
// Locking: none; one planning pass owns it.
#pragma once

#include <cstdint>
#include <limits>
#include <vector>

namespace tierpool::prefetch {

class ResidentByWindow {
 public:
  // What a tensor with no next use is keyed by: after every step.
  static constexpr std::int64_t kNoWindow = std::numeric_limits<std::int64_t>::max();

  // Windows are steps in [0, steps), or kNoWindow (a window at or past `steps` is kept, and read
  // back, as kNoWindow).
  explicit ResidentByWindow(std::int64_t steps);

  void Insert(std::int64_t window, std::uint32_t tensor);
  // Removes an entry present with this window.
  void Erase(std::int64_t window, std::uint32_t tensor);
  bool empty() const { return size_ == 0; }

  // Walks the entries from the latest window down. A cursor stays valid while the set does not
  // change.
  class Cursor {
   public:
    bool done() const { return bucket_ < 0; }
    // The entry's window; one past the last step reads as kNoWindow.
    std::int64_t window() const { return bucket_ == set_->last_bucket() ? kNoWindow : bucket_; }
    std::uint32_t tensor() const {
      const auto& bucket = set_->buckets_[static_cast<std::size_t>(bucket_)];
      return bucket[bucket.size() - 1 - pos_];
    }
    void Next() {
      if (++pos_ < set_->buckets_[static_cast<std::size_t>(bucket_)].size()) return;
      pos_ = 0;
      bucket_ = set_->LastNonEmpty(bucket_ - 1);
    }

   private:
    friend class ResidentByWindow;
    Cursor(const ResidentByWindow* set, std::int64_t bucket) : set_(set), bucket_(bucket) {}
    const ResidentByWindow* set_;
    std::int64_t bucket_;  // -1 when done
    std::size_t pos_ = 0;  // in the bucket, counting from its end
  };
  Cursor Latest() const { return Cursor(this, LastNonEmpty(last_bucket())); }

  // Every entry, in no particular order.
  template <class F>
  void ForEach(F&& f) const {
    for (std::size_t b = 0; b < buckets_.size(); ++b) {
      for (std::uint32_t t : buckets_[b]) f(static_cast<std::int64_t>(b), t);
    }
  }

 private:
  std::int64_t last_bucket() const { return static_cast<std::int64_t>(buckets_.size()) - 1; }
  std::size_t BucketOf(std::int64_t window) const;
  // The last non-empty bucket at or below b; -1 if none.
  std::int64_t LastNonEmpty(std::int64_t b) const;
  void Mark(std::size_t bucket, bool non_empty);

  std::vector<std::vector<std::uint32_t>> buckets_;  // each sorted ascending
  std::vector<std::uint64_t> words_;                 // bit b: bucket b non-empty
  std::vector<std::uint64_t> summary_;               // bit w: words_[w] non-zero
  std::size_t size_ = 0;
};

}  // namespace tierpool::prefetch
