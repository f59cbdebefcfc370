#include "client/get_reply.h"

namespace tierpool::detail {

bool GetReplyAnswers(const wire::GetReply& reply, std::size_t n) {
  const wire::PackedGetResults& pins = reply.packed();
  const int packed = pins.sizes_size();
  if (packed == 0 && pins.positions_size() == 0) {
    return reply.items_size() == static_cast<int>(n);
  }
  if (pins.checksums_size() != packed || pins.lease_ids_size() != packed ||
      pins.arena_ids_size() != packed || pins.offsets_size() != packed ||
      pins.lengths_size() != packed || pins.positions_size() != reply.items_size() ||
      static_cast<std::size_t>(reply.items_size()) + static_cast<std::size_t>(packed) != n) {
    return false;
  }
  for (int j = 0; j < pins.positions_size(); ++j) {
    if (pins.positions(j) >= n || (j > 0 && pins.positions(j) <= pins.positions(j - 1))) {
      return false;
    }
  }
  return true;
}

}  // namespace tierpool::detail
