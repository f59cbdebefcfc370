// Checks a batch reply's shape before the client reads it (internal to the client library): the
// server is trusted with bytes only as far as their checksums go, and a reply that does not
// answer what was asked must fail the call, not index past a list.
//
// Stateless and thread-safe.
#pragma once

#include <cstddef>

#include "proto/tierpool.pb.h"

namespace tierpool::detail {

// True when `reply` answers a get of `n` items: all in items (a server that packs nothing), or
// GetReply.packed's lists of one length with items exactly at its positions (ascending, below
// n), together n (docs/protocol.md, PackedGetResults).
bool GetReplyAnswers(const wire::GetReply& reply, std::size_t n);
// The same for a reserve of `n` items and ReserveReply.packed (PackedReserveResults).
bool ReserveReplyAnswers(const wire::ReserveReply& reply, std::size_t n);

}  // namespace tierpool::detail
