#include "tiers/dram_tier.h"

#include <gtest/gtest.h>
#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <fstream>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "common/posix.h"
#include "tiers/memfd_arena.h"

namespace tierpool {
namespace {

// The kernel's free 2 MiB huge pages, 0 when it says none.
long long FreeHugePages() { return std::max(0LL, MeminfoValue("HugePages_Free")); }

TEST(DramTier, RejectsBadConfig) {
  EXPECT_FALSE(DramTier::Create({.capacity = 0}).ok());
  EXPECT_FALSE(DramTier::Create({.capacity = 1 << 20, .alignment = 1000}).ok());
}

TEST(DramTier, ArenasAreSharedAndMappable) {
  auto tier = DramTier::Create({.capacity = 8 << 20, .alignment = 4096, .first_arena_id = 5});
  ASSERT_TRUE(tier.ok()) << tier.status().ToString();
  Tier& t = **tier;
  EXPECT_EQ(t.kind(), TierKind::kDram);
  EXPECT_EQ(t.capacity(), 8u << 20);
  auto arenas = t.Arenas();
  ASSERT_FALSE(arenas.empty());
  EXPECT_EQ(arenas[0].id, 5u);
  EXPECT_GE(arenas[0].numa_node, 0);  // placed through libnuma even on one node

  auto e = t.Allocate(10000, {});
  ASSERT_TRUE(e.ok());
  std::byte* p = t.HostAddress(*e);
  ASSERT_NE(p, nullptr);
  std::memset(p, 0xab, 10000);
  // A second mapping of the fd (what a client does) sees the same bytes.
  void* m = ::mmap(nullptr, arenas[0].size, PROT_READ, MAP_SHARED, arenas[0].fd, 0);
  ASSERT_NE(m, MAP_FAILED);
  EXPECT_EQ(static_cast<unsigned char*>(m)[e->offset + 9999], 0xab);
  ::munmap(m, arenas[0].size);
  // Sealed: a client cannot shrink the arena under the server.
  EXPECT_NE(::ftruncate(arenas[0].fd, 4096), 0);

  EXPECT_EQ(t.used_bytes(), 12288u);
  ASSERT_TRUE(t.Free(*e).ok());
  EXPECT_EQ(t.used_bytes(), 0u);
  EXPECT_EQ(t.Stats().allocations, 1u);
  EXPECT_EQ(t.Stats().frees, 1u);
}

// Arenas of ordinary pages ask for transparent huge pages (madvise MADV_HUGEPAGE: VmFlags
// "hg"), unless told not to, whatever the kernel then does with the advice.
TEST(DramTier, ArenasAskForTransparentHugePages) {
  auto arena = MemfdArena::Create({.name = "thp-test", .size = 16 << 20});
  ASSERT_TRUE(arena.ok()) << arena.status().ToString();
  EXPECT_TRUE(SmapsHasFlag((*arena)->base(), "hg"));
  auto plain = MemfdArena::Create(
      {.name = "thp-test-off", .size = 16 << 20, .transparent_huge_pages = false});
  ASSERT_TRUE(plain.ok()) << plain.status().ToString();
  EXPECT_FALSE(SmapsHasFlag((*plain)->base(), "hg"));
  EXPECT_EQ((*plain)->HugeMappedBytes(), 0u);
}

// Where the kernel gives shared memory such pages (shmem_enabled "advise" and the like; "never"
// on CI, so this skips there), a populated arena is mostly in 2 MiB pages, and `tierpool stat`
// says so.
TEST(DramTier, ArenasInTransparentHugePagesWhereTheKernelGivesThem) {
  if (!ShmemHugePagesOnAdvice()) {
    GTEST_SKIP() << "shmem_enabled is " << ShmemHugePagesSetting()
                 << ": no transparent huge pages to check";
  }
  auto arena = MemfdArena::Create({.name = "thp-test", .size = 16 << 20});
  ASSERT_TRUE(arena.ok()) << arena.status().ToString();
  // The kernel may not find every 2 MiB page free at once; half of 16 MiB says the advice took.
  EXPECT_GE((*arena)->HugeMappedBytes(), 8u << 20);
  auto tier = DramTier::Create({.capacity = 16 << 20});
  ASSERT_TRUE(tier.ok()) << tier.status().ToString();
  EXPECT_EQ((*tier)->Stats().backend, "memfd/libnuma, transparent 2 MiB pages");
}

// Huge pages: sizes below one are refused; a pool that lacks the pages (asking for one more
// than it has free) fails the tier at creation with what to do, not a SIGBUS at a first touch.
TEST(DramTier, HugePagesAreRefusedClearlyWhenThePoolLacksThem) {
  EXPECT_FALSE(DramTier::Create({.capacity = 1 << 20, .huge_pages = true}).ok());
  EXPECT_FALSE(
      DramTier::Create({.capacity = 8 << 20, .pools = {1 << 20}, .huge_pages = true}).ok());
  // Surplus pages (vm.nr_overcommit_hugepages) would let the kernel grant more than the pool.
  std::ifstream overcommit("/proc/sys/vm/nr_overcommit_hugepages");
  long long surplus = 0;
  if (overcommit >> surplus; surplus > 0) GTEST_SKIP() << "vm.nr_overcommit_hugepages is set";
  const auto pages = static_cast<std::uint64_t>(FreeHugePages()) + 1;
  auto tier = DramTier::Create({.capacity = pages * kHugePageBytes, .huge_pages = true});
  ASSERT_FALSE(tier.ok());
  EXPECT_EQ(tier.status().code(), StatusCode::kResourceExhausted) << tier.status().ToString();
  EXPECT_NE(tier.status().message().find("vm.nr_hugepages"), std::string::npos)
      << tier.status().ToString();
}

// With pages in the pool (sysctl vm.nr_hugepages; CI machines have none, so this skips there):
// arenas of huge pages, their sizes rounded to 2 MiB, shared, sealed and readable through the
// read-only descriptor as any other arena.
TEST(DramTier, ArenasOfHugePages) {
  if (FreeHugePages() < 4) GTEST_SKIP() << "fewer than 4 free huge pages (vm.nr_hugepages)";
  auto tier = DramTier::Create({.capacity = (8 << 20) + 4096, .huge_pages = true});
  ASSERT_TRUE(tier.ok()) << tier.status().ToString();
  Tier& t = **tier;
  EXPECT_EQ(t.capacity(), 8u << 20);
  EXPECT_EQ(t.Stats().backend, "memfd/libnuma, 2 MiB pages");  // what `tierpool stat` shows
  auto arenas = t.Arenas();
  ASSERT_EQ(arenas.size(), 1u);
  EXPECT_EQ(arenas[0].size % kHugePageBytes, 0u);
  auto e = t.Allocate(3 << 20, {});
  ASSERT_TRUE(e.ok());
  std::memset(t.HostAddress(*e), 0x5c, 3 << 20);
  void* m = ::mmap(nullptr, arenas[0].size, PROT_READ, MAP_SHARED, arenas[0].read_only_fd, 0);
  ASSERT_NE(m, MAP_FAILED);
  EXPECT_EQ(static_cast<unsigned char*>(m)[e->offset + (3 << 20) - 1], 0x5c);
  ::munmap(m, arenas[0].size);
  EXPECT_NE(::ftruncate(arenas[0].fd, 0), 0);  // sealed
  ASSERT_TRUE(t.Free(*e).ok());
}

// Namespace pools: arenas of their own, carved out of the tier; an allocation never leaves its
// pool; each arena comes with a read-only descriptor that cannot be mapped writable.
TEST(DramTier, PoolsAreArenasOfTheirOwnWithReadOnlyDescriptors) {
  EXPECT_FALSE(DramTier::Create({.capacity = 4 << 20, .pools = {4 << 20}}).ok())
      << "pools must leave the shared pool room";
  auto tier = DramTier::Create({.capacity = 8 << 20, .pools = {1 << 20, 0, 2 << 20}});
  ASSERT_TRUE(tier.ok()) << tier.status().ToString();
  Tier& t = **tier;
  EXPECT_TRUE(t.partitioned());
  EXPECT_EQ(t.capacity(), 8u << 20);
  EXPECT_EQ(t.SpaceOf(1).capacity, 1u << 20);
  EXPECT_EQ(t.SpaceOf(2).capacity, 0u);
  EXPECT_EQ(t.SpaceOf(3).capacity, 2u << 20);
  EXPECT_EQ(t.SpaceOf(kSharedPool).capacity, 5u << 20);
  auto e = t.Allocate(1 << 20, {.pool = 1});
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(t.SpaceOf(1).used, 1u << 20);
  EXPECT_EQ(t.Allocate(4096, {.pool = 1}).status().code(), StatusCode::kResourceExhausted)
      << "a full pool does not borrow the shared arenas";
  EXPECT_EQ(t.Allocate(4096, {.pool = 2}).status().code(), StatusCode::kResourceExhausted);
  EXPECT_TRUE(t.Allocate(4096, {}).ok());
  for (const ArenaInfo& a : t.Arenas()) {
    if (a.id == e->arena_id) {
      EXPECT_EQ(a.pool, 1u);
    }
    ASSERT_GE(a.read_only_fd, 0);
    void* w = ::mmap(nullptr, a.size, PROT_READ | PROT_WRITE, MAP_SHARED, a.read_only_fd, 0);
    EXPECT_EQ(w, MAP_FAILED);
    void* r = ::mmap(nullptr, a.size, PROT_READ, MAP_SHARED, a.read_only_fd, 0);
    ASSERT_NE(r, MAP_FAILED);
    ::munmap(r, a.size);
  }
}

// The end of an extent goes back (staged room a smaller put took); its start and bytes stay.
TEST(DramTier, TrimGivesBackTheEndOfAnExtent) {
  auto tier = DramTier::Create({.capacity = 1 << 20, .alignment = 4096});
  ASSERT_TRUE(tier.ok()) << tier.status().ToString();
  Tier& t = **tier;
  auto e = t.Allocate(256 << 10, {});
  ASSERT_TRUE(e.ok());
  std::memset(t.HostAddress(*e), 'k', 5000);
  auto kept = t.Trim(*e, 5000);
  ASSERT_TRUE(kept.ok()) << kept.status().ToString();
  EXPECT_EQ(kept->arena_id, e->arena_id);
  EXPECT_EQ(kept->offset, e->offset);
  EXPECT_EQ(kept->length, 8192u);  // rounded up to the alignment
  EXPECT_EQ(t.used_bytes(), 8192u);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(t.HostAddress(*kept)), 5000),
            std::string(5000, 'k'));
  // What went back is free room again: everything else fits one extent.
  auto rest = t.Allocate((1 << 20) - 8192, {});
  ASSERT_TRUE(rest.ok()) << rest.status().ToString();
  ASSERT_TRUE(t.Free(*rest).ok());
  // Keeping as much as it holds changes nothing; keeping nothing is refused.
  auto same = t.Trim(*kept, 8192);
  ASSERT_TRUE(same.ok());
  EXPECT_EQ(same->length, 8192u);
  EXPECT_EQ(t.Trim(*kept, 0).status().code(), StatusCode::kInvalidArgument);
  ASSERT_TRUE(t.Free(*kept).ok());
  EXPECT_EQ(t.used_bytes(), 0u);
}

