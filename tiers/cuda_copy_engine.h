// One CUDA device's copy engines as the hbm tier uses them: a stream per direction (host to
// device, device to host, as the replay models the two links), a completion thread per
// direction that waits on each copy's event in order and runs its callback, and a few
// checksum threads that hash host memory beside the copies (the checksum of one copy must not
// hold back the start of the next). Built only with -DTIERPOOL_CUDA=ON.
//
// Thread safety: every method may be called from any thread. Copy never blocks on the copy;
// callbacks run on the direction's completion thread, Post's work on a checksum thread. The
// destructor waits for every copy and posted job to finish.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/status.h"

namespace tierpool {

class CudaCopyEngine {
 public:
  enum class Direction { kToDevice = 0, kToHost = 1 };
  using Done = std::function<void(Status)>;

  // The engine of `device` with `checksum_threads` threads for Post.
  static Result<std::shared_ptr<CudaCopyEngine>> Create(int device, int checksum_threads);
  ~CudaCopyEngine();
  CudaCopyEngine(const CudaCopyEngine&) = delete;
  CudaCopyEngine& operator=(const CudaCopyEngine&) = delete;

  int device() const { return device_; }
  // Copies `size` bytes on the direction's stream; `done` runs on its completion thread once
  // they have landed (or the copy failed: IO_ERROR with CUDA's message).
  void Copy(Direction dir, void* dst, const void* src, std::uint64_t size, Done done);
  // Runs `work` on a checksum thread.
  void Post(std::function<void()> work);
  // Pins host memory for the copy engines (cudaHostRegister); unregistered at destruction.
  Status Register(void* base, std::uint64_t size);

 private:
  struct Pending {
    void* event = nullptr;  // cudaEvent_t
    Done done;
    Status failed;  // the copy could not be queued: `done` gets this, event is null
  };
  struct Lane {
    void* stream = nullptr;  // cudaStream_t
    std::mutex mu;           // also held while a copy is queued, so `pending` is in stream order
    std::condition_variable wake;
    std::deque<Pending> pending;  // guarded by mu
    bool stopping = false;        // guarded by mu
    std::thread thread;
  };

  explicit CudaCopyEngine(int device) : device_(device) {}
  void CompletionLoop(Lane* lane);
  void ChecksumLoop();

  const int device_;
  Lane lanes_[2];
  std::mutex mu_;
  std::condition_variable work_ready_;
  std::deque<std::function<void()>> work_;  // guarded by mu_
  bool stopping_ = false;                   // guarded by mu_
  std::vector<std::thread> checksum_threads_;
  std::vector<void*> registered_;  // guarded by mu_
};

}  // namespace tierpool
