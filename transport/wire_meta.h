// Object metadata between its public type (tierpool/types.h) and the wire message; the server
// (replies, --persist snapshots) and the client read and write it the same way.
#pragma once

#include "proto/tierpool.pb.h"
#include "tierpool/types.h"

namespace tierpool::transport {

// Empty strings are left unset, which proto3 reads the same: a meta without names (a get's
// bytes_meta_only) builds no string at all.
inline void ToWire(const ObjectMeta& m, wire::ObjectMeta* w) {
  if (!m.ns.empty()) w->set_ns(m.ns);
  if (!m.key.empty()) w->set_key(m.key);
  w->set_size(m.size);
  if (!m.dtype.empty()) w->set_dtype(m.dtype);
  for (auto d : m.shape) w->add_shape(d);
  w->set_kind(static_cast<wire::ObjectKind>(m.kind));
  w->set_durability(static_cast<wire::Durability>(m.durability));
  w->set_checksum(m.checksum);
  w->set_tier(static_cast<wire::Tier>(m.tier));
  w->set_created_unix_ms(m.created_unix_ms);
  w->set_pins(m.pins);
}

// Enum values are cast as they are: callers that take the message from outside check them
// (wire::ObjectKind_IsValid, ...) first.
inline ObjectMeta MetaFromWire(const wire::ObjectMeta& w) {
  ObjectMeta m;
  m.ns = w.ns();
  m.key = w.key();
  m.size = w.size();
  m.dtype = w.dtype();
  m.shape.assign(w.shape().begin(), w.shape().end());
  m.kind = static_cast<ObjectKind>(w.kind());
  m.durability = static_cast<Durability>(w.durability());
  m.checksum = w.checksum();
  m.tier = static_cast<TierKind>(w.tier());
  m.created_unix_ms = w.created_unix_ms();
  m.pins = w.pins();
  return m;
}

}  // namespace tierpool::transport