// A small extent freed on a thread comes back to that thread's next allocation of its length,
// and counts as free meanwhile: in used_bytes, in SpaceOf, in Stats and in FreeExtents.
TEST(DramTier, FreedSmallExtentsWaitForTheirThreadsNextAllocation) {
  auto tier = DramTier::Create({.capacity = 1 << 20, .alignment = 4096});
  ASSERT_TRUE(tier.ok()) << tier.status().ToString();
  Tier& t = **tier;
  auto a = t.Allocate(4096, {});
  auto b = t.Allocate(4096, {});
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_TRUE(t.Free(*a).ok());
  EXPECT_EQ(t.used_bytes(), 4096u);
  EXPECT_EQ(t.SpaceOf(kSharedPool).used, 4096u);
  auto again = t.Allocate(3000, {});  // the same length once rounded up
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->offset, a->offset);
  // Another length does not take it.
  ASSERT_TRUE(t.Free(*again).ok());
  auto other = t.Allocate(8192, {});
  ASSERT_TRUE(other.ok());
  EXPECT_NE(other->offset, a->offset);
  // The free space as compaction and Stats see it has the cached extent in it.
  std::uint64_t listed = 0;
  for (const Extent& f : t.FreeExtents(kSharedPool)) listed += f.length;
  EXPECT_EQ(listed, (1u << 20) - 4096 - 8192);
  ASSERT_TRUE(t.Free(*b).ok());
  ASSERT_TRUE(t.Free(*other).ok());
  const TierStats s = t.Stats();
  EXPECT_EQ(s.used_bytes, 0u);
  EXPECT_EQ(s.free_extents, 1u);  // all of it coalesced again
  EXPECT_EQ(s.largest_free_extent, 1u << 20);
  EXPECT_EQ(t.used_bytes(), 0u);
}

