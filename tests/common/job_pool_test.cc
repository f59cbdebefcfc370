#include "common/job_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <memory>
#include <vector>

namespace tierpool {
namespace {

using std::chrono::steady_clock;

TEST(JobPool, OneThreadRunsJobsInTheOrderTheyWerePosted) {
  std::vector<int> order;
  {
    JobPool pool(1);
    for (int i = 0; i < 1000; ++i) pool.Post([&order, i] { order.push_back(i); });
  }
  ASSERT_EQ(order.size(), 1000u);
  for (int i = 0; i < 1000; ++i) EXPECT_EQ(order[i], i);
}

TEST(JobPool, EveryJobFromManyPostersRunsOnceBeforeThePoolIsGone) {
  constexpr int kPosters = 4, kJobs = 5000;
  std::vector<std::atomic<int>> ran(kPosters * kJobs);
  {
    JobPool pool(3);
    std::vector<std::thread> posters;
    for (int p = 0; p < kPosters; ++p) {
      posters.emplace_back([&, p] {
        for (int j = 0; j < kJobs; ++j) pool.Post([&ran, i = p * kJobs + j] { ran[i]++; });
      });
    }
    for (auto& t : posters) t.join();
  }  // the destructor runs what is still queued
  for (int i = 0; i < kPosters * kJobs; ++i) ASSERT_EQ(ran[i].load(), 1) << i;
}

// Jobs posted one at a time, each to a pool whose threads have all gone to sleep: none is lost.
// (A job that found no thread woken for it would never run, and the wait would time out.)
TEST(JobPool, AJobPostedToASleepingPoolIsRun) {
  JobPool pool(4);
  for (int i = 0; i < 200; ++i) {
    auto ran = std::make_shared<std::promise<void>>();
    auto done = ran->get_future();
    pool.Post([ran] { ran->set_value(); });
    ASSERT_EQ(done.wait_for(std::chrono::seconds(10)), std::future_status::ready) << i;
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  EXPECT_GE(pool.wakes(), 1u);
}

// A job queued while a thread is awake (busy with another) wakes none of the sleeping ones: the
// awake thread takes it next. (The copy engine's pool woke a thread for every job before.)
TEST(JobPool, AJobNoMoreThanTheAwakeThreadsWakesNoOther) {
  JobPool pool(4);
  std::promise<void> started, release;
  std::shared_future<void> go = release.get_future().share();
  pool.Post([&started, go] {
    started.set_value();
    go.wait();
  });
  started.get_future().wait();
  const auto deadline = steady_clock::now() + std::chrono::seconds(10);
  while (pool.awake_threads() > 1 && steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ASSERT_EQ(pool.awake_threads(), 1u);  // the busy one; the others wait for work
  const std::uint64_t wakes = pool.wakes();
  std::promise<void> ran;
  auto done = ran.get_future();
  pool.Post([&ran] { ran.set_value(); });
  EXPECT_EQ(pool.wakes(), wakes);  // one job, one awake thread: no notice sent
  release.set_value();
  EXPECT_EQ(done.wait_for(std::chrono::seconds(10)), std::future_status::ready);
}

TEST(JobPool, JobsMayPostJobs) {
  std::atomic<int> ran{0};
  {
    JobPool pool(2);
    for (int i = 0; i < 100; ++i) {
      pool.Post([&] {
        ran++;
        pool.Post([&] { ran++; });
      });
    }
    while (ran.load() < 200) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_EQ(ran.load(), 200);
}

TEST(JobPool, WhatIsQueuedBehindABusyThreadRunsAtDestruction) {
  std::promise<void> release;
  std::shared_future<void> go = release.get_future().share();
  std::atomic<int> ran{0};
  auto pool = std::make_unique<JobPool>(1);
  pool->Post([go] { go.wait(); });
  for (int i = 0; i < 100; ++i) pool->Post([&ran] { ran++; });
  EXPECT_EQ(ran.load(), 0);
  release.set_value();
  pool.reset();
  EXPECT_EQ(ran.load(), 100);
}

}  // namespace
}  // namespace tierpool
