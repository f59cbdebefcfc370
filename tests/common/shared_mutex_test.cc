// SharedMutex (common/shared_mutex.h): writers alone, readers together, nobody starved, and the
// data it guards seen whole. Each test bounds its work in rounds, not time; under
// ThreadSanitizer (the tsan preset) a missing happens-before edge on the guarded data is a
// report.
#include "common/shared_mutex.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <shared_mutex>
#include <thread>
#include <vector>

namespace tierpool {
namespace {

// Readers and writers at once: a writer is alone (no reader, no other writer inside), readers
// never see a writer inside, and the plain (non-atomic) pair a writer updates is always equal
// when a reader looks.
TEST(SharedMutex, WritersAreAloneAndReadersSeeWholeUpdates) {
  SharedMutex mu;
  std::atomic<int> readers_in{0}, writers_in{0};
  std::atomic<int> violations{0};
  std::uint64_t a = 0, b = 0;  // guarded by mu
  constexpr int kReaders = 4, kWriters = 2, kRounds = 100000;
  std::atomic<int> started{0};
  auto start_together = [&] {
    started.fetch_add(1);
    while (started.load() < kReaders + kWriters) std::this_thread::yield();
  };
  std::vector<std::thread> threads;
  for (int r = 0; r < kReaders; ++r) {
    threads.emplace_back([&] {
      start_together();
      for (int i = 0; i < kRounds; ++i) {
        std::shared_lock lock(mu);
        readers_in.fetch_add(1);
        if (writers_in.load() != 0 || a != b) violations.fetch_add(1);
        readers_in.fetch_sub(1);
      }
    });
  }
  for (int w = 0; w < kWriters; ++w) {
    threads.emplace_back([&] {
      start_together();
      for (int i = 0; i < kRounds; ++i) {
        std::lock_guard lock(mu);
        if (writers_in.fetch_add(1) != 0 || readers_in.load() != 0) violations.fetch_add(1);
        ++a;
        ++b;
        writers_in.fetch_sub(1);
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(violations.load(), 0);
  EXPECT_EQ(a, static_cast<std::uint64_t>(kWriters) * kRounds);
  EXPECT_EQ(b, a);
}

// Readers that overlap without a break do not keep a writer out: with readers holding it in
// turn on every core, a writer still gets in, round after round.
TEST(SharedMutex, ReadersThatNeverPauseDoNotStarveAWriter) {
  SharedMutex mu;
  std::atomic<bool> stop{false};
  std::vector<std::thread> readers;
  for (int r = 0; r < 3; ++r) {
    readers.emplace_back([&] {
      while (!stop.load(std::memory_order_relaxed)) {
        std::shared_lock lock(mu);
        std::this_thread::yield();  // hold it a while: readers overlap
      }
    });
  }
  int writes = 0;
  for (int i = 0; i < 200; ++i) {
    std::lock_guard lock(mu);
    ++writes;
  }
  stop = true;
  for (auto& t : readers) t.join();
  EXPECT_EQ(writes, 200);
}

// try_lock fails while a reader holds it and try_lock_shared while a writer does; each
// succeeds once the other lets go.
TEST(SharedMutex, TryLocksRefuseTheOtherMode) {
  SharedMutex mu;
  {
    std::shared_lock reader(mu);
    std::thread([&] { EXPECT_FALSE(mu.try_lock()); }).join();
    EXPECT_TRUE(mu.try_lock_shared());  // readers together
    mu.unlock_shared();
  }
  ASSERT_TRUE(mu.try_lock());
  std::thread([&] { EXPECT_FALSE(mu.try_lock_shared()); }).join();
  mu.unlock();
  EXPECT_TRUE(mu.try_lock_shared());
  mu.unlock_shared();
}

// A writer sleeps on a condition variable with it released and wakes holding it, as the store's
// waits for moves do.
TEST(SharedMutex, WorksWithConditionVariableAny) {
  SharedMutex mu;
  std::condition_variable_any cv;
  bool ready = false;  // guarded by mu
  std::thread waiter([&] {
    std::unique_lock lock(mu);
    cv.wait(lock, [&] { return ready; });
    EXPECT_TRUE(ready);
  });
  {
    std::shared_lock reader(mu);  // readers get in while the waiter sleeps
  }
  {
    std::lock_guard lock(mu);
    ready = true;
  }
  cv.notify_all();
  waiter.join();
}

}  // namespace
}  // namespace tierpool