// Room waiting in the caches is room: an allocation the allocator alone cannot serve takes it
// all back first, rather than failing (which would make the store evict).
TEST(DramTier, AnAllocationTakesBackWhatTheCachesHold) {
  auto tier = DramTier::Create({.capacity = 256 << 10, .alignment = 4096});
  ASSERT_TRUE(tier.ok());
  Tier& t = **tier;
  std::vector<Extent> small;
  for (int i = 0; i < 64; ++i) {
    auto e = t.Allocate(4096, {});
    ASSERT_TRUE(e.ok()) << i;
    small.push_back(*e);
  }
  EXPECT_FALSE(t.Allocate(4096, {}).ok());
  // Freed on this thread and on another: both threads' caches fill, the rest goes back.
  std::thread other([&] {
    for (int i = 0; i < 32; ++i) ASSERT_TRUE(t.Free(small[i]).ok());
  });
  other.join();
  for (int i = 32; i < 64; ++i) ASSERT_TRUE(t.Free(small[i]).ok());
  EXPECT_EQ(t.used_bytes(), 0u);
  auto whole = t.Allocate(256 << 10, {});
  ASSERT_TRUE(whole.ok()) << whole.status().ToString();
  EXPECT_EQ(whole->length, 256u << 10);
  ASSERT_TRUE(t.Free(*whole).ok());
}

