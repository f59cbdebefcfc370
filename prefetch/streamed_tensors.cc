#include "prefetch/streamed_tensors.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "prefetch/periodic_copies.h"

namespace tierpool::prefetch {

bool Streamable(const Schedule& s, const Lifetimes& lt, std::uint32_t t) {
  const auto& tensor = s.tensors(static_cast<int>(t));
  return lt.persistent(t) && !lt.uses(t).empty() && tensor.update_steps_size() == 0 &&
         tensor.size_bytes() > 0;
}

std::optional<schedule::Plan> StreamedTensorsPlan(const Schedule& s, const Lifetimes& lt,
                                                  const DeviceProfile& d,
                                                  const StreamingOptions& options) {
  if (!s.repeats() || options.depth < 1 || lt.peak_bytes() <= options.budget) return std::nullopt;
  const std::uint64_t deficit = lt.peak_bytes() - options.budget;
  // Candidates, in order of first use: streamable, of at most `largest` bytes.
  std::vector<std::uint32_t> candidates;
  std::uint64_t total = 0, largest = 0;
  for (int i = 0; i < s.tensors_size(); ++i) {
    const auto t = static_cast<std::uint32_t>(i);
    const std::uint64_t size = s.tensors(i).size_bytes();
    if (!Streamable(s, lt, t) || (options.largest != 0 && size > options.largest)) continue;
    candidates.push_back(t);
    total += size;
    largest = std::max(largest, size);
  }
  const std::uint64_t want = deficit + static_cast<std::uint64_t>(options.depth) * largest;
  if (candidates.empty() || want > total) return std::nullopt;
  std::sort(candidates.begin(), candidates.end(), [&](std::uint32_t a, std::uint32_t b) {
    return std::make_pair(lt.uses(a).front(), a) < std::make_pair(lt.uses(b).front(), b);
  });
  // Streamed whenever the bytes streamed so far fall behind `want`'s share of those met so far:
  // spread evenly over the loop, so that every streamed tensor has kept ones before it whose
  // compute its load can hide behind.
  std::vector<bool> streamed(static_cast<std::size_t>(s.tensors_size()), false);
  double seen = 0, taken = 0;
  const double share = static_cast<double>(want) / static_cast<double>(total);
  for (std::uint32_t t : candidates) {
    const auto size = static_cast<double>(s.tensors(static_cast<int>(t)).size_bytes());
    seen += size;
    if (taken < share * seen) {
      streamed[t] = true;
      taken += size;
    }
  }
  // The streamed tensors' uses in order; uses of one tensor with no other streamed use between
  // them are one visit (the tensor stays for all of them).
  std::vector<std::pair<std::uint32_t, std::uint32_t>> uses;  // (step, tensor)
  for (std::uint32_t t : candidates) {
    if (!streamed[t]) continue;
    for (std::uint32_t u : lt.uses(t)) uses.emplace_back(u, t);
  }
  std::sort(uses.begin(), uses.end());
  struct Visit {
    std::uint32_t tensor, first, last;
  };
  std::vector<Visit> visits;
  for (auto [u, t] : uses) {
    if (!visits.empty() && visits.back().tensor == t) {
      visits.back().last = u;
    } else {
      visits.push_back({t, u, u});
    }
  }
  // A tensor that is the only one streamed has nothing to make room for: no ring.
  if (visits.size() < 2) return std::nullopt;
  const std::size_t n = visits.size();
  const std::size_t depth = std::min<std::size_t>(static_cast<std::size_t>(options.depth), n - 1);

  schedule::Plan plan;
  plan.set_format_version(1);
  plan.set_schedule(s.name());
  plan.set_hbm_budget_bytes(options.budget);
  plan.set_device(d.name);
  for (std::size_t i = 0; i < n; ++i) {
    auto* free = plan.add_actions();
    free->set_kind(schedule::FREE);
    free->set_tensor(visits[i].tensor);
    free->set_step(visits[i].last);
    free->set_after(true);
  }
  // Visit i's load goes when visit i - depth's tensor is dropped; the first `depth` visits'
  // loads go at the end of the iteration before (a prefetch at a step after the one it is
  // needed by serves the next iteration).
  for (std::size_t i = 0; i < n; ++i) {
    const Visit& before = visits[(i + n - depth) % n];
    auto* load = plan.add_actions();
    load->set_kind(schedule::PREFETCH);
    load->set_tensor(visits[i].tensor);
    load->set_step(before.last);
    load->set_after(true);
    load->set_needed_by(visits[i].first);
  }
  std::stable_sort(plan.mutable_actions()->begin(), plan.mutable_actions()->end(), ActionsByStep);
  // In hbm as an iteration starts: everything persistent but the streamed tensors, and those
  // whose loads the iteration before issued.
  std::vector<bool> loaded(streamed.size(), false);
  for (std::size_t i = 0; i < depth; ++i) loaded[visits[i].tensor] = true;
  for (int i = 0; i < s.tensors_size(); ++i) {
    const auto t = static_cast<std::uint32_t>(i);
    if (lt.persistent(t) && (!streamed[t] || loaded[t])) plan.add_resident_at_start(t);
  }
  plan.set_predicted_peak_bytes(options.budget);
  return plan;
}

}  // namespace tierpool::prefetch
