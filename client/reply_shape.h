// Checks a batch reply's shape before the client reads it (internal to the client library): the
// server is trusted with bytes only as far as their checksums go, and a reply that does not
// answer what was asked must fail the call, not index past a list.
//
// Stateless and thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>

#include "proto/tierpool.pb.h"

namespace tierpool::detail {

// True when `reply` answers a get of `n` items: all in items (a server that packs nothing), or
// GetReply.packed's lists of one length with items exactly at its positions (ascending, below
// n), together n (docs/protocol.md, PackedGetResults).
bool GetReplyAnswers(const wire::GetReply& reply, std::size_t n);
// The same for a reserve of `n` items and ReserveReply.packed (PackedReserveResults).
bool ReserveReplyAnswers(const wire::ReserveReply& reply, std::size_t n);

// A reply whose shape passed, read in the batch's order: each item is the next one of `items`
// (at a listed position, or every item when nothing is packed) or the next packed one.
class ReplyOrder {
 public:
  ReplyOrder(const google::protobuf::RepeatedField<std::uint32_t>& positions, bool any_packed)
      : positions_(positions), any_packed_(any_packed) {}

  // Item `i` of the batch, asked for 0, 1, 2, ... in turn: true when it is in `items`, false
  // when it is packed; *at is its index in that list.
  bool Plain(std::size_t i, int* at) {
    const bool plain = next_plain_ < positions_.size()
                           ? positions_[next_plain_] == static_cast<std::uint32_t>(i)
                           : !any_packed_;
    *at = plain ? next_plain_++ : next_packed_++;
    return plain;
  }

 private:
  const google::protobuf::RepeatedField<std::uint32_t>& positions_;
  const bool any_packed_;
  int next_plain_ = 0, next_packed_ = 0;
};

}  // namespace tierpool::detail