// A bad free is caught on the cached path too: twice from the same thread, or an extent no
// allocation could have made.
TEST(DramTier, CachedFreesAreChecked) {
  auto tier = DramTier::Create({.capacity = 1 << 20, .alignment = 4096});
  ASSERT_TRUE(tier.ok());
  Tier& t = **tier;
  auto e = t.Allocate(4096, {});
  ASSERT_TRUE(e.ok());
  ASSERT_TRUE(t.Free(*e).ok());
  EXPECT_EQ(t.Free(*e).code(), StatusCode::kInternal);
  EXPECT_EQ(t.Free({e->arena_id, e->offset + 100, 4096}).code(), StatusCode::kInternal);
  EXPECT_EQ(t.Free({e->arena_id + 1000, 0, 4096}).code(), StatusCode::kInternal);
  EXPECT_EQ(t.Free({e->arena_id, 1 << 20, 4096}).code(), StatusCode::kInternal);
  // The tier is as it was: one free extent, the whole of it, once the cache is given back.
  EXPECT_EQ(t.Stats().free_extents, 1u);
  EXPECT_EQ(t.used_bytes(), 0u);
}

// Threads allocate, write their mark, check it and free, some of it freed by another thread:
// no extent is ever handed to two holders at once, and at the end the tier is whole again.
TEST(DramTier, ThreadsNeverShareAnExtent) {
  auto tier = DramTier::Create({.capacity = 4 << 20, .alignment = 4096});
  ASSERT_TRUE(tier.ok());
  Tier& t = **tier;
  constexpr int kThreads = 4;
  std::atomic<int> bad{0};
  std::mutex handoff_mu;
  std::vector<Extent> handoff;  // extents one thread allocated and another frees
  std::vector<std::thread> threads;
  for (int th = 0; th < kThreads; ++th) {
    threads.emplace_back([&, th] {
      std::mt19937 rng(th);
      std::vector<Extent> held;
      for (int i = 0; i < 20000; ++i) {
        if (held.size() < 24 && rng() % 2 == 0) {
          const std::uint64_t size = 4096u * (1 + rng() % 4) - rng() % 100;
          auto e = t.Allocate(size, {});
          if (!e.ok()) continue;
          std::memset(t.HostAddress(*e), 'a' + th, e->length);
          held.push_back(*e);
        } else if (!held.empty()) {
          const Extent e = held.back();
          held.pop_back();
          const auto* p = reinterpret_cast<const char*>(t.HostAddress(e));
          if (std::count(p, p + e.length, static_cast<char>('a' + th)) !=
              static_cast<std::ptrdiff_t>(e.length)) {
            ++bad;
          }
          if (rng() % 4 == 0) {
            std::lock_guard lock(handoff_mu);
            handoff.push_back(e);
          } else if (!t.Free(e).ok()) {
            ++bad;
          }
        }
        if (i % 64 == 0) {
          std::lock_guard lock(handoff_mu);
          for (const Extent& e : handoff) {
            if (!t.Free(e).ok()) ++bad;
          }
          handoff.clear();
        }
      }
      for (const Extent& e : held) {
        if (!t.Free(e).ok()) ++bad;
      }
    });
  }
  for (auto& th : threads) th.join();
  for (const Extent& e : handoff) ASSERT_TRUE(t.Free(e).ok());
  EXPECT_EQ(bad.load(), 0);
  EXPECT_EQ(t.used_bytes(), 0u);
  const TierStats s = t.Stats();
  EXPECT_EQ(s.free_extents, 1u);
  EXPECT_EQ(s.largest_free_extent, 4u << 20);
}

