#include "client/device_arenas.h"

#include <cstring>

#include <string>

#include "common/checksum.h"

#ifdef TIERPOOL_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "tiers/cuda_xxh3.h"
#endif

namespace tierpool::detail {

void DeviceArenas::Record(const wire::HelloReply& hello) {
  std::lock_guard lock(mu_);
  for (const auto& a : hello.arenas()) {
    if (!a.has_cuda_device() || a.cuda_device() < 0) continue;
    Arena& arena = arenas_[a.id()];
    if (arena.base != nullptr) continue;  // already open: the same region
    arena = {a.cuda_device(), a.cuda_ipc_handle(), a.size(), nullptr};
  }
}

bool DeviceArenas::Holds(std::uint32_t arena_id) {
  std::lock_guard lock(mu_);
  return arenas_.count(arena_id) != 0;
}

int DeviceArenas::Device() {
  std::lock_guard lock(mu_);
  return arenas_.empty() ? -1 : arenas_.begin()->second.device;
}

#ifdef TIERPOOL_HAVE_CUDA

bool DeviceArenas::Supported() { return true; }

DeviceArenas::~DeviceArenas() {
  for (auto& [id, a] : arenas_) {
    if (a.base == nullptr) continue;
    (void)cudaSetDevice(a.device);
    (void)cudaIpcCloseMemHandle(a.base);
  }
}

Result<void*> DeviceArenas::Address(const wire::Extent& e, int* device) {
  std::lock_guard lock(mu_);
  auto it = arenas_.find(e.arena_id());
  if (it == arenas_.end()) {
    return Status::Internal("server returned an extent in no device arena it described");
  }
  Arena& a = it->second;
  if (e.offset() > a.size || e.length() > a.size - e.offset()) {
    return Status::Internal("server returned an extent outside its device arena");
  }
  if (a.base == nullptr) {
    if (a.handle.size() != sizeof(cudaIpcMemHandle_t)) {
      return Status::Unavailable("the server could not export its device memory (no IPC handle)");
    }
    cudaIpcMemHandle_t h;
    std::memcpy(&h, a.handle.data(), sizeof(h));
    cudaError_t err = cudaSetDevice(a.device);
    if (err == cudaSuccess) err = cudaIpcOpenMemHandle(&a.base, h, cudaIpcMemLazyEnablePeerAccess);
    if (err != cudaSuccess) {
      (void)cudaGetLastError();
      a.base = nullptr;
      return Status::Unavailable(std::string("cannot open the server's device memory: ") +
                                 cudaGetErrorString(err));
    }
  }
  *device = a.device;
  return static_cast<void*>(static_cast<std::byte*>(a.base) + e.offset());
}

Status DeviceArenas::CopyToHost(void* dst, const void* src, std::size_t n, int device) {
  cudaError_t err = cudaSetDevice(device);
  if (err == cudaSuccess) err = cudaMemcpy(dst, src, n, cudaMemcpyDeviceToHost);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    return Status::IoError(std::string("copy from the device: ") + cudaGetErrorString(err));
  }
  return Status::Ok();
}

Result<std::uint64_t> DeviceArenas::Checksum(const void* src, std::size_t n, int device) {
  if (n < kDeviceXxh3MinBytes || reinterpret_cast<std::uintptr_t>(src) % 8 != 0) {
    std::string host(n, '\0');
    TIERPOOL_RETURN_IF_ERROR(CopyToHost(host.data(), src, n, device));
    return Xxh3(host.data(), host.size());
  }
  void* scratch = nullptr;
  std::uint64_t sum = 0;
  cudaError_t err = cudaSetDevice(device);
  if (err == cudaSuccess) err = cudaMalloc(&scratch, DeviceXxh3ScratchBytes(n));
  if (err == cudaSuccess) err = EnqueueDeviceXxh3(src, n, scratch, nullptr);
  if (err == cudaSuccess) err = cudaMemcpy(&sum, scratch, sizeof(sum), cudaMemcpyDeviceToHost);
  if (scratch != nullptr) (void)cudaFree(scratch);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    return Status::IoError(std::string("checksum on the device: ") + cudaGetErrorString(err));
  }
  return sum;
}

#else

bool DeviceArenas::Supported() { return false; }

DeviceArenas::~DeviceArenas() = default;

Result<void*> DeviceArenas::Address(const wire::Extent&, int*) {
  return Status::Unimplemented("device views need a client built with -DTIERPOOL_CUDA=ON");
}

Status DeviceArenas::CopyToHost(void*, const void*, std::size_t, int) {
  return Status::Unimplemented("device views need a client built with -DTIERPOOL_CUDA=ON");
}

Result<std::uint64_t> DeviceArenas::Checksum(const void*, std::size_t, int) {
  return Status::Unimplemented("device views need a client built with -DTIERPOOL_CUDA=ON");
}

#endif

}  // namespace tierpool::detail
