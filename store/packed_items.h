// Batch items packed in one message instead of one each (docs/protocol.md): the keys of a get
// (wire::PackedKeys) and puts that differ only in key and size (wire::PackedPutSpecs). Each is
// checked once, then read item by item.
//
// Thread safety: views of one request, read on the thread that serves it; the request must
// outlive them.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "proto/tierpool.pb.h"
#include "tierpool/status.h"

namespace tierpool {

// Keys back to back in one string, key i `lengths[i]` bytes long.
class PackedKeyList {
 public:
  PackedKeyList() = default;  // no keys
  // The view, or INVALID_ARGUMENT (`what` says of which message) when the lengths do not add
  // up to the bytes of `keys`.
  static Result<PackedKeyList> Of(const std::string& keys,
                                  const google::protobuf::RepeatedField<std::uint32_t>& lengths,
                                  std::string_view what);

  int size() const { return static_cast<int>(starts_.size()); }
  std::string_view key(int i) const {
    return std::string_view(*keys_).substr(starts_[i], (*lengths_)[i]);
  }

 private:
  const std::string* keys_ = nullptr;
  const google::protobuf::RepeatedField<std::uint32_t>* lengths_ = nullptr;
  std::vector<std::uint64_t> starts_;  // where each key starts in *keys_
};

// wire::PackedPutSpecs: item i is its spec with key i and sizes[i].
class PackedPuts {
 public:
  PackedPuts() = default;  // no items
  // The view of `w`, or INVALID_ARGUMENT when its lists do not agree: as many key lengths as
  // sizes, and lengths that add up to the bytes of its keys.
  static Result<PackedPuts> Of(const wire::PackedPutSpecs& w);

  int size() const { return keys_.size(); }
  std::string_view key(int i) const { return keys_.key(i); }
  std::uint64_t object_size(int i) const { return w_->sizes(i); }

 private:
  const wire::PackedPutSpecs* w_ = nullptr;
  PackedKeyList keys_;
};

// A get's keys: GetRequest.keys, then GetRequest.packed_keys (all in its namespace).
class GetKeys {
 public:
  // The view of `req`, or INVALID_ARGUMENT when its packed keys' lengths do not add up.
  static Result<GetKeys> Of(const wire::GetRequest& req);

  int size() const { return req_->keys_size() + packed_.size(); }
  std::string_view ns(int i) const {
    return i < req_->keys_size() ? std::string_view(req_->keys(i).ns())
                                 : std::string_view(req_->packed_keys().ns());
  }
  std::string_view key(int i) const {
    return i < req_->keys_size() ? std::string_view(req_->keys(i).key())
                                 : packed_.key(i - req_->keys_size());
  }

 private:
  const wire::GetRequest* req_ = nullptr;
  PackedKeyList packed_;
};

}  // namespace tierpool
