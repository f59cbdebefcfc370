// ObjectStore's compaction: when a tier holds the free bytes an extent needs but no free extent
// that large, copies are moved aside within the tier to open one window, instead of moving them
// out (a transfer down and, later, back up) or placing the object a tier lower. The class and
// its locking: store/object_store.h.
#include <algorithm>
#include <limits>
#include <tuple>

#include "common/checksum.h"
#include "common/logging.h"
#include "common/units.h"
#include "store/object_store.h"

namespace tierpool {

namespace {

// A piece of a tier's address space: free, or a copy that may be moved aside. What lies
// between two pieces that do not touch (a pinned copy, a reservation, a move's destination)
// stays where it is.
// Windows tried before giving up: each costs a few allocator calls, none copies a byte.
constexpr std::size_t kMaxWindowsTried = 32;

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
    const Extent& e = obj.copy(kind).extent;
    if (e.length > 0) pieces.push_back({e, obj.id});
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

  // A window opens when each copy in it has a place outside it. Its free pieces are taken
  // first, so that no copy moved aside lands back in it.
  std::vector<Extent> taken;
  std::vector<std::pair<StoredObject*, Extent>> homes;
  auto give_back = [&] {
    for (const Extent& e : taken) (void)t->Free(e);
    for (const auto& h : homes) (void)t->Free(h.second);
    taken.clear();
    homes.clear();
  };
  auto place = [&](const Window& w) {
    for (std::size_t k = w.first; k <= w.last; ++k) {
      if (pieces[k].object_id != 0) continue;
      auto e = t->AllocateAt(pieces[k].extent);
      if (!e.ok()) return false;
      taken.push_back(*e);
    }
    for (std::size_t k = w.first; k <= w.last; ++k) {
      if (pieces[k].object_id == 0) continue;
      StoredObject* obj = index_.Find(pieces[k].object_id);
      auto e = t->Allocate(obj->meta.size, {-1, pool, obj->meta.durability == Durability::kCache});
      if (!e.ok()) return false;
      homes.emplace_back(obj, *e);
    }
    return true;
  };
  const Window* chosen = nullptr;
  for (std::size_t i = 0; i < windows.size() && i < kMaxWindowsTried; ++i) {
    if (place(windows[i])) {
      chosen = &windows[i];
      break;
    }
    give_back();
  }
  if (chosen == nullptr) {
    spdlog::debug(
        "no window of {} in {}: {} free; {} windows long enough, none whose copies fit "
        "elsewhere",
        FormatBytes(size), TierName(kind), FormatBytes(space.capacity - space.used),
        windows.size());
    return none();
  }
  // Each copy moves with its checksum checked in the same pass: bytes that no longer match
  // are quarantined where they are (as a move down would find them), and the window stays shut.
  bool open = true;
  for (auto& [obj, home] : homes) {
    const Extent from = obj->copy(kind).extent;
    const std::uint64_t sum =
        CopyAndChecksum(t->HostAddress(home), t->HostAddress(from), obj->meta.size);
    if (sum != obj->meta.checksum) {
      (void)t->Free(home);
      ++counters_.corrupt_in_memory;
      QuarantineLocked(
          *obj, Status::DataLoss(obj->meta.ns + "/" + obj->meta.key + ": its bytes in " +
                                 std::string(TierName(kind)) + " no longer match their checksum"));
      open = false;
      continue;
    }
    index_.RelocateCopy(*obj, kind, home);
    (void)t->Free(from);
    ++counters_.relocations;
    counters_.relocated_bytes += obj->meta.size;
  }
  for (const Extent& e : taken) (void)t->Free(e);
  if (!open) return none();
  spdlog::debug("opened a window of {} in {} by moving {} of copies aside", FormatBytes(size),
                TierName(kind), FormatBytes(chosen->moved));
  return t->AllocateAt(
      {pieces[chosen->first].extent.arena_id, pieces[chosen->first].extent.offset, size});
}

}  // namespace tierpool
