// The planner's queue of loads whose window has opened but that have not been issued, in the
// order of the use each serves (ties by tensor). Each step the planner issues the longest prefix
// whose bytes fit in the room it has, and the rest wait a step. The bytes of every prefix are kept
// in a Fenwick tree over use steps, so a step's cut costs O(log steps) however long the queue
// grows (a walk back from the end, one load at a time, made tight budgets on large graphs slow).
//
// Locking: none; one planning pass owns it.
#pragma once

#include <cstdint>
#include <set>
#include <utility>
#include <vector>

namespace tierpool::prefetch {

class WaitingLoads {
 public:
  using Entry = std::pair<std::int64_t, std::uint32_t>;  // (use step, tensor)
  using Iterator = std::set<Entry>::const_iterator;

  // Uses are steps in [0, steps).
  WaitingLoads(std::int64_t steps, std::size_t tensors);

  // Adds a load of `bytes` for `tensor`, serving step `use`; a tensor waits once.
  void Add(std::uint32_t tensor, std::int64_t use, std::uint64_t bytes);
  bool Contains(std::uint32_t tensor) const { return waiting_[tensor] != 0; }
  bool empty() const { return loads_.empty(); }
  std::uint64_t bytes() const { return bytes_; }

  // Where the loads to issue end: the longest prefix whose bytes are at most `room` (negative:
  // none), but never before a load that serves a step at or before `now` (those cannot wait).
  Iterator Cut(std::int64_t room, std::int64_t now) const;
  // The bytes of the loads before `cut`.
  std::uint64_t BytesBefore(Iterator cut) const;
  Iterator begin() const { return loads_.begin(); }
  Iterator end() const { return loads_.end(); }
  // Removes a load (issued); returns the next.
  Iterator Erase(Iterator it);

 private:
  void Update(std::int64_t use, std::int64_t delta);
  std::int64_t Prefix(std::int64_t uses) const;  // bytes of uses in [0, uses)

  std::set<Entry> loads_;
  std::vector<std::uint64_t> size_;  // by tensor, while it waits
  std::vector<char> waiting_;        // by tensor
  std::vector<std::int64_t> tree_;   // Fenwick, 1-based over use steps
  std::uint64_t bytes_ = 0;
};

}  // namespace tierpool::prefetch
