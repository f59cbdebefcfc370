// The trainer's own host memory, as tierpool.torch.offload reports it: the bytes malloc has
// handed out and not had back (glibc's mallinfo2: uordblks in its heaps plus hblkhd in blocks of
// their own), where PyTorch's CPU tensors come from. Not resident memory: glibc keeps freed
// heap blocks resident and hands them out again without a page fault, so a process's RSS after
// one training run says little about the next. The arenas of tierpoold that the client maps are
// not malloc's: they are the server's memory. Where mallinfo2 is missing (not glibc 2.33+) the
// anonymous resident memory stands in.
//
// HostMemorySampler reads it on a thread of its own every `interval` (no GIL: a Python thread
// polling every millisecond took the interpreter lock from the trainer), and keeps the highest
// value seen since the last TakePeak, less an offset the caller moves as memory it accounts for
// elsewhere comes and goes.
//
// Locking: none; every member the sampling thread shares is atomic.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>

namespace tierpool::python {

// Host memory in use now, in bytes (-1 where it cannot be read).
std::int64_t HostBytesInUse();

class HostMemorySampler {
 public:
  explicit HostMemorySampler(std::chrono::microseconds interval);
  ~HostMemorySampler();
  HostMemorySampler(const HostMemorySampler&) = delete;
  HostMemorySampler& operator=(const HostMemorySampler&) = delete;

  // Samples now, folds the value into the peak and returns it (HostBytesInUse less the offset).
  std::int64_t Sample();
  // What Sample and the thread subtract from HostBytesInUse from now on.
  void set_offset(std::int64_t offset) { offset_.store(offset, std::memory_order_relaxed); }
  std::int64_t offset() const { return offset_.load(std::memory_order_relaxed); }
  // The highest value seen since the last call (or the start), sampling once more first; the
  // next peak starts from the value now.
  std::int64_t TakePeak();

 private:
  void Loop();
  void Fold(std::int64_t value);

  const std::chrono::microseconds interval_;
  std::atomic<std::int64_t> offset_{0};
  std::atomic<std::int64_t> peak_;
  std::mutex mu_;  // for the condition variable only
  std::condition_variable wake_;
  bool stop_ = false;  // guarded by mu_
  std::thread thread_;
};

}  // namespace tierpool::python
