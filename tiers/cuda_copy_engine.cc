#include "tiers/cuda_copy_engine.h"

#include <cuda_runtime_api.h>

#include <algorithm>

#include <spdlog/spdlog.h>

#include "tiers/cuda_xxh3.h"

namespace tierpool {
namespace {

Status CudaError(const char* what, cudaError_t e) {
  return Status::IoError(std::string(what) + ": " + cudaGetErrorString(e));
}

// A completion event: no timing, and a completion thread that waits on it sleeps instead of
// spinning a core.
cudaError_t NewEvent(cudaEvent_t* event) {
  return cudaEventCreateWithFlags(event, cudaEventDisableTiming | cudaEventBlockingSync);
}

// An event from a lane's pool (its lock held), or a new one. Created and destroyed per copy,
// they held moves of 256 KiB off an H200 to 0.46-0.55x of cudaMemcpyAsync, 0.57-0.61x reused
// (docs/benchmarks.md).
cudaError_t TakeEvent(std::vector<void*>* pool, cudaEvent_t* event) {
  if (pool->empty()) return NewEvent(event);
  *event = static_cast<cudaEvent_t>(pool->back());
  pool->pop_back();
  return cudaSuccess;
}

// Waits for `ev` (a cudaEvent_t, or null: nothing to wait for) and says how the work before it
// ended. A waited event goes to `spent` for reuse, a failed one is destroyed.
cudaError_t Wait(void* ev, std::vector<void*>* spent) {
  if (ev == nullptr) return cudaSuccess;
  auto event = static_cast<cudaEvent_t>(ev);
  const cudaError_t e = cudaEventSynchronize(event);
  if (e == cudaSuccess) {
    spent->push_back(event);
  } else {
    (void)cudaEventDestroy(event);
  }
  return e;
}

// Result slots for checked copies in flight: more than the mover keeps in flight in practice;
// when they run out, copies are checked on the host.
constexpr int kSlots = 1 << 14;
constexpr int kHashStreams = 16;  // per direction

}  // namespace

Result<std::shared_ptr<CudaCopyEngine>> CudaCopyEngine::Create(int device,
                                                               const CudaHbmOptions& options) {
  if (cudaError_t e = cudaSetDevice(device); e != cudaSuccess) {
    return CudaError("cudaSetDevice", e);
  }
  std::shared_ptr<CudaCopyEngine> engine(new CudaCopyEngine(device, options));
  for (Lane& lane : engine->lanes_) {
    for (int i = 0; i <= kHashStreams; ++i) {
      cudaStream_t stream = nullptr;
      if (cudaError_t e = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
          e != cudaSuccess) {
        return CudaError("cudaStreamCreate", e);
      }
      if (i == 0) {
        lane.stream = stream;
      } else {
        lane.hash_streams.push_back(stream);
      }
    }
  }
  void* slots = nullptr;
  if (cudaMallocHost(&slots, kSlots * sizeof(std::uint64_t)) == cudaSuccess) {
    engine->slots_ = static_cast<std::uint64_t*>(slots);
    for (int i = kSlots - 1; i >= 0; --i) engine->free_slots_.push_back(i);
  } else {
    (void)cudaGetLastError();  // no device-side checks: every copy is checked on the host
  }
  // The checks' pool before the completion threads, whose callbacks post to it.
  engine->checksum_pool_ = std::make_unique<JobPool>(std::max(1, options.checksum_threads));
  CudaCopyEngine* raw = engine.get();
  for (Lane& lane : engine->lanes_) {
    lane.thread = std::thread([raw, l = &lane] { raw->CompletionLoop(l); });
  }
  return engine;
}

CudaCopyEngine::~CudaCopyEngine() {
  // Copies first (their callbacks may post checksum work), then the checksum threads.
  for (Lane& lane : lanes_) {
    {
      std::lock_guard lock(lane.mu);
      lane.stopping = true;
    }
    lane.wake.notify_all();
    if (lane.thread.joinable()) lane.thread.join();
  }
  checksum_pool_.reset();  // runs what the callbacks posted
  (void)cudaSetDevice(device_);
  for (Lane& lane : lanes_) {
    if (lane.stream != nullptr) (void)cudaStreamDestroy(static_cast<cudaStream_t>(lane.stream));
    for (void* s : lane.hash_streams) (void)cudaStreamDestroy(static_cast<cudaStream_t>(s));
    for (void* ev : lane.free_events) (void)cudaEventDestroy(static_cast<cudaEvent_t>(ev));
  }
  for (void* base : registered_) (void)cudaHostUnregister(base);
  if (slots_ != nullptr) (void)cudaFreeHost(slots_);
}

void CudaCopyEngine::Copy(Direction dir, void* dst, const void* src, std::uint64_t size,
                          Done done) {
  Lane& lane = lanes_[static_cast<int>(dir)];
  const auto kind = dir == Direction::kToDevice ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost;
  std::lock_guard lock(lane.mu);
  cudaError_t e = cudaSetDevice(device_);
  if (e == cudaSuccess) {
    e = cudaMemcpyAsync(dst, src, size, kind, static_cast<cudaStream_t>(lane.stream));
  }
  Pending p;
  p.done = std::move(done);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    CloseGroupLocked(lane);  // the copies before it are answered when they have landed
    p.failed = CudaError("cudaMemcpyAsync", e);
    lane.pending.push_back(std::move(p));
  } else {
    p.open = true;
    lane.pending.push_back(std::move(p));
    lane.open_bytes += size;
    if (lane.open_bytes >= options_.completion_group_bytes) CloseGroupLocked(lane);
  }
  lane.wake.notify_one();
}

