#include "prefetch/tensors_by_window.h"

#include <algorithm>

namespace tierpool::prefetch {

TensorsByWindow::TensorsByWindow(std::int64_t steps)
    : buckets_(static_cast<std::size_t>(std::max<std::int64_t>(steps, 0)) + 1),
      words_((buckets_.size() + 63) / 64),
      summary_((words_.size() + 63) / 64) {}

void TensorsByWindow::Reset(std::int64_t steps) {
  for (auto& b : buckets_) b.clear();
  buckets_.resize(static_cast<std::size_t>(std::max<std::int64_t>(steps, 0)) + 1);
  words_.assign((buckets_.size() + 63) / 64, 0);
  summary_.assign((words_.size() + 63) / 64, 0);
  size_ = 0;
}

std::size_t TensorsByWindow::BucketOf(std::int64_t window) const {
  return static_cast<std::size_t>(std::clamp<std::int64_t>(window, 0, last_bucket()));
}

void TensorsByWindow::Mark(std::size_t bucket, bool non_empty) {
  const std::size_t w = bucket / 64;
  const std::uint64_t bit = std::uint64_t{1} << (bucket % 64);
  words_[w] = non_empty ? words_[w] | bit : words_[w] & ~bit;
  const std::uint64_t sbit = std::uint64_t{1} << (w % 64);
  summary_[w / 64] = words_[w] != 0 ? summary_[w / 64] | sbit : summary_[w / 64] & ~sbit;
}

void TensorsByWindow::Insert(std::int64_t window, std::uint32_t tensor) {
  const std::size_t b = BucketOf(window);
  auto& bucket = buckets_[b];
  bucket.insert(std::lower_bound(bucket.begin(), bucket.end(), tensor), tensor);
  if (bucket.size() == 1) Mark(b, true);
  ++size_;
}

void TensorsByWindow::Erase(std::int64_t window, std::uint32_t tensor) {
  const std::size_t b = BucketOf(window);
  auto& bucket = buckets_[b];
  auto it = std::lower_bound(bucket.begin(), bucket.end(), tensor);
  if (it == bucket.end() || *it != tensor) return;
  bucket.erase(it);
  if (bucket.empty()) Mark(b, false);
  --size_;
}

std::int64_t TensorsByWindow::LastNonEmpty(std::int64_t b) const {
  if (b < 0) return -1;
  auto w = static_cast<std::int64_t>(b / 64);
  // Within b's word, the bits at or below b.
  std::uint64_t bits = words_[static_cast<std::size_t>(w)] & (~std::uint64_t{0} >> (63 - b % 64));
  if (bits != 0) return w * 64 + 63 - __builtin_clzll(bits);
  // The last non-empty word below w, through the summary.
  for (auto s = (w - 1) / 64; w > 0 && s >= 0; --s) {
    std::uint64_t sbits = summary_[static_cast<std::size_t>(s)];
    if (s == (w - 1) / 64) sbits &= ~std::uint64_t{0} >> (63 - (w - 1) % 64);
    if (sbits == 0) continue;
    const std::int64_t word = s * 64 + 63 - __builtin_clzll(sbits);
    return word * 64 + 63 - __builtin_clzll(words_[static_cast<std::size_t>(word)]);
  }
  return -1;
}

std::int64_t TensorsByWindow::FirstNonEmpty(std::int64_t b) const {
  if (b > last_bucket()) return -1;
  auto w = static_cast<std::int64_t>(b / 64);
  // Within b's word, the bits at or above b.
  std::uint64_t bits = words_[static_cast<std::size_t>(w)] & (~std::uint64_t{0} << (b % 64));
  if (bits != 0) return w * 64 + __builtin_ctzll(bits);
  // The first non-empty word above w, through the summary.
  const auto words = static_cast<std::int64_t>(words_.size());
  for (auto s = (w + 1) / 64; w + 1 < words && s < static_cast<std::int64_t>(summary_.size());
       ++s) {
    std::uint64_t sbits = summary_[static_cast<std::size_t>(s)];
    if (s == (w + 1) / 64) sbits &= ~std::uint64_t{0} << ((w + 1) % 64);
    if (sbits == 0) continue;
    const std::int64_t word = s * 64 + __builtin_ctzll(sbits);
    return word * 64 + __builtin_ctzll(words_[static_cast<std::size_t>(word)]);
  }
  return -1;
}

}  // namespace tierpool::prefetch
