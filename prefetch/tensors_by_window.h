// Tensors ordered by a window (a step of the planned iterations), for the planner's pass
// (plan_pass.cc): the resident tensors by the start of their next prefetch window, walked down
// from the latest to pick eviction victims (ties by the larger tensor index: the order a std::set
// of (window, tensor) walked backwards gives, which the plans were made with); and the tensors
// out of hbm by the window of their next use, walked up from a step for early loads (ties by
// the smaller index, the set's order walked forwards).
//
// Windows are steps, so the set is a bucket per step: a tensor's insert and erase (every touch
// of a resident tensor does both) cost a search in one small bucket, and a walk skips empty
// buckets through a two-level bitmap. A red-black tree of (window, tensor) pairs spent about a
// quarter of a planning pass (perf, on EfficientNet-V2-L under h100) walking and rebalancing its
// nodes, and a node allocation on every insert.
//
// Locking: none; one planning pass owns it.
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <vector>

namespace tierpool::prefetch {

class TensorsByWindow {
 public:
  // What a tensor with no next use is keyed by: after every step.
  static constexpr std::int64_t kNoWindow = std::numeric_limits<std::int64_t>::max();

  // Windows are steps in [0, steps), or kNoWindow (a window at or past `steps` is kept, and read
  // back, as kNoWindow).
  explicit TensorsByWindow(std::int64_t steps);
  // Empty, for windows in [0, steps), keeping the buckets' memory.
  void Reset(std::int64_t steps);

  void Insert(std::int64_t window, std::uint32_t tensor);
  // Removes an entry present with this window.
  void Erase(std::int64_t window, std::uint32_t tensor);
  bool empty() const { return size_ == 0; }

  // Walks the entries from the latest window down (Latest), or up from a window (From). A cursor
  // stays valid while the set does not change.
  class Cursor {
   public:
    bool done() const { return bucket_ < 0; }
    // The entry's window; one past the last step reads as kNoWindow.
    std::int64_t window() const { return bucket_ == set_->last_bucket() ? kNoWindow : bucket_; }
    std::uint32_t tensor() const {
      const auto& bucket = set_->buckets_[static_cast<std::size_t>(bucket_)];
      return up_ ? bucket[pos_] : bucket[bucket.size() - 1 - pos_];
    }
    void Next() {
      if (++pos_ < set_->buckets_[static_cast<std::size_t>(bucket_)].size()) return;
      pos_ = 0;
      bucket_ = up_ ? set_->FirstNonEmpty(bucket_ + 1) : set_->LastNonEmpty(bucket_ - 1);
    }

   private:
    friend class TensorsByWindow;
    Cursor(const TensorsByWindow* set, std::int64_t bucket, bool up)
        : set_(set), bucket_(bucket), up_(up) {}
    const TensorsByWindow* set_;
    std::int64_t bucket_;  // -1 when done
    bool up_;
    std::size_t pos_ = 0;  // in the bucket, counting from its end when walking down
  };
  Cursor Latest() const { return Cursor(this, LastNonEmpty(last_bucket()), false); }
  // The entries with windows at or after `window`, from the earliest up.
  Cursor From(std::int64_t window) const {
    return Cursor(
        this, window > last_bucket() ? -1 : FirstNonEmpty(std::max<std::int64_t>(window, 0)), true);
  }

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
  // The first non-empty bucket at or above b; -1 if none.
  std::int64_t FirstNonEmpty(std::int64_t b) const;
  void Mark(std::size_t bucket, bool non_empty);

  std::vector<std::vector<std::uint32_t>> buckets_;  // each sorted ascending
  std::vector<std::uint64_t> words_;                 // bit b: bucket b non-empty
  std::vector<std::uint64_t> summary_;               // bit w: words_[w] non-zero
  std::size_t size_ = 0;
};

}  // namespace tierpool::prefetch
