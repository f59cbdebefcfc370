// One CUDA device's copy engines as the hbm tier uses them: a stream per direction (host to
// device, device to host, as the replay models the two links), a completion thread per
// direction that waits on the copies' events in order and runs their callbacks, a checksum stream
// per direction where the GPU hashes the device side of checked copies (tiers/cuda_xxh3.h), and
// a few threads that hash host memory beside the copies where the GPU does not. Built only with
// -DTIERPOOL_CUDA=ON.
//
// Thread safety: every method may be called from any thread. Copy never blocks on the copy;
// callbacks run on the direction's completion thread, Post's work on a checksum thread. The
// destructor waits for every copy and posted job to finish.
//
// Completion groups: copies queued back to back on a stream end in stream order, so one event
// recorded after several of them says they have all landed. An unchecked copy joins the lane's
// open group; the group gets its event once it holds options.completion_group_bytes, when a
// checked copy or a failure is queued behind it, or when the completion thread finds it at the
// front with nothing else to wait for (so a lone copy is answered as soon as it lands). Each copy
// then costs the submitting thread one cudaMemcpyAsync, not also an event's record, and the
// completion thread one wait per group.
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

#include "common/job_pool.h"
#include "common/status.h"
#include "tiers/hbm_tier.h"

namespace tierpool {

class CudaCopyEngine {
 public:
  enum class Direction { kToDevice = 0, kToHost = 1 };
  using Done = std::function<void(Status)>;

  // The engine of `device`: options.checksum_threads threads for Post (at least one), checks on
  // the device from options.device_check_min_bytes. The options are validated by the caller
  // (MakeCudaHbmBackend, the one that builds engines).
  static Result<std::shared_ptr<CudaCopyEngine>> Create(int device, const CudaHbmOptions& options);
  ~CudaCopyEngine();
  CudaCopyEngine(const CudaCopyEngine&) = delete;
  CudaCopyEngine& operator=(const CudaCopyEngine&) = delete;

  int device() const { return device_; }
  // Copies `size` bytes on the direction's stream; `done` runs on its completion thread once
  // they have landed (or the copy failed: IO_ERROR with CUDA's message).
  void Copy(Direction dir, void* dst, const void* src, std::uint64_t size, Done done);
  // Copy's bytes checked on the GPU against `checksum` (XXH3-64): those that landed on the
  // device, after the copy; or those read from it, beside the copy. `done` gets DATA_LOSS when
  // they differ. False, with nothing queued and `done` not called, when the check cannot run on
  // the device (too small, unaligned, no room for it): the caller checks on the host.
  bool CopyChecked(Direction dir, void* dst, const void* src, std::uint64_t size,
                   std::uint64_t checksum, const Done& done);
  // Runs `work` on a checksum thread.
  void Post(std::function<void()> work);
  // Pins host memory for the copy engines (cudaHostRegister); unregistered at destruction.
  Status Register(void* base, std::uint64_t size);

 private:
  struct Pending {
    void* event = nullptr;   // cudaEvent_t
    void* event2 = nullptr;  // a checked copy's second event (its hash), or null
    Done done;
    // The copy could not be queued (`done` gets this, events are null); or, on the last copy of
    // a group whose event could not be recorded, how waiting for the stream instead ended.
    Status failed;
    // In a completion group not yet closed, or closed by a later entry: no event of its own.
    bool open = false;
  };
  struct Lane {
    void* stream = nullptr;  // cudaStream_t
    // cudaStream_t: device-side checks of this direction's copies, used in turn so that the
    // checks of several copies run at once (each walks its blocks in sequence).
    std::vector<void*> hash_streams;
    std::size_t next_hash_stream = 0;  // guarded by mu
    std::mutex mu;  // also held while a copy is queued, so `pending` is in stream order
    std::condition_variable wake;
    std::deque<Pending> pending;     // guarded by mu
    std::uint64_t open_bytes = 0;    // the open group's bytes (at the back of pending); by mu
    std::vector<void*> free_events;  // cudaEvent_t, ended copies' for reuse; guarded by mu
    bool stopping = false;           // guarded by mu
    std::thread thread;
  };

  CudaCopyEngine(int device, const CudaHbmOptions& options) : device_(device), options_(options) {}
  void CompletionLoop(Lane* lane);
  // Ends the lane's open group, if any, with an event recorded now (lane.mu held).
  void CloseGroupLocked(Lane& lane);
  int TakeSlot();  // a pinned result slot, or -1 when all are in use
  void GiveSlot(int slot);

  const int device_;
  const CudaHbmOptions options_;
  Lane lanes_[2];
  std::mutex mu_;
  // Host checks; wakes a thread only when the queue outgrows the awake ones (common/job_pool.h).
  std::unique_ptr<JobPool> checksum_pool_;
  std::vector<void*> registered_;  // guarded by mu_
  // Page-locked slots the device writes checked copies' hashes into.
  std::uint64_t* slots_ = nullptr;
  std::vector<int> free_slots_;  // guarded by mu_
};

}  // namespace tierpool
