#include "tiers/cuda_copy_engine.h"

#include <cuda_runtime_api.h>

#include <algorithm>

#include <spdlog/spdlog.h>

namespace tierpool {
namespace {

Status CudaError(const char* what, cudaError_t e) {
  return Status::IoError(std::string(what) + ": " + cudaGetErrorString(e));
}

}  // namespace

Result<std::shared_ptr<CudaCopyEngine>> CudaCopyEngine::Create(int device, int checksum_threads) {
  if (cudaError_t e = cudaSetDevice(device); e != cudaSuccess) {
    return CudaError("cudaSetDevice", e);
  }
  std::shared_ptr<CudaCopyEngine> engine(new CudaCopyEngine(device));
  for (Lane& lane : engine->lanes_) {
    cudaStream_t stream = nullptr;
    if (cudaError_t e = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
        e != cudaSuccess) {
      return CudaError("cudaStreamCreate", e);
    }
    lane.stream = stream;
  }
  CudaCopyEngine* raw = engine.get();
  for (Lane& lane : engine->lanes_) {
    lane.thread = std::thread([raw, l = &lane] { raw->CompletionLoop(l); });
  }
  for (int i = 0; i < std::max(1, checksum_threads); ++i) {
    engine->checksum_threads_.emplace_back([raw] { raw->ChecksumLoop(); });
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
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  work_ready_.notify_all();
  for (auto& t : checksum_threads_) t.join();
  (void)cudaSetDevice(device_);
  for (Lane& lane : lanes_) {
    if (lane.stream != nullptr) (void)cudaStreamDestroy(static_cast<cudaStream_t>(lane.stream));
  }
  for (void* base : registered_) (void)cudaHostUnregister(base);
}

void CudaCopyEngine::Copy(Direction dir, void* dst, const void* src, std::uint64_t size,
                          Done done) {
  Lane& lane = lanes_[static_cast<int>(dir)];
  const auto kind = dir == Direction::kToDevice ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost;
  std::lock_guard lock(lane.mu);
  Pending p{nullptr, std::move(done), Status::Ok()};
  cudaError_t e = cudaSetDevice(device_);
  if (e == cudaSuccess) {
    e = cudaMemcpyAsync(dst, src, size, kind, static_cast<cudaStream_t>(lane.stream));
  }
  cudaEvent_t event = nullptr;
  if (e == cudaSuccess) {
    // Blocking sync: the completion thread sleeps on the event instead of spinning a core.
    e = cudaEventCreateWithFlags(&event, cudaEventDisableTiming | cudaEventBlockingSync);
  }
  if (e == cudaSuccess) {
    e = cudaEventRecord(event, static_cast<cudaStream_t>(lane.stream));
    if (e != cudaSuccess) (void)cudaEventDestroy(event);
  }
  if (e == cudaSuccess) {
    p.event = event;
  } else {
    p.failed = CudaError("cudaMemcpyAsync", e);
  }
  lane.pending.push_back(std::move(p));
  lane.wake.notify_one();
}

void CudaCopyEngine::CompletionLoop(Lane* lane) {
  (void)cudaSetDevice(device_);
  for (;;) {
    Pending p;
    {
      std::unique_lock lock(lane->mu);
      lane->wake.wait(lock, [&] { return !lane->pending.empty() || lane->stopping; });
      if (lane->pending.empty()) return;  // stopping, and every copy has been answered
      p = std::move(lane->pending.front());
      lane->pending.pop_front();
    }
    Status s = std::move(p.failed);
    if (p.event != nullptr) {
      auto event = static_cast<cudaEvent_t>(p.event);
      if (cudaError_t e = cudaEventSynchronize(event); e != cudaSuccess) {
        s = CudaError("copy on the device", e);
      }
      (void)cudaEventDestroy(event);
    }
    p.done(std::move(s));
  }
}

void CudaCopyEngine::Post(std::function<void()> work) {
  {
    std::lock_guard lock(mu_);
    work_.push_back(std::move(work));
  }
  work_ready_.notify_one();
}

void CudaCopyEngine::ChecksumLoop() {
  for (;;) {
    std::function<void()> work;
    {
      std::unique_lock lock(mu_);
      work_ready_.wait(lock, [&] { return !work_.empty() || stopping_; });
      if (work_.empty()) return;
      work = std::move(work_.front());
      work_.pop_front();
    }
    work();
  }
}

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
