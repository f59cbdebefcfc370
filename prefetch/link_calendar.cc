#include "prefetch/link_calendar.h"

#include <algorithm>

namespace tierpool::prefetch {
namespace {
constexpr std::size_t kBlock = 32;  // a block splits in two past twice this
}  // namespace

void LinkCalendar::Measure(Block& b) {
  b.widest_gap = 0;
  for (std::size_t i = 1; i < b.busy.size(); ++i) {
    b.widest_gap = std::max(b.widest_gap, b.busy[i].first - b.busy[i - 1].second);
  }
}

std::size_t LinkCalendar::BlockAt(double t) const {
  auto it = std::upper_bound(blocks_.begin(), blocks_.end(), t,
                             [](double v, const Block& b) { return v < b.busy.front().first; });
  return it == blocks_.begin() ? 0 : static_cast<std::size_t>(it - blocks_.begin()) - 1;
}

double LinkCalendar::Place(double release, double dur) const {
  double t = release;
  for (std::size_t b = BlockAt(release); b < blocks_.size(); ++b) {
    const auto& busy = blocks_[b].busy;
    if (busy.front().first >= t + dur) return t;  // the gap before this block holds it
    if (busy.back().second <= t) continue;        // all of it is behind t
    // No gap inside is wide enough (a gap narrowed by t is narrower still): the search goes on
    // past the block's end. The margin leaves a gap within rounding of `dur` to the walk below,
    // which decides it as an interval-by-interval search would.
    if (blocks_[b].widest_gap < dur - 1e-6) {
      t = std::max(t, busy.back().second);
      continue;
    }
    auto it = std::upper_bound(busy.begin(), busy.end(), t,
                               [](double v, const Interval& i) { return v < i.first; });
    if (it != busy.begin()) t = std::max(t, std::prev(it)->second);
    for (; it != busy.end() && it->first < t + dur; ++it) t = std::max(t, it->second);
    if (it != busy.end()) return t;
  }
  return t;
}

void LinkCalendar::Reserve(double from, double to) {
  if (blocks_.empty()) {
    blocks_.push_back({{{from, to}}, 0});
    return;
  }
  const std::size_t b = BlockAt(from);
  auto& busy = blocks_[b].busy;
  auto next = std::lower_bound(busy.begin(), busy.end(), from,
                               [](const Interval& i, double v) { return i.first < v; });
  // Touching neighbours merge, which keeps the timeline (and Place's search) short. The one
  // after is in this block or starts the next; the one before is in this block or ends the
  // previous one.
  if (next != busy.end()) {
    if (next->first <= to) {
      to = std::max(to, next->second);
      next = busy.erase(next);
    }
  } else if (b + 1 < blocks_.size() && blocks_[b + 1].busy.front().first <= to) {
    auto& after = blocks_[b + 1].busy;
    to = std::max(to, after.front().second);
    after.erase(after.begin());
    if (after.empty()) {
      blocks_.erase(blocks_.begin() + static_cast<std::ptrdiff_t>(b) + 1);
    } else {
      Measure(blocks_[b + 1]);
    }
  }
  Interval* prev = nullptr;
  std::size_t prev_block = b;
  if (next != busy.begin()) {
    prev = &*std::prev(next);
  } else if (b > 0) {
    prev_block = b - 1;
    prev = &blocks_[b - 1].busy.back();
  }
  if (prev != nullptr && prev->second >= from) {
    prev->second = std::max(prev->second, to);
    Measure(blocks_[prev_block]);
    if (busy.empty()) {
      blocks_.erase(blocks_.begin() + static_cast<std::ptrdiff_t>(b));
    } else {
      Measure(blocks_[b]);
    }
    return;
  }
  busy.insert(next, {from, to});
  Measure(blocks_[b]);
  if (busy.size() > 2 * kBlock) {
    Block tail;
    tail.busy.assign(busy.begin() + kBlock, busy.end());
    busy.resize(kBlock);
    Measure(blocks_[b]);
    Measure(tail);
    blocks_.insert(blocks_.begin() + static_cast<std::ptrdiff_t>(b) + 1, std::move(tail));
  }
}

}  // namespace tierpool::prefetch
