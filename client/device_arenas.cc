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

namespace {

// What a thread's device checksums reuse: a stream that does not serialize with other streams
// and scratch memory kept between calls. A cudaMalloc and cudaFree per checksum made every commit
// wait for all the work queued on the GPU (cudaFree synchronizes the device), and a kernel on
// the legacy default stream held back the work issued after it.
struct ChecksumScratch {
  int device = -1;
  cudaStream_t stream = nullptr;
  cudaEvent_t issued = nullptr;  // work issued to the default stream before the checksum
  void* scratch = nullptr;
  std::uint64_t bytes = 0;

  ~ChecksumScratch() { Reset(); }
  void Reset() {
    if (device < 0) return;
    (void)cudaSetDevice(device);
    if (scratch != nullptr) (void)cudaFree(scratch);
    if (issued != nullptr) (void)cudaEventDestroy(issued);
    if (stream != nullptr) (void)cudaStreamDestroy(stream);
    device = -1;
    stream = nullptr;
    issued = nullptr;
    scratch = nullptr;
    bytes = 0;
  }
  cudaError_t Prepare(int d, std::uint64_t need) {
    if (device != d) {
      Reset();
      device = d;
      cudaError_t err = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
      if (err == cudaSuccess) {
        err = cudaEventCreateWithFlags(&issued, cudaEventDisableTiming);
      }
      if (err != cudaSuccess) return err;
    }
    if (bytes < need) {
      if (scratch != nullptr) (void)cudaFree(scratch);
      scratch = nullptr;
      bytes = 0;
      cudaError_t err = cudaMalloc(&scratch, need);
      if (err != cudaSuccess) return err;
      bytes = need;
    }
    return cudaSuccess;
  }
};

}  // namespace

Result<std::uint64_t> DeviceArenas::Checksum(const void* src, std::size_t n, int device) {
  if (n < kDeviceXxh3MinBytes || reinterpret_cast<std::uintptr_t>(src) % 8 != 0) {
    std::string host(n, '\0');
    TIERPOOL_RETURN_IF_ERROR(CopyToHost(host.data(), src, n, device));
    return Xxh3(host.data(), host.size());
  }
  thread_local ChecksumScratch t;
  std::uint64_t sum = 0;
  cudaError_t err = cudaSetDevice(device);
  if (err == cudaSuccess) err = t.Prepare(device, DeviceXxh3ScratchBytes(n));
  // Ordered after what the caller issued to the legacy default stream, which itself follows
  // every blocking stream's earlier work (a writer that did not synchronize still gets hashed
  // after it), without holding back the work issued after the checksum.
  if (err == cudaSuccess) err = cudaEventRecord(t.issued, nullptr);
  if (err == cudaSuccess) err = cudaStreamWaitEvent(t.stream, t.issued, 0);
  if (err == cudaSuccess) err = EnqueueDeviceXxh3(src, n, t.scratch, t.stream);
  if (err == cudaSuccess) {
    err = cudaMemcpyAsync(&sum, t.scratch, sizeof(sum), cudaMemcpyDeviceToHost, t.stream);
  }
  if (err == cudaSuccess) err = cudaStreamSynchronize(t.stream);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    t.Reset();
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