void CudaCopyEngine::CloseGroupLocked(Lane& lane) {
  if (lane.pending.empty() || !lane.pending.back().open) return;
  auto stream = static_cast<cudaStream_t>(lane.stream);
  Pending& last = lane.pending.back();
  last.open = false;
  lane.open_bytes = 0;
  cudaEvent_t event = nullptr;
  cudaError_t e = cudaSetDevice(device_);
  if (e == cudaSuccess) e = TakeEvent(&lane.free_events, &event);
  if (e == cudaSuccess) {
    e = cudaEventRecord(event, stream);
    if (e != cudaSuccess) (void)cudaEventDestroy(event);
  }
  if (e == cudaSuccess) {
    last.event = event;
    return;
  }
  // No event: wait for the stream here, so that no one hears of a copy before it has landed.
  (void)cudaGetLastError();
  if (cudaError_t w = cudaStreamSynchronize(stream); w != cudaSuccess) {
    last.failed = CudaError("copy on the device", w);
  }
}

void CudaCopyEngine::CompletionLoop(Lane* lane) {
  (void)cudaSetDevice(device_);
  std::vector<void*> spent;    // events whose copies have ended, back to the pool at the next lock
  std::vector<Pending> group;  // a group's copies, its last (the one with the events) at the back
  for (;;) {
    group.clear();
    {
      std::unique_lock lock(lane->mu);
      lane->free_events.insert(lane->free_events.end(), spent.begin(), spent.end());
      spent.clear();
      lane->wake.wait(lock, [&] { return !lane->pending.empty() || lane->stopping; });
      if (lane->pending.empty()) return;  // stopping, and every copy has been answered
      // Nothing is ahead of an open group at the front: close it now rather than wait for more.
      if (lane->pending.front().open && std::all_of(lane->pending.begin(), lane->pending.end(),
                                                    [](const Pending& p) { return p.open; })) {
        CloseGroupLocked(*lane);
      }
      do {
        group.push_back(std::move(lane->pending.front()));
        lane->pending.pop_front();
      } while (group.back().open);
    }
    Pending& last = group.back();
    Status s = std::move(last.failed);
    if (cudaError_t e = Wait(last.event, &spent); e != cudaSuccess && s.ok()) {
      s = CudaError("copy on the device", e);
    }
    // The group's other copies were queued before this event on the same stream: it answers
    // for them too. (A checked copy is never in a group with others: its check is its own.)
    for (std::size_t i = 0; i + 1 < group.size(); ++i) group[i].done(s);
    if (cudaError_t e = Wait(last.event2, &spent); e != cudaSuccess && s.ok()) {
      s = CudaError("check on the device", e);
    }
    last.done(std::move(s));
  }
}

int CudaCopyEngine::TakeSlot() {
  std::lock_guard lock(mu_);
  if (free_slots_.empty()) return -1;
  const int slot = free_slots_.back();
  free_slots_.pop_back();
  return slot;
}

void CudaCopyEngine::GiveSlot(int slot) {
  std::lock_guard lock(mu_);
  free_slots_.push_back(slot);
}

