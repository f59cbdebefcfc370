// The live replay's tensor bytes written and read on a GPU (a device hbm): the same 64-bit-word
// pattern live_replay.cc writes in host memory, produced on the device by a kernel (as a job's
// tensors are), and the two 64-byte stamps read back. Built only with -DTIERPOOL_CUDA=ON.
#pragma once

#include <cstddef>
#include <cstdint>

namespace tierpool::live {

// Fills n bytes at device address p with the pattern of `seed`; false on a CUDA error.
bool FillOnDevice(void* p, std::size_t n, std::uint64_t seed, int device);
// Copies the first and last min(n, 64) bytes at device address p into head and tail.
bool ReadStamps(const void* p, std::size_t n, std::byte* head, std::byte* tail, int device);

}  // namespace tierpool::live
