// XXH3-64 checksums: the one hash every stored byte is checked against.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "common/copy.h"

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

// Copies size bytes from src to dst as CopyBytes does (whatever their alignment) and returns the
// XXH3-64 of them. Works in cache-sized chunks so the bytes are hashed while still in cache: close
// to the cost of the copy alone.
std::uint64_t CopyAndChecksum(void* dst, const void* src, std::size_t size,
                              CopyTarget target = CopyTarget::kWarm);

}  // namespace tierpool