bool CudaCopyEngine::CopyChecked(Direction dir, void* dst, const void* src, std::uint64_t size,
                                 std::uint64_t checksum, const Done& done) {
  const bool to_device = dir == Direction::kToDevice;
  const void* device_side = to_device ? dst : src;
  if (size < std::max(kDeviceXxh3MinBytes, options_.device_check_min_bytes) ||
      reinterpret_cast<std::uintptr_t>(device_side) % 8 != 0) {
    return false;
  }
  const int slot = TakeSlot();
  if (slot < 0) return false;
  Lane& lane = lanes_[static_cast<int>(dir)];
  auto copy_stream = static_cast<cudaStream_t>(lane.stream);
  std::lock_guard lock(lane.mu);
  CloseGroupLocked(lane);  // a checked copy is never in a group: its check answers for it alone
  auto hash_stream = static_cast<cudaStream_t>(lane.hash_streams[lane.next_hash_stream]);
  lane.next_hash_stream = (lane.next_hash_stream + 1) % lane.hash_streams.size();
  void* scratch = nullptr;
  if (cudaSetDevice(device_) != cudaSuccess ||
      cudaMallocAsync(&scratch, DeviceXxh3ScratchBytes(size), hash_stream) != cudaSuccess) {
    (void)cudaGetLastError();
    GiveSlot(slot);
    return false;
  }
  // From here the copy is ours to answer. To the device: copy, then hash what landed (the hash
  // stream waits for the copy). Off it: hash the source beside the copy.
  cudaEvent_t copied = nullptr, hashed = nullptr;
  cudaError_t e = TakeEvent(&lane.free_events, &copied);
  if (e == cudaSuccess) e = TakeEvent(&lane.free_events, &hashed);
  if (e == cudaSuccess && !to_device) e = EnqueueDeviceXxh3(src, size, scratch, hash_stream);
  if (e == cudaSuccess) {
    e = cudaMemcpyAsync(dst, src, size, to_device ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost,
                        copy_stream);
  }
  if (e == cudaSuccess) e = cudaEventRecord(copied, copy_stream);
  if (e == cudaSuccess && to_device) e = cudaStreamWaitEvent(hash_stream, copied, 0);
  if (e == cudaSuccess && to_device) e = EnqueueDeviceXxh3(dst, size, scratch, hash_stream);
  if (e == cudaSuccess) {
    e = cudaMemcpyAsync(&slots_[slot], scratch, sizeof(std::uint64_t), cudaMemcpyDeviceToHost,
                        hash_stream);
  }
  (void)cudaFreeAsync(scratch, hash_stream);
  if (e == cudaSuccess) e = cudaEventRecord(hashed, hash_stream);
  Pending p;
  if (e == cudaSuccess) {
    p.event = copied;
    p.event2 = hashed;
  } else {
    // Part of it may be queued: let it finish before anyone hears, so that no buffer is reused
    // while the engine still writes it.
    (void)cudaGetLastError();
    (void)cudaStreamSynchronize(copy_stream);
    (void)cudaStreamSynchronize(hash_stream);
    for (cudaEvent_t ev : {copied, hashed}) {
      if (ev != nullptr) (void)cudaEventDestroy(ev);
    }
    p.failed = CudaError("checked copy", e);
  }
  p.done = [this, slot, checksum, done](Status s) {
    const std::uint64_t sum = slots_[slot];
    GiveSlot(slot);
    if (s.ok() && sum != checksum) {
      s = Status::DataLoss(
          "bytes moving through device memory do not match their checksum "
          "(checked on the device)");
    }
    done(std::move(s));
  };
  lane.pending.push_back(std::move(p));
  lane.wake.notify_one();
  return true;
}

void CudaCopyEngine::Post(std::function<void()> work) { checksum_pool_->Post(std::move(work)); }

Status CudaCopyEngine::Register(void* base, std::uint64_t size) {
  if (cudaError_t e = cudaSetDevice(device_); e != cudaSuccess)
    return CudaError("cudaSetDevice", e);
  if (cudaError_t e = cudaHostRegister(base, size, cudaHostRegisterPortable); e != cudaSuccess) {
    (void)cudaGetLastError();  // not sticky: clear it for the next call
    return CudaError("cudaHostRegister", e);
  }
  std::lock_guard lock(mu_);
  registered_.push_back(base);
  return Status::Ok();
}

}  // namespace tierpool
