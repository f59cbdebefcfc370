// The index's candidate sets against a recomputation from scratch: after every step of a random
// sequence of puts, replacements, uses (exclusive and shared), pins, moves, quarantines and
// deletes, each (tier, set) lists exactly the copies the rules in store/object_index.h name, and
// a search visits them in least recently used order.
// A copy keeps iterators to its place in each set (ObjectCopy::listed_at); a stale one would
// list a copy twice, lose one, or break the tree.
#include "store/object_index.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>
#include <utility>
#include <vector>

namespace tierpool {
namespace {

constexpr TierKind kTiers[] = {TierKind::kHbm, TierKind::kDram, TierKind::kNvme};
constexpr CandidateSet kSets[] = {CandidateSet::kMovable, CandidateSet::kCache,
                                  CandidateSet::kRedundant};

bool Expected(const StoredObject& o, TierKind t, CandidateSet set) {
  const ObjectCopy& c = o.copy(t);
  const bool movable = o.committed && o.linked && !o.doomed && !o.corrupt && !o.move &&
                       o.holds == 0 && c.present;  // pinned or not
  if (!movable) return false;
  switch (set) {
    case CandidateSet::kMovable:
      return true;
    case CandidateSet::kCache:
      return o.meta.durability == Durability::kCache;
    case CandidateSet::kRedundant:
      return o.present_copies() > 1;  // no tier here needs a guard
  }
  return false;
}

void CheckSets(ObjectIndex& index, const std::vector<std::uint64_t>& ids) {
  for (TierKind t : kTiers) {
    for (CandidateSet set : kSets) {
      std::vector<std::pair<std::uint64_t, std::uint64_t>> want;  // (last_use, id)
      for (auto id : ids) {
        const StoredObject* o = index.Find(id);
        if (o != nullptr && Expected(*o, t, set)) want.emplace_back(o->copy(t).last_use, id);
      }
      std::sort(want.begin(), want.end());
      std::vector<std::pair<std::uint64_t, std::uint64_t>> got;
      index.ForEachCandidate(t, kSharedPool, set, [&](StoredObject& o) {
        got.emplace_back(o.copy(t).last_use, o.id);
        return false;
      });
      ASSERT_EQ(got, want) << "tier " << TierName(t) << " set " << static_cast<int>(set);
      ASSERT_EQ(index.candidates(t, set), want.size());
    }
  }
}

// Each namespace's counts against a recomputation: every object held counts its bytes, a named
// one counts as an object, and each copy its extent in its tier. An object reaches its counts
// through a pointer (StoredObject::ns_counts), which must outlive neither the entry nor miss it.
void CheckUsage(ObjectIndex& index, const std::vector<std::uint64_t>& ids) {
  for (const char* ns : {"a", "b", "rare"}) {
    NamespaceUsage want;
    for (auto id : ids) {
      const StoredObject* o = index.Find(id);
      if (o == nullptr || o->meta.ns != ns) continue;
      want.bytes += o->meta.size;
      want.objects += o->linked ? 1 : 0;
      for (int t = 0; t < kTierKindCount; ++t) {
        if (o->copies[t].present) want.tier_bytes[t] += o->copies[t].extent.length;
      }
    }
    const NamespaceUsage got = index.UsageOf(ns);
    ASSERT_EQ(got.bytes, want.bytes) << ns;
    ASSERT_EQ(got.objects, want.objects) << ns;
    ASSERT_EQ(got.tier_bytes, want.tier_bytes) << ns;
  }
}

TEST(ObjectIndex, CandidateSetsMatchTheirRulesThroughARandomLife) {
  std::mt19937_64 rng(5);
  ObjectIndex index;
  std::vector<std::uint64_t> ids;  // every object the index may still hold
  auto pick = [&]() -> StoredObject* {
    if (ids.empty()) return nullptr;
    return index.Find(ids[rng() % ids.size()]);
  };
  std::uint64_t offset = 0;
  for (int op = 0; op < 4000; ++op) {
    const int what = static_cast<int>(rng() % 10);
    if (what <= 2 || ids.empty()) {
      // A put under one of 40 names: a reservation with a copy, committed (replacing any
      // object of that name, which is then doomed and erased unless it is pinned).
      ObjectMeta meta;
      // A namespace that is seldom put to: its counts' entry goes with its last object and
      // comes back with the next.
      meta.ns = rng() % 16 == 0 ? "rare" : rng() % 2 ? "a" : "b";
      meta.key = "k" + std::to_string(rng() % 20);
      meta.size = 4096;
      meta.durability = rng() % 2 ? Durability::kCache : Durability::kRetained;
      StoredObject& o = index.AddReservation(meta, /*owner=*/1, /*expiry_us=*/0);
      index.SetCopy(o, kTiers[rng() % 2], {0, offset += 4096, 4096});
      ids.push_back(o.id);
      if (rng() % 8 != 0) {
        if (StoredObject* old = index.Commit(o)) {
          old->doomed = true;
          index.Refresh(*old);
          if (old->pins() == 0) index.Erase(*old);
        }
      } else {
        index.Erase(o);  // aborted
      }
    } else if (StoredObject* o = pick(); o != nullptr) {
      const TierKind t = kTiers[rng() % 3];
      switch (what) {
        case 3:  // a use: under the exclusive lock, or a get's under the shared one (the
                 // sets are re-keyed as a search meets the copy)
          if (o->copy(t).present) {
            if (rng() % 2) {
              index.Touch(*o, t);
            } else {
              index.TouchShared(*o, t);
              // Several gets between two searches: more than one entry out of place at once.
              for (int more = static_cast<int>(rng() % 4); more > 0; --more) {
                StoredObject* other = pick();
                const TierKind u = kTiers[rng() % 3];
                if (other != nullptr && other->copy(u).present) index.TouchShared(*other, u);
              }
            }
          }
          break;
        case 4:  // a copy made below or above
          index.SetCopy(*o, t, {0, offset += 4096, 4096});
          break;
        case 5:  // a copy dropped, never the last
          if (o->copy(t).present && o->present_copies() > 1) index.ClearCopy(*o, t);
          break;
        case 6:  // a pin taken or released
          if (o->copy(t).present) {
            if (o->copy(t).pins > 0 && rng() % 2) {
              --o->copy(t).pins;
            } else {
              ++o->copy(t).pins;
            }
            index.Refresh(*o);
          }
          break;
        case 7:  // a move starts or ends
          if (o->move) {
            o->move.reset();
          } else {
            o->move.emplace();
          }
          index.Refresh(*o);
          break;
        case 8:  // quarantined, or a caller holding its copies for a move
          if (rng() % 4 == 0) {
            o->corrupt = true;
          } else {
            o->holds = o->holds > 0 ? 0 : 1;
          }
          index.Refresh(*o);
          break;
        case 9:  // deleted
          if (o->linked) {
            index.Unlink(*o);
            o->doomed = true;
            index.Refresh(*o);
          }
          if (o->pins() == 0 && !o->move) index.Erase(*o);
          break;
      }
    }
    std::erase_if(ids, [&](std::uint64_t id) { return index.Find(id) == nullptr; });
    CheckSets(index, ids);
    CheckUsage(index, ids);
    if (HasFatalFailure()) {
      ADD_FAILURE() << "after operation " << op;
      return;
    }
  }
}

// More entries out of place than one search moves (every copy but one read under the shared lock
// since the last search): a search still visits each candidate exactly once; it stops moving
// entries after kMaxRekeysPerSearch (so its order is not yet the true one), and later searches
// move the rest until a search sees exact least recently used order again.
TEST(ObjectIndex, ASearchMovesBoundedlyManyStaleEntriesAndVisitsEachOnce) {
  ObjectIndex index;
  const int n = 3 * ObjectIndex::kMaxRekeysPerSearch;
  std::vector<StoredObject*> objs;
  for (int i = 0; i < n; ++i) {
    ObjectMeta meta;
    meta.ns = "a";
    meta.key = "k" + std::to_string(i);
    meta.size = 4096;
    StoredObject& o = index.AddReservation(meta, /*owner=*/1, /*expiry_us=*/0);
    index.SetCopy(o, TierKind::kDram, {0, static_cast<std::uint64_t>(i) * 4096, 4096});
    index.Commit(o);
    objs.push_back(&o);
  }
  // Read in reverse, all but the last: the true order is objs[n-1], then objs[n-2] ... objs[0].
  for (int i = n - 2; i >= 0; --i) index.TouchShared(*objs[i], TierKind::kDram);
  auto search = [&] {
    std::vector<std::uint64_t> seen;
    index.ForEachCandidate(TierKind::kDram, kSharedPool, CandidateSet::kMovable,
                           [&](StoredObject& o) {
                             seen.push_back(o.id);
                             return false;
                           });
    return seen;
  };
  std::vector<std::uint64_t> truth;
  truth.push_back(objs[n - 1]->id);
  for (int i = n - 2; i >= 0; --i) truth.push_back(objs[i]->id);
  std::vector<std::uint64_t> first = search();
  std::vector<std::uint64_t> sorted = first, all = truth;
  std::sort(sorted.begin(), sorted.end());
  std::sort(all.begin(), all.end());
  ASSERT_EQ(sorted, all) << "a candidate visited twice or not at all";
  EXPECT_NE(first, truth) << "one search moved more than its bound";
  int searches = 1;
  while (search() != truth) ASSERT_LE(++searches, 4) << "later searches do not converge";
  EXPECT_EQ(index.candidates(TierKind::kDram, CandidateSet::kMovable),
            static_cast<std::uint64_t>(n));
}

}  // namespace
}  // namespace tierpool
