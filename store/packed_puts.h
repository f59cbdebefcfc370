// Puts packed in one message (wire::PackedPutSpecs, docs/protocol.md): a batch that differs
// only in key and size, checked once and then read item by item.
//
// Thread safety: a view of one request, read on the thread that serves it; the request must
// outlive it.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "proto/tierpool.pb.h"
#include "tierpool/status.h"

namespace tierpool {

class PackedPuts {
 public:
  PackedPuts() = default;  // no items
  // The view of `w`, or INVALID_ARGUMENT when its lists do not agree: as many key lengths as
  // sizes, and lengths that add up to the bytes of its keys.
  static Result<PackedPuts> Of(const wire::PackedPutSpecs& w);

  int size() const { return static_cast<int>(starts_.size()); }
  // Item i's key: a view into the request.
  std::string_view key(int i) const {
    return std::string_view(w_->keys()).substr(starts_[i], w_->key_bytes(i));
  }
  std::uint64_t object_size(int i) const { return w_->sizes(i); }

 private:
  const wire::PackedPutSpecs* w_ = nullptr;
  std::vector<std::uint64_t> starts_;  // where each key starts in w_->keys()
};

}  // namespace tierpool