// A pool's use leaves out its own extents waiting in the caches and no other pool's, and the
// counts hold while threads cache, take back and drain: a reader never sees a pool used beyond
// its capacity (a count that ran below zero would wrap to that), and at the end nothing is used.
TEST(DramTier, PoolUseLeavesOutCachedExtentsWhileThreadsCacheAndDrain) {
  auto tier = DramTier::Create({.capacity = 4 << 20, .pools = {1 << 20}, .alignment = 4096});
  ASSERT_TRUE(tier.ok()) << tier.status().ToString();
  Tier& t = **tier;
  auto shared = t.Allocate(8192, {});
  auto pooled = t.Allocate(4096, {.pool = 1});
  ASSERT_TRUE(shared.ok() && pooled.ok());
  ASSERT_TRUE(t.Free(*pooled).ok());  // cached on this thread
  EXPECT_EQ(t.SpaceOf(1).used, 0u);
  EXPECT_EQ(t.SpaceOf(kSharedPool).used, 8192u);
  EXPECT_EQ(t.used_bytes(), 8192u);
  ASSERT_TRUE(t.Free(*shared).ok());
  EXPECT_EQ(t.SpaceOf(kSharedPool).used, 0u);

  std::atomic<bool> stop{false};
  std::atomic<int> bad{0};
  std::thread reader([&] {
    while (!stop.load()) {
      if (t.SpaceOf(1).used > (1u << 20) || t.SpaceOf(kSharedPool).used > (3u << 20) ||
          t.used_bytes() > (4u << 20)) {
        ++bad;
      }
    }
  });
  std::vector<std::thread> writers;
  for (int th = 0; th < 3; ++th) {
    writers.emplace_back([&, th] {
      std::mt19937 rng(th);
      std::vector<Extent> held;
      for (int i = 0; i < 20000; ++i) {
        const std::uint32_t pool = rng() % 2;
        if (held.size() < 40 && rng() % 2 == 0) {
          // Large ones now and then: the allocator fails them while small room waits in the
          // caches, and drains every thread's cache to find it.
          const std::uint64_t size = rng() % 16 == 0 ? (512u << 10) : 4096u * (1 + rng() % 3);
          auto e = t.Allocate(size, {.pool = pool});
          if (e.ok()) held.push_back(*e);
        } else if (!held.empty()) {
          if (!t.Free(held.back()).ok()) ++bad;
          held.pop_back();
        }
      }
      for (const Extent& e : held) {
        if (!t.Free(e).ok()) ++bad;
      }
    });
  }
  for (auto& w : writers) w.join();
  stop = true;
  reader.join();
  EXPECT_EQ(bad.load(), 0);
  EXPECT_EQ(t.used_bytes(), 0u);
  EXPECT_EQ(t.SpaceOf(1).used, 0u);
  EXPECT_EQ(t.SpaceOf(kSharedPool).used, 0u);
}

// Off, every free goes straight back to the allocator.
TEST(DramTier, ThreadCachesCanBeTurnedOff) {
  auto tier = DramTier::Create({.capacity = 1 << 20, .alignment = 4096, .thread_caches = false});
  ASSERT_TRUE(tier.ok());
  Tier& t = **tier;
  auto a = t.Allocate(4096, {});
  auto b = t.Allocate(4096, {});
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_TRUE(t.Free(*a).ok());
  EXPECT_EQ(t.Free(*a).code(), StatusCode::kInternal);  // the allocator's own check
  auto c = t.Allocate(8192, {});                        // best fit: after b, not in a's 4 KiB
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->offset, b->offset + 4096);
}

TEST(DramTier, FullTierSaysResourceExhausted) {
  auto tier = DramTier::Create({.capacity = 1 << 20});
  ASSERT_TRUE(tier.ok());
  auto e = (*tier)->Allocate(2 << 20, {});
  EXPECT_EQ(e.status().code(), StatusCode::kResourceExhausted);
  EXPECT_EQ((*tier)->Stats().failed_allocations, 1u);
}

}  // namespace
}  // namespace tierpool
