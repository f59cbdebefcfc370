#include "client/reply_shape.h"

namespace tierpool::detail {

namespace {

// `plain` items in the reply at `positions`, `packed` items in lists that agree when
// `lists_agree`: n together, positions ascending and below n. No positions and nothing packed:
// every item plain.
bool Answers(int plain, int packed, const google::protobuf::RepeatedField<std::uint32_t>& positions,
             bool lists_agree, std::size_t n) {
  if (packed == 0 && positions.empty()) return plain >= 0 && static_cast<std::size_t>(plain) == n;
  if (!lists_agree || positions.size() != plain ||
      static_cast<std::size_t>(plain) + static_cast<std::size_t>(packed) != n) {
    return false;
  }
  for (int j = 0; j < positions.size(); ++j) {
    if (positions[j] >= n || (j > 0 && positions[j] <= positions[j - 1])) return false;
  }
  return true;
}

}  // namespace

bool GetReplyAnswers(const wire::GetReply& reply, std::size_t n) {
  const wire::PackedGetResults& p = reply.packed();
  const int packed = p.sizes_size();
  const bool agree = p.checksums_size() == packed && p.lease_ids_size() == packed &&
                     p.arena_ids_size() == packed && p.offsets_size() == packed &&
                     p.lengths_size() == packed;
  return Answers(reply.items_size(), packed, p.positions(), agree, n);
}

bool ReserveReplyAnswers(const wire::ReserveReply& reply, std::size_t n) {
  const wire::PackedReserveResults& p = reply.packed();
  const int packed = p.reservation_ids_size();
  const bool agree =
      p.arena_ids_size() == packed && p.offsets_size() == packed && p.lengths_size() == packed;
  return Answers(reply.items_size(), packed, p.positions(), agree, n);
}

}  // namespace tierpool::detail
