// A reader-writer mutex for short critical sections, whose readers share no cache line that
// they write and which does not starve writers.
//
// Why not std::shared_mutex: every reader of glibc's rwlock writes its one word, so two readers
// on two cores pass that line back and forth on each lock and unlock and run no faster than one;
// it prefers readers, so readers that overlap without a break keep a writer out as long as they
// come; and set to prefer writers, it puts every reader that arrives while a writer waits to
// sleep in the kernel, tens of microseconds against critical sections of well under one
// (benchmarks/store_concurrency_bench.cc, figures in docs/benchmarks.md).
//
// Here a reader counts itself in a slot of its own thread's (one cache line per slot) and then
// looks at the writer word; a writer announces itself in that word and then waits for every
// slot to empty. Both steps are sequentially consistent, so either the reader sees the writer
// (and steps back) or the writer sees the reader (and waits for it). A writer waiting holds new
// readers back. Waits spin briefly, then sleep on a futex (std::atomic::wait).
//
// Meets the SharedMutex requirements: std::unique_lock, std::shared_lock, std::lock_guard and
// std::condition_variable_any (with the exclusive lock) work with it. Not recursive in either
// mode, and a shared lock is released on the thread that took it (its slot is the thread's).
#pragma once

#include <array>
#include <atomic>
#include <cstdint>

#include "common/thread_slot.h"

namespace tierpool {

class SharedMutex {
 public:
  SharedMutex() = default;
  SharedMutex(const SharedMutex&) = delete;
  SharedMutex& operator=(const SharedMutex&) = delete;

  void lock() {
    writer_.fetch_add(1);            // announced: readers from now on step back
    for (int spins = 0;; ++spins) {  // one writer at a time
      std::uint32_t w = writer_.load(std::memory_order_relaxed);
      if ((w & kHeld) == 0) {
        if (writer_.compare_exchange_weak(w, (w - 1) | kHeld, std::memory_order_acquire,
                                          std::memory_order_relaxed)) {
          break;
        }
        continue;
      }
      Wait(writer_, w, spins);
    }
    for (int spins = 0;; ++spins) {  // readers already in leave
      const std::uint32_t drained = drained_.load();
      if (NoReaders()) return;
      Wait(drained_, drained, spins);
    }
  }
  bool try_lock() {
    std::uint32_t w = 0;
    if (!writer_.compare_exchange_strong(w, kHeld)) return false;
    if (NoReaders()) return true;
    unlock();
    return false;
  }
  void unlock() {
    writer_.fetch_and(~kHeld, std::memory_order_release);
    writer_.notify_all();  // a load, not a system call, when nobody sleeps on it
  }

  void lock_shared() {
    Slot& slot = slots_[ThreadSlot() % kSlots];
    for (int spins = 0;; ++spins) {
      const std::uint32_t w = writer_.load(std::memory_order_relaxed);
      if (w == 0) {
        slot.readers.fetch_add(1);
        if (writer_.load() == 0) return;
        LeaveSlot(slot);  // a writer came at the same time: it goes first
        continue;
      }
      Wait(writer_, w, spins);
    }
  }
  bool try_lock_shared() {
    Slot& slot = slots_[ThreadSlot() % kSlots];
    if (writer_.load(std::memory_order_relaxed) != 0) return false;
    slot.readers.fetch_add(1);
    if (writer_.load() == 0) return true;
    LeaveSlot(slot);
    return false;
  }
  void unlock_shared() { LeaveSlot(slots_[ThreadSlot() % kSlots]); }

 private:
  static constexpr std::uint32_t kHeld = 1u << 31;  // writer_: held; below it, writers waiting
  static constexpr int kSlots = 16;
  // Pauses before the first sleep: about a critical section's length.
  static constexpr int kSpins = 64;

  struct alignas(64) Slot {
    std::atomic<std::uint32_t> readers{0};
  };

  bool NoReaders() const {
    for (const Slot& s : slots_) {
      if (s.readers.load() != 0) return false;
    }
    return true;
  }
  void LeaveSlot(Slot& slot) {
    slot.readers.fetch_sub(1);
    if (writer_.load() != 0) {  // a writer may be waiting for this slot to empty
      drained_.fetch_add(1);
      drained_.notify_all();
    }
  }
  // Until `word` is no longer `seen`: spinning at first, then asleep.
  static void Wait(std::atomic<std::uint32_t>& word, std::uint32_t seen, int spins) {
    if (spins < kSpins) {
      __builtin_ia32_pause();
      return;
    }
    word.wait(seen, std::memory_order_relaxed);
  }

  std::atomic<std::uint32_t> writer_{0};
  alignas(64) std::atomic<std::uint32_t> drained_{0};  // bumped as readers leave under a writer
  std::array<Slot, kSlots> slots_{};
};

}  // namespace tierpool
