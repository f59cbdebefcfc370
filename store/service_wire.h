// Wire conversions the service's files share (store/service.cc, store/service_get.cc).
#pragma once

#include "proto/tierpool.pb.h"
#include "tiers/tier.h"

namespace tierpool {

inline void ToWire(const Extent& e, wire::Extent* w) {
  w->set_arena_id(e.arena_id);
  w->set_offset(e.offset);
  w->set_length(e.length);
}

}  // namespace tierpool
