// ObjectStore's compaction: when a tier holds the free bytes an extent needs but no free extent
// that large, copies are moved aside within the tier to open one window, instead of moving them
// out (a transfer down and, later, back up) or placing the object a tier lower. The class and
// its locking: store/object_store.h.
#include <algorithm>
#include <set>
#include <tuple>

#include "common/checksum.h"
#include "common/logging.h"
#include "common/units.h"
#include "store/object_store.h"

namespace tierpool {

namespace {

// Windows checked before giving up: each check walks the free list, none copies a byte.
constexpr std::size_t kMaxWindowsTried = 32;

// A piece of a tier's address space: free, or a copy that may be moved aside. What lies
// between two pieces that do not touch (a pinned copy, a reservation, a move's destination)
// stays where it is.
struct Piece {
  Extent extent;
  std::uint64_t object_id = 0;  // 0: free
};

bool Adjacent(const Extent& a, const Extent& b) {
  return a.arena_id == b.arena_id && a.offset + a.length == b.offset;
}

}  // namespace

Result<Extent> ObjectStore::OpenWindowLocked(TierKind kind, std::uint32_t pool,
                                             std::uint64_t size) {
  Tier* t = tier(kind);
  const auto none = [&] {
    return Status::ResourceExhausted(std::string(TierName(kind)) + " has no window of " +
                                     FormatBytes(size) + " to open");
  };
  // Bytes are moved by the CPU: tiers in host memory only.
  if (t == nullptr || !mapped(kind) || size == 0) return none();
  const PoolSpace space = t->SpaceOf(pool);
  if (space.capacity - space.used < size) return none();
  std::vector<Piece> pieces;
  for (const Extent& f : t->FreeExtents(pool)) pieces.push_back({f, 0});
  if (pieces.empty()) return none();
  index_.ForEachCandidate(kind, pool, CandidateSet::kMovable, [&](StoredObject& obj) {
    // Checked again here: a pin does not refresh the candidate sets (the policy's decisions are
    // checked as they are applied), and a reader's bytes must never move under it.
    const ObjectCopy& c = obj.copy(kind);
    if (MovableObject(obj) && c.present && c.pins == 0 && c.extent.length > 0) {
      pieces.push_back({c.extent, obj.id});
    }
    return false;
  });
  std::sort(pieces.begin(), pieces.end(), [](const Piece& a, const Piece& b) {
    return std::tie(a.extent.arena_id, a.extent.offset) <
           std::tie(b.extent.arena_id, b.extent.offset);
  });

  // Windows: runs of touching pieces at least `size` long, for each right end the shortest
  // (the last left end that keeps it long enough), tried fewest bytes to move first.
  struct Window {
    std::uint64_t moved;
    std::size_t first, last;
  };
  std::vector<Window> windows;
  std::size_t first = 0;
  std::uint64_t span = 0, moved = 0;
  for (std::size_t last = 0; last < pieces.size(); ++last) {
    if (last > 0 && !Adjacent(pieces[last - 1].extent, pieces[last].extent)) {
      first = last;
      span = moved = 0;
    }
    span += pieces[last].extent.length;
    if (pieces[last].object_id != 0) moved += pieces[last].extent.length;
    while (first < last && span - pieces[first].extent.length >= size) {
      span -= pieces[first].extent.length;
      if (pieces[first].object_id != 0) moved -= pieces[first].extent.length;
      ++first;
    }
    if (span >= size) windows.push_back({moved, first, last});
  }
  std::sort(windows.begin(), windows.end(),
            [](const Window& a, const Window& b) { return a.moved < b.moved; });

  // A window opens when each copy in it has a place outside it: checked first on a copy of
  // the free list (best fit, as the allocator places them), so no byte is copied in vain.
  auto fits = [&](const Window& w) {
    std::multiset<std::uint64_t> holes;  // lengths: the smallest that fits is a lookup
    for (std::size_t k = 0; k < pieces.size(); ++k) {
      if (pieces[k].object_id == 0 && (k < w.first || k > w.last)) {
        holes.insert(pieces[k].extent.length);
      }
    }
    for (std::size_t k = w.first; k <= w.last; ++k) {
      if (pieces[k].object_id == 0) continue;
      const std::uint64_t need = pieces[k].extent.length;
      // A copy larger than what is asked for would, held twice while it moves, take the tier
      // past where the allocation itself leaves it.
      if (need > AlignUp(size, 4096)) return false;
      auto best = holes.lower_bound(need);
      if (best == holes.end()) return false;
      const std::uint64_t rest = *best - need;
      holes.erase(best);
      if (rest > 0) holes.insert(rest);
    }
    return true;
  };
  const Window* chosen = nullptr;
  for (std::size_t i = 0; i < windows.size() && i < kMaxWindowsTried; ++i) {
    if (fits(windows[i])) {
      chosen = &windows[i];
      break;
    }
  }
  if (chosen == nullptr) {
    spdlog::debug(
        "no window of {} in {}: {} free; {} windows long enough, none whose copies fit "
        "elsewhere",
        FormatBytes(size), TierName(kind), FormatBytes(space.capacity - space.used),
        windows.size());
    return none();
  }
  const Extent& first_piece = pieces[chosen->first].extent;
  const Extent& last_piece = pieces[chosen->last].extent;
  const Extent window{first_piece.arena_id, first_piece.offset,
                      last_piece.offset + last_piece.length - first_piece.offset};

  // One copy at a time: a place outside the window, the bytes copied and checked against their
  // checksum in the same pass, the old place freed. The tier never holds more than one copy
  // twice. Bytes that no longer match are quarantined where they are (as a move down would
  // find them), and the window stays shut; copies already moved stay moved, their bytes right.
  for (std::size_t k = chosen->first; k <= chosen->last; ++k) {
    if (pieces[k].object_id == 0) continue;
    StoredObject* obj = index_.Find(pieces[k].object_id);
    auto home = t->AllocateOutside(obj->meta.size, pool, window);
    if (!home.ok()) return none();
    const Extent from = obj->copy(kind).extent;
    // The new place is an extent just allocated: written as fresh memory (non-temporal stores
    // from 64 KiB, common/copy.h), which neither reads its lines in first nor evicts the cache.
    const std::uint64_t sum = CopyAndChecksum(t->HostAddress(*home), t->HostAddress(from),
                                              obj->meta.size, CopyTarget::kFresh);
    if (sum != obj->meta.checksum) {
      (void)t->Free(*home);
      ++counters_.corrupt_in_memory;
      QuarantineLocked(
          *obj, Status::DataLoss(obj->meta.ns + "/" + obj->meta.key + ": its bytes in " +
                                 std::string(TierName(kind)) + " no longer match their checksum"));
      return none();
    }
    index_.RelocateCopy(*obj, kind, *home);
    (void)t->Free(from);
    ++counters_.relocations;
    counters_.relocated_bytes += obj->meta.size;
  }
  spdlog::debug("opened a window of {} in {} by moving {} of copies aside", FormatBytes(size),
                TierName(kind), FormatBytes(chosen->moved));
  return t->AllocateAt({window.arena_id, window.offset, size});
}

}  // namespace tierpool
