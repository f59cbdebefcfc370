#include "store/packed_puts.h"

#include <string>

namespace tierpool {

Result<PackedPuts> PackedPuts::Of(const wire::PackedPutSpecs& w) {
  if (w.key_bytes_size() != w.sizes_size()) {
    return Status::InvalidArgument("packed puts: " + std::to_string(w.key_bytes_size()) +
                                   " key lengths for " + std::to_string(w.sizes_size()) + " sizes");
  }
  PackedPuts p;
  p.w_ = &w;
  p.starts_.reserve(static_cast<std::size_t>(w.sizes_size()));
  std::uint64_t at = 0;  // a sum of at most 2^31 lengths of 32 bits: no overflow
  for (std::uint32_t n : w.key_bytes()) {
    p.starts_.push_back(at);
    at += n;
  }
  if (at != w.keys().size()) {
    return Status::InvalidArgument("packed puts: key lengths add up to " + std::to_string(at) +
                                   " bytes, the keys are " + std::to_string(w.keys().size()));
  }
  return p;
}

}  // namespace tierpool
