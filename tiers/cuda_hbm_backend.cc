#include "tiers/cuda_hbm_backend.h"

#include <cuda_runtime_api.h>

#include <spdlog/spdlog.h>

#include <algorithm>
#include <thread>

#include "common/units.h"

namespace tierpool {
Result<std::unique_ptr<HbmBackend>> MakeCudaHbmBackend(int device, CudaHbmOptions options) {
  if (Status s = options.validate(); !s.ok()) return s;
  int count = 0;
  if (cudaError_t e = cudaGetDeviceCount(&count); e != cudaSuccess) {
    (void)cudaGetLastError();
    return Status::Unavailable(std::string("no CUDA device: ") + cudaGetErrorString(e));
  }
  if (device < 0 || device >= count) {
    return Status::Unavailable("no CUDA device " + std::to_string(device) + " (this node has " +
                               std::to_string(count) + ")");
  }
  if (options.checksum_threads <= 0) {
    options.checksum_threads =
        std::clamp(static_cast<int>(std::thread::hardware_concurrency()) * 3 / 4, 1, 12);
  }
  auto engine = CudaCopyEngine::Create(device, options);
  if (!engine.ok()) return Status::Unavailable(engine.status().message());
  return std::unique_ptr<HbmBackend>(
      new CudaHbmBackend(std::move(engine).value(), options.device_checks));
}

CudaHbmBackend::~CudaHbmBackend() {
  if (base_ == nullptr) return;
  (void)cudaSetDevice(engine_->device());
  (void)cudaFree(base_);  // waits for the device: no copy into it is still running
}

Status CudaHbmBackend::Init(std::uint64_t capacity) {
  if (base_ != nullptr) return Status::FailedPrecondition("cuda hbm region initialized twice");
  if (cudaError_t e = cudaSetDevice(engine_->device()); e != cudaSuccess) {
    return Status::Unavailable(std::string("cudaSetDevice: ") + cudaGetErrorString(e));
  }
  void* base = nullptr;
  if (cudaError_t e = cudaMalloc(&base, capacity); e != cudaSuccess) {
    (void)cudaGetLastError();
    return Status::ResourceExhausted("cannot allocate " + FormatBytes(capacity) +
                                     " on cuda:" + std::to_string(engine_->device()) + ": " +
                                     cudaGetErrorString(e));
  }
  base_ = static_cast<std::byte*>(base);
  size_ = capacity;
  cudaIpcMemHandle_t handle;
  if (cudaError_t e = cudaIpcGetMemHandle(&handle, base); e == cudaSuccess) {
    ipc_handle_.assign(reinterpret_cast<const char*>(&handle), sizeof(handle));
  } else {
    (void)cudaGetLastError();
    spdlog::warn("cuda:{}: no IPC handle for the hbm region ({}): clients cannot open it",
                 engine_->device(), cudaGetErrorString(e));
  }
  return Status::Ok();
}

void CudaHbmBackend::CopyIn(std::uint64_t offset, const std::byte* src, std::uint64_t size,
                            IoCompletion done) {
  if (!Inside(offset, size)) return done(Status::Internal("copy outside the cuda hbm region"));
  engine_->Copy(CudaCopyEngine::Direction::kToDevice, base_ + offset, src, size, std::move(done));
}

void CudaHbmBackend::CopyOut(std::uint64_t offset, std::byte* dst, std::uint64_t size,
                             IoCompletion done) {
  if (!Inside(offset, size)) return done(Status::Internal("copy outside the cuda hbm region"));
  engine_->Copy(CudaCopyEngine::Direction::kToHost, dst, base_ + offset, size, std::move(done));
}

bool CudaHbmBackend::CopyInChecked(std::uint64_t offset, const std::byte* src, std::uint64_t size,
                                   std::uint64_t checksum, const IoCompletion& done) {
  if (!device_checks_ || !Inside(offset, size)) return false;
  return engine_->CopyChecked(CudaCopyEngine::Direction::kToDevice, base_ + offset, src, size,
                              checksum, done);
}

bool CudaHbmBackend::CopyOutChecked(std::uint64_t offset, std::byte* dst, std::uint64_t size,
                                    std::uint64_t checksum, const IoCompletion& done) {
  if (!device_checks_ || !Inside(offset, size)) return false;
  return engine_->CopyChecked(CudaCopyEngine::Direction::kToHost, dst, base_ + offset, size,
                              checksum, done);
}

}  // namespace tierpool
