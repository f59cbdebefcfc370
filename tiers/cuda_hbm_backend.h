// The hbm tier's CUDA backend: one region of a device's memory, allocated once (cudaMalloc) and
// carved by the tier's extent allocator, exported to clients as a CUDA IPC handle, its bytes
// moved by the device's copy engines (tiers/cuda_copy_engine.h). A namespace pool's region is
// another backend on the same engine. Built only with -DTIERPOOL_CUDA=ON; MakeCudaHbmBackend
// (tiers/hbm_tier.h) is how the rest of tierpool gets one.
//
// Thread safety: as HbmBackend's.
#pragma once

#include <memory>
#include <string>

#include "tiers/cuda_copy_engine.h"
#include "tiers/hbm_tier.h"

namespace tierpool {

class CudaHbmBackend final : public HbmBackend {
 public:
  CudaHbmBackend(std::shared_ptr<CudaCopyEngine> engine, bool device_checks)
      : engine_(std::move(engine)), device_checks_(device_checks) {}
  ~CudaHbmBackend() override;

  std::string name() const override { return "cuda:" + std::to_string(engine_->device()); }
  Status Init(std::uint64_t capacity) override;
  std::byte* host_base() const override { return nullptr; }
  int export_fd() const override { return -1; }
  int export_read_only_fd() const override { return -1; }
  std::unique_ptr<HbmBackend> Another() const override {
    return std::make_unique<CudaHbmBackend>(engine_, device_checks_);
  }
  bool pages_locked() const override { return true; }  // device memory is never paged out
  int device() const override { return engine_->device(); }
  std::string ipc_handle() const override { return ipc_handle_; }
  void CopyIn(std::uint64_t offset, const std::byte* src, std::uint64_t size,
              IoCompletion done) override;
  void CopyOut(std::uint64_t offset, std::byte* dst, std::uint64_t size,
               IoCompletion done) override;
  bool CopyInChecked(std::uint64_t offset, const std::byte* src, std::uint64_t size,
                     std::uint64_t checksum, const IoCompletion& done) override;
  bool CopyOutChecked(std::uint64_t offset, std::byte* dst, std::uint64_t size,
                      std::uint64_t checksum, const IoCompletion& done) override;
  void Post(std::function<void()> work) override { engine_->Post(std::move(work)); }
  Status RegisterHostMemory(void* base, std::uint64_t size) override {
    return engine_->Register(base, size);
  }

 private:
  bool Inside(std::uint64_t offset, std::uint64_t size) const {
    return offset <= size_ && size <= size_ - offset;
  }

  std::shared_ptr<CudaCopyEngine> engine_;
  const bool device_checks_;   // hash on the device where a copy allows it
  std::byte* base_ = nullptr;  // device address; written by Init only
  std::uint64_t size_ = 0;
  std::string ipc_handle_;  // cudaIpcMemHandle_t's bytes; empty where IPC is refused
};

}  // namespace tierpool
