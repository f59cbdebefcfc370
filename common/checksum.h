// XXH3-64 checksums: the one hash every stored byte is checked against.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

namespace tierpool {

std::uint64_t Xxh3(const void* data, std::size_t size);

// Streaming form, for checksumming while copying in chunks.
class Xxh3Stream {
 public:
  Xxh3Stream();
  ~Xxh3Stream();
  Xxh3Stream(const Xxh3Stream&) = delete;
  Xxh3Stream& operator=(const Xxh3Stream&) = delete;
  void Update(const void* data, std::size_t size);
  std::uint64_t Digest() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

// What the destination of a copy is, which decides how it is written:
//   kWarm:  a buffer the caller reuses (a get's destination), likely in cache: ordinary stores,
//           non-temporal ones only from 1 MiB up;
//   kFresh: memory no one touched lately (an extent just allocated in an arena, as a put or a
//           move fills): non-temporal stores from 64 KiB up, which skip reading the lines in
//           first (1.5x faster into cold memory on the development VM, docs/benchmarks.md) and
//           do not evict the caller's working set.
enum class CopyTarget { kWarm, kFresh };

// Copies size bytes from src to dst and returns the XXH3-64 of them. Works in cache-sized chunks
// so the bytes are hashed while still in cache: close to the cost of the copy alone.
std::uint64_t CopyAndChecksum(void* dst, const void* src, std::size_t size,
                              CopyTarget target = CopyTarget::kWarm);

}  // namespace tierpool
