// The host-bound link's timeline on the planned clock: the copy-outs placed so far, as disjoint
// busy intervals. A copy-out goes into the earliest gap after its tensor's last touch that holds
// it, and is issued exactly then, so the copy stream (which runs transfers in issue order) runs
// them as placed. Filling idle gaps in the past is what offloads early, at last use, instead of
// when room is short.
//
// The intervals are kept in blocks of a few dozen, each knowing its widest gap: a search skips
// every block whose gaps are all too narrow instead of walking a fragmented timeline one interval
// at a time (the planner asks for up to 64 candidates per eviction).
//
// Locking: none; one planning pass owns it.
#pragma once

#include <cstddef>
#include <utility>
#include <vector>

namespace tierpool::prefetch {

class LinkCalendar {
 public:
  // The earliest start >= release at which [start, start + dur) is free.
  double Place(double release, double dur) const;
  // Marks [from, to) busy; it must not overlap a busy interval (touching ones merge).
  void Reserve(double from, double to);

 private:
  using Interval = std::pair<double, double>;
  struct Block {
    std::vector<Interval> busy;  // sorted, disjoint, not touching
    double widest_gap = 0;       // between consecutive intervals of this block
  };
  static void Measure(Block& b);
  // The block whose first interval starts last at or before t (0 if none does).
  std::size_t BlockAt(double t) const;

  std::vector<Block> blocks_;  // sorted; none empty
};

}  // namespace tierpool::prefetch
