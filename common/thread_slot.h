// A small number per thread, for state split into per-thread slots (a reader count, a block of
// ids): threads that run at the same time get different numbers, so each writes its own cache
// line. Numbers are handed out round-robin as threads first ask; a process with more threads
// than a structure has slots shares slots (callers stay correct then, only slower).
//
// Thread-safe.
#pragma once

#include <atomic>
#include <cstdint>

namespace tierpool {

inline std::uint32_t ThreadSlot() {
  static std::atomic<std::uint32_t> next{0};
  thread_local const std::uint32_t slot = next.fetch_add(1, std::memory_order_relaxed);
  return slot;
}

}  // namespace tierpool
