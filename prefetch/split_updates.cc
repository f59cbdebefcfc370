#include "prefetch/split_updates.h"

#include <algorithm>
#include <limits>
#include <string>
#include <vector>

#include "prefetch/cost_model.h"

namespace tierpool::prefetch {
namespace {

// The element count of a tensor whose shape is known and whose size is whole elements of it;
// 0 when either is not so (it cannot be sliced by elements).
std::uint64_t Elements(const schedule::Tensor& t) {
  if (t.shape_size() == 0) return 0;
  std::uint64_t n = 1;
  for (auto d : t.shape()) {
    if (d <= 0 || n > std::numeric_limits<std::uint64_t>::max() / static_cast<std::uint64_t>(d))
      return 0;
    n *= static_cast<std::uint64_t>(d);
  }
  return t.size_bytes() % n == 0 ? n : 0;
}

// Where slice j of k starts among n elements: n * j / k without overflow (j <= k <= 2^20).
std::uint64_t SliceStart(std::uint64_t n, std::uint32_t j, std::uint32_t k) {
  return n / k * j + n % k * j / k;
}

std::string Sliced(const std::string& name, std::uint32_t j, std::uint32_t k) {
  return name + "[" + std::to_string(j) + "/" + std::to_string(k) + "]";
}

}  // namespace

Result<SplitUpdatesResult> SplitOptimizerUpdates(const Schedule& s, std::uint64_t max_chunk_bytes) {
  if (max_chunk_bytes < 4096) {
    return Status::InvalidArgument("the largest slice must be at least 4 KiB, not " +
                                   std::to_string(max_chunk_bytes) + " bytes");
  }
  if (Status st = Validate(s); !st.ok()) return st;
  const auto n = static_cast<std::uint32_t>(s.steps_size());
  const auto m = static_cast<std::uint32_t>(s.tensors_size());
  std::vector<std::vector<std::uint32_t>> touching(n);  // step -> tensors it defines or uses
  for (std::uint32_t t = 0; t < m; ++t) {
    const auto& tensor = s.tensors(static_cast<int>(t));
    if (tensor.def_step() >= 0)
      touching[static_cast<std::uint32_t>(tensor.def_step())].push_back(t);
    for (auto u : tensor.use_steps()) touching[u].push_back(t);  // update_steps are uses too
  }
  SplitUpdatesResult r;
  std::vector<std::uint32_t> slices(n, 1);         // per step
  std::vector<std::uint32_t> tensor_slices(m, 1);  // per tensor
  std::vector<std::uint64_t> elements(m, 0);       // of each split tensor
  std::vector<std::uint64_t> step_elements(n, 0);  // of each split step's tensors
  for (std::uint32_t i = 0; i < n; ++i) {
    auto& tl = touching[i];
    std::sort(tl.begin(), tl.end());
    tl.erase(std::unique(tl.begin(), tl.end()), tl.end());
    if (tl.empty() || ClassifyOp(s.steps(static_cast<int>(i)).op_type()) != OpClass::kOptimizer)
      continue;
    std::uint64_t largest = 0, widest_element = 0, count = 0;
    bool sliceable = true;
    for (auto t : tl) {
      const auto& tensor = s.tensors(static_cast<int>(t));
      largest = std::max<std::uint64_t>(largest, tensor.size_bytes());
      const std::uint64_t e = Elements(tensor);
      if (e == 0 || (count != 0 && e != count) || tensor_slices[t] != 1) {
        sliceable = false;
        continue;
      }
      count = e;
      widest_element = std::max(widest_element, tensor.size_bytes() / e);
    }
    if (largest <= max_chunk_bytes) continue;
    if (!sliceable || widest_element > max_chunk_bytes) {
      ++r.skipped;
      continue;
    }
    const std::uint64_t per_slice = max_chunk_bytes / widest_element;  // elements, >= 1
    const auto k = static_cast<std::uint32_t>(
        std::min<std::uint64_t>((count + per_slice - 1) / per_slice, 1u << 20));
    if (k < 2) continue;
    slices[i] = k;
    step_elements[i] = count;
    for (auto t : tl) {
      tensor_slices[t] = k;
      elements[t] = count;
    }
    ++r.steps_split;
    r.chunk_steps += k;
    r.tensors_split += static_cast<std::uint32_t>(tl.size());
  }

  // Steps: a split one becomes its slices in a row; first[i] is where step i (or its first
  // slice) now is.
  Schedule& out = r.schedule;
  out = s;
  out.clear_steps();
  out.clear_tensors();
  std::vector<std::uint32_t> first(n);
  for (std::uint32_t i = 0; i < n; ++i) {
    first[i] = static_cast<std::uint32_t>(out.steps_size());
    const auto& step = s.steps(static_cast<int>(i));
    const std::uint32_t k = slices[i];
    if (k == 1) {
      *out.add_steps() = step;
      continue;
    }
    const std::uint64_t count = step_elements[i];
    for (std::uint32_t j = 0; j < k; ++j) {
      const std::uint64_t e = SliceStart(count, j + 1, k) - SliceStart(count, j, k);
      const double share = static_cast<double>(e) / static_cast<double>(count);
      auto* slice = out.add_steps();
      *slice = step;
      slice->set_name(Sliced(step.name(), j, k));
      slice->set_compute_us(step.compute_us() * share);
      slice->set_kernel_us(step.kernel_us() * share);
      slice->set_flops(step.flops() * share);
      slice->set_bytes_touched(
          static_cast<std::uint64_t>(static_cast<double>(step.bytes_touched()) * share));
    }
  }
  // A tensor's step in the new numbering: slice j of a split step, or the step.
  auto renumber = [&](std::uint32_t step, std::uint32_t j) {
    return first[step] + (slices[step] > 1 ? j : 0);
  };
  for (std::uint32_t t = 0; t < m; ++t) {
    const auto& tensor = s.tensors(static_cast<int>(t));
    const std::uint32_t k = tensor_slices[t];
    for (std::uint32_t j = 0; j < k; ++j) {
      auto* slice = out.add_tensors();
      *slice = tensor;
      slice->set_id(static_cast<std::uint32_t>(out.tensors_size() - 1));
      if (tensor.def_step() >= 0) {
        slice->set_def_step(
            static_cast<std::int32_t>(renumber(static_cast<std::uint32_t>(tensor.def_step()), j)));
      }
      slice->clear_use_steps();
      for (auto u : tensor.use_steps()) slice->add_use_steps(renumber(u, j));
      slice->clear_update_steps();
      for (auto u : tensor.update_steps()) slice->add_update_steps(renumber(u, j));
      if (k == 1) continue;
      // A step that is not split but touches a split tensor touches every slice of it.
      const std::uint64_t count = elements[t];
      const std::uint64_t e = SliceStart(count, j + 1, k) - SliceStart(count, j, k);
      slice->set_name(Sliced(tensor.name(), j, k));
      slice->set_size_bytes(tensor.size_bytes() / count * e);
      slice->clear_shape();
      slice->add_shape(static_cast<std::int64_t>(e));
    }
  }
  if (Status st = Validate(out); !st.ok()) {
    return Status::Internal("the split schedule does not validate: " + st.message());
  }
  return r;
}

}  // namespace tierpool::prefetch
