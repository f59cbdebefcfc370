#include "store/packed_items.h"

namespace tierpool {

Result<PackedKeyList> PackedKeyList::Of(
    const std::string& keys, const google::protobuf::RepeatedField<std::uint32_t>& lengths,
    std::string_view what) {
  PackedKeyList list;
  list.keys_ = &keys;
  list.lengths_ = &lengths;
  list.starts_.reserve(static_cast<std::size_t>(lengths.size()));
  std::uint64_t at = 0;  // a sum of at most 2^31 lengths of 32 bits: no overflow
  for (std::uint32_t n : lengths) {
    list.starts_.push_back(at);
    at += n;
  }
  if (at != keys.size()) {
    return Status::InvalidArgument(std::string(what) + ": key lengths add up to " +
                                   std::to_string(at) + " bytes, the keys are " +
                                   std::to_string(keys.size()));
  }
  return list;
}

Result<PackedPuts> PackedPuts::Of(const wire::PackedPutSpecs& w) {
  if (w.key_bytes_size() != w.sizes_size()) {
    return Status::InvalidArgument("packed puts: " + std::to_string(w.key_bytes_size()) +
                                   " key lengths for " + std::to_string(w.sizes_size()) + " sizes");
  }
  auto keys = PackedKeyList::Of(w.keys(), w.key_bytes(), "packed puts");
  if (!keys.ok()) return keys.status();
  PackedPuts p;
  p.w_ = &w;
  p.keys_ = std::move(keys).value();
  return p;
}

Result<GetKeys> GetKeys::Of(const wire::GetRequest& req) {
  GetKeys k;
  k.req_ = &req;
  if (req.has_packed_keys()) {
    auto packed =
        PackedKeyList::Of(req.packed_keys().keys(), req.packed_keys().key_bytes(), "packed keys");
    if (!packed.ok()) return packed.status();
    k.packed_ = std::move(packed).value();
  }
  return k;
}

}  // namespace tierpool
