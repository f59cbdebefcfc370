#include "prefetch/waiting_loads.h"

#include <bit>
#include <limits>

namespace tierpool::prefetch {

WaitingLoads::WaitingLoads(std::int64_t steps, std::size_t tensors)
    : size_(tensors, 0), waiting_(tensors, 0), tree_(static_cast<std::size_t>(steps) + 1, 0) {}

void WaitingLoads::Update(std::int64_t use, std::int64_t delta) {
  for (auto i = static_cast<std::size_t>(use) + 1; i < tree_.size(); i += i & (~i + 1)) {
    tree_[i] += delta;
  }
}

std::int64_t WaitingLoads::Prefix(std::int64_t uses) const {
  std::int64_t sum = 0;
  for (auto i = static_cast<std::size_t>(uses); i > 0; i -= i & (~i + 1)) sum += tree_[i];
  return sum;
}

void WaitingLoads::Add(std::uint32_t tensor, std::int64_t use, std::uint64_t bytes) {
  if (waiting_[tensor]) return;
  waiting_[tensor] = 1;
  size_[tensor] = bytes;
  loads_.emplace(use, tensor);
  bytes_ += bytes;
  Update(use, static_cast<std::int64_t>(bytes));
}

WaitingLoads::Iterator WaitingLoads::Erase(Iterator it) {
  const auto [use, tensor] = *it;
  waiting_[tensor] = 0;
  bytes_ -= size_[tensor];
  Update(use, -static_cast<std::int64_t>(size_[tensor]));
  return loads_.erase(it);
}

WaitingLoads::Iterator WaitingLoads::Cut(std::int64_t room, std::int64_t now) const {
  Iterator cut = loads_.begin();
  if (room >= 0) {
    // The most whole use steps that fit: a descent of the Fenwick tree.
    std::size_t uses = 0;
    std::int64_t left = room;
    for (std::size_t bit = std::bit_floor(tree_.size() - 1); bit > 0; bit >>= 1) {
      if (uses + bit < tree_.size() && tree_[uses + bit] <= left) {
        uses += bit;
        left -= tree_[uses];
      }
    }
    // Then the loads of the next use step, in order, while they fit.
    cut = loads_.lower_bound({static_cast<std::int64_t>(uses), 0});
    while (cut != loads_.end() && cut->first == static_cast<std::int64_t>(uses) &&
           static_cast<std::int64_t>(size_[cut->second]) <= left) {
      left -= static_cast<std::int64_t>(size_[cut->second]);
      ++cut;
    }
  }
  const Iterator must = loads_.upper_bound({now, std::numeric_limits<std::uint32_t>::max()});
  if (must == loads_.end() || (cut != loads_.end() && *cut < *must)) return must;
  return cut;
}

std::uint64_t WaitingLoads::BytesBefore(Iterator cut) const {
  if (cut == loads_.end()) return bytes_;
  auto bytes = static_cast<std::uint64_t>(Prefix(cut->first));
  for (auto it = loads_.lower_bound({cut->first, 0}); it != cut; ++it) bytes += size_[it->second];
  return bytes;
}

}  // namespace tierpool::prefetch
