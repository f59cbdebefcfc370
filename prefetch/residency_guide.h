// What share of each tensor an offline optimum keeps in hbm at a few boundary steps of the
// iteration (the transfer LP's relaxation, transfer_lp.h): the planner can follow it when it
// chooses what to evict (planner.h). Immutable once built; safe to share between threads.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

namespace tierpool::prefetch {

struct ResidencyGuide {
  std::vector<std::uint32_t> boundaries;   // ascending steps of one iteration
  std::vector<std::vector<float>> in_hbm;  // per tensor, per boundary; empty: stays in hbm

  bool empty() const { return boundaries.empty(); }

  // The share of tensor t in hbm at the first boundary at or after `step` (of one iteration;
  // past the last boundary, the first of the next iteration), 1 where the guide says nothing.
  float InHbm(std::uint32_t t, std::uint32_t step) const {
    if (t >= in_hbm.size() || in_hbm[t].empty()) return 1.0f;
    auto it = std::lower_bound(boundaries.begin(), boundaries.end(), step);
    std::size_t k = it == boundaries.end() ? 0 : static_cast<std::size_t>(it - boundaries.begin());
    return in_hbm[t][k];
  }

  // The least share of tensor t in hbm at the boundaries from step `from` up to, not including,
  // step `to` (steps counted across iterations of `n` steps; at most one iteration is looked
  // at), or at the first boundary from `from` when there is none before `to`.
  float LeastInHbm(std::uint32_t t, std::int64_t from, std::int64_t to, std::int64_t n) const {
    if (t >= in_hbm.size() || in_hbm[t].empty()) return 1.0f;
    to = std::min(to, from + n);
    const auto& v = in_hbm[t];
    const std::size_t kb = boundaries.size();
    auto it = std::lower_bound(boundaries.begin(), boundaries.end(),
                               static_cast<std::uint32_t>(from % n));
    std::size_t k = static_cast<std::size_t>(it - boundaries.begin());
    std::int64_t base = from - from % n;
    float least = 2.0f;
    for (std::size_t seen = 0; seen < kb; ++seen, ++k) {
      if (k == kb) {
        k = 0;
        base += n;
      }
      std::int64_t step = base + boundaries[k];
      if (seen > 0 && step >= to) break;
      least = std::min(least, v[k]);
    }
    return least;
  }
};

}  // namespace tierpool::prefetch
