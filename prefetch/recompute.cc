#include "prefetch/recompute.h"

#include <algorithm>
#include <string>
#include <unordered_set>

#include "common/units.h"

namespace tierpool::prefetch {
namespace {

bool RecomputableKind(schedule::TensorKind k) {
  return k == schedule::ACTIVATION || k == schedule::SAVED_ACTIVATION;
}

// What a recompute of `t` reads: its recipe's inputs, else its defining step's
// (`defining_step_inputs`).
std::vector<std::uint32_t> MadeFrom(const schedule::Tensor& t,
                                    const std::vector<std::uint32_t>& defining_step_inputs) {
  if (t.has_recipe()) return {t.recipe().inputs().begin(), t.recipe().inputs().end()};
  return defining_step_inputs;
}

std::vector<std::uint32_t> MadeFrom(const Schedule& s, const Lifetimes& lt, std::uint32_t t) {
  const auto& x = s.tensors(static_cast<int>(t));
  return MadeFrom(x, lt.used_at(static_cast<std::uint32_t>(x.def_step())));
}

// What a recompute of `t` costs: its recipe's compute, else its defining step's.
double MakeUs(const Schedule& s, const schedule::Tensor& t) {
  if (t.has_recipe()) return t.recipe().compute_us();
  return s.steps(t.def_step()).compute_us();
}

// Whether `t` may be recomputed at all in `s`: a schedule whose steps do not list what their
// ops read recomputes only tensors that carry their recipe.
bool MayRecompute(const Schedule& s, const schedule::Tensor& t) {
  return RecomputableKind(t.kind()) && (t.has_recipe() || !s.recipes_only());
}

// Steps that update some tensor in place (an optimizer's): running one again is not pure.
std::vector<bool> UpdatingSteps(const Schedule& s) {
  std::vector<bool> out(static_cast<std::size_t>(s.steps_size()), false);
  for (const auto& t : s.tensors()) {
    for (auto u : t.update_steps()) out[u] = true;
  }
  return out;
}

std::uint64_t TouchedBytes(const Schedule& s, const Lifetimes& lt, std::uint32_t step) {
  std::uint64_t b = 0;
  for (auto t : lt.defined_at(step)) b += s.tensors(static_cast<int>(t)).size_bytes();
  for (auto t : lt.used_at(step)) b += s.tensors(static_cast<int>(t)).size_bytes();
  return b;
}

bool TouchedAt(const Lifetimes& lt, std::uint32_t t, std::uint32_t step) {
  const auto& d = lt.defined_at(step);
  const auto& u = lt.used_at(step);
  return std::find(d.begin(), d.end(), t) != d.end() || std::find(u.begin(), u.end(), t) != u.end();
}

// Bytes a recompute of `t` at `at` adds to what step `at` touches: the copy and the inputs of
// its defining step that `at` does not touch already.
std::uint64_t AddedAt(const Schedule& s, const Lifetimes& lt, std::uint32_t t, std::uint32_t at) {
  std::uint64_t b = s.tensors(static_cast<int>(t)).size_bytes();
  for (auto in : MadeFrom(s, lt, t)) {
    if (!TouchedAt(lt, in, at)) b += s.tensors(static_cast<int>(in)).size_bytes();
  }
  return b;
}

bool HasUseFrom(const schedule::Tensor& t, std::uint32_t step) {
  return !t.use_steps().empty() && t.use_steps(t.use_steps_size() - 1) >= step;
}

}  // namespace

std::vector<RecomputeCandidate> RecomputeCandidates(const Schedule& s, const Lifetimes& lt,
                                                    std::uint64_t min_bytes,
                                                    std::uint64_t step_bytes) {
  const std::uint64_t cap = std::max(step_bytes, lt.step_floor_bytes());
  const std::vector<double> start = ComputeStarts(s);
  const std::vector<bool> updating = UpdatingSteps(s);
  std::vector<RecomputeCandidate> out;
  for (int i = 0; i < s.tensors_size(); ++i) {
    const auto& t = s.tensors(i);
    const auto id = static_cast<std::uint32_t>(i);
    if (!MayRecompute(s, t) || t.def_step() < 0 || t.update_steps_size() > 0 ||
        t.size_bytes() < min_bytes || t.use_steps().empty() ||
        updating[static_cast<std::size_t>(t.def_step())]) {
      continue;
    }
    // The longest stretch between two of its touches (in compute time) that leaves a step
    // between them for the recompute.
    std::uint32_t prev = static_cast<std::uint32_t>(t.def_step());
    std::uint32_t at = 0;
    double gap = 0;
    for (auto u : t.use_steps()) {
      if (u >= prev + 2) {
        const double g = start[u - 1] - start[prev + 1];
        if (g > gap || at == 0) {
          gap = g;
          at = u - 1;
        }
      }
      prev = u;
    }
    if (at == 0) continue;
    // Every input in hbm at `at` anyway.
    bool inputs_live = true;
    for (auto in : MadeFrom(s, lt, id)) {
      if (!lt.persistent(in) &&
          !(lt.def(in) < static_cast<int>(at) && lt.NextUse(in, at) != kNoUse)) {
        inputs_live = false;
        break;
      }
    }
    if (!inputs_live) continue;
    if (TouchedBytes(s, lt, at) + AddedAt(s, lt, id, at) > cap) continue;
    RecomputeCandidate c;
    c.tensor = id;
    c.at_step = at;
    c.cost_us = MakeUs(s, t);
    c.bytes = t.size_bytes();
    c.freed_byte_us = static_cast<double>(t.size_bytes()) * std::max(gap, 0.0);
    if (c.freed_byte_us <= 0) continue;
    out.push_back(c);
  }
  std::stable_sort(out.begin(), out.end(), [](const auto& a, const auto& b) {
    // Most freed per microsecond first; a free recompute (cost 0) first of all.
    return a.freed_byte_us * std::max(b.cost_us, 1e-3) >
           b.freed_byte_us * std::max(a.cost_us, 1e-3);
  });
  return out;
}

std::vector<schedule::Recompute> ChooseRecomputes(const Schedule& s, const Lifetimes& lt,
                                                  const std::vector<RecomputeCandidate>& c,
                                                  double cost_cap_us, std::uint64_t step_bytes) {
  const std::uint64_t cap = std::max(step_bytes, lt.step_floor_bytes());
  std::vector<schedule::Recompute> out;
  std::unordered_set<std::uint32_t> chosen, inputs;
  std::vector<std::uint64_t> added(static_cast<std::size_t>(s.steps_size()), 0);
  double cost = 0;
  for (const auto& k : c) {
    if (cost + k.cost_us > cost_cap_us) continue;
    if (inputs.count(k.tensor) > 0) continue;
    const auto in = MadeFrom(s, lt, k.tensor);
    if (std::any_of(in.begin(), in.end(), [&](auto t) { return chosen.count(t) > 0; })) continue;
    const std::uint64_t more = AddedAt(s, lt, k.tensor, k.at_step);
    if (TouchedBytes(s, lt, k.at_step) + added[k.at_step] + more > cap) continue;
    added[k.at_step] += more;
    cost += k.cost_us;
    chosen.insert(k.tensor);
    inputs.insert(in.begin(), in.end());
    schedule::Recompute r;
    r.set_tensor(k.tensor);
    r.set_at_step(k.at_step);
    out.push_back(r);
  }
  return out;
}

Result<Schedule> ApplyRecomputes(const Schedule& s,
                                 const google::protobuf::RepeatedPtrField<schedule::Recompute>& r) {
  Schedule out = s;
  const auto tensors = static_cast<std::uint32_t>(s.tensors_size());
  const auto steps = static_cast<std::uint32_t>(s.steps_size());
  const std::vector<bool> updating = UpdatingSteps(s);
  // Each step's inputs in `s`, and the copy made of each tensor so far (and where).
  std::vector<std::vector<std::uint32_t>> used_at(steps);
  for (std::uint32_t t = 0; t < tensors; ++t) {
    for (auto u : s.tensors(static_cast<int>(t)).use_steps()) used_at[u].push_back(t);
  }
  std::vector<std::int64_t> copy(tensors, -1);
  std::vector<std::uint32_t> copy_at(tensors, 0);
  for (int i = 0; i < r.size(); ++i) {
    const std::uint32_t id = r.Get(i).tensor();
    const std::uint32_t at = r.Get(i).at_step();
    auto bad = [&](const std::string& what) {
      return Status::InvalidArgument("recompute " + std::to_string(i) + " (tensor " +
                                     std::to_string(id) + " at step " + std::to_string(at) +
                                     "): " + what);
    };
    if (id >= tensors) return bad("the schedule has " + std::to_string(tensors) + " tensors");
    if (at >= steps) return bad("the schedule has " + std::to_string(steps) + " steps");
    const schedule::Tensor& t = s.tensors(static_cast<int>(id));
    if (!RecomputableKind(t.kind())) return bad("only activations are recomputed");
    if (!MayRecompute(s, t))
      return bad(
          "the tensor has no recipe, and the schedule's steps do not list what their ops read");
    if (t.def_step() < 0 || t.update_steps_size() > 0) {
      return bad("the tensor is persistent or updated in place");
    }
    const auto producer = static_cast<std::uint32_t>(t.def_step());
    if (updating[producer]) return bad("its defining step updates tensors in place");
    if (copy[id] >= 0) return bad("the tensor is recomputed twice");
    const auto& uses = out.tensors(static_cast<int>(id)).use_steps();
    if (at <= producer || std::find(uses.begin(), uses.end(), at) != uses.end() ||
        !HasUseFrom(out.tensors(static_cast<int>(id)), at + 1)) {
      return bad("the step is not between two of the tensor's uses");
    }
    // The inputs as they stand at `at` (a copy made before it stands for its tensor).
    std::vector<std::uint32_t> inputs;
    for (auto in : MadeFrom(t, used_at[producer])) {
      const std::uint32_t now =
          copy[in] >= 0 && copy_at[in] < at ? static_cast<std::uint32_t>(copy[in]) : in;
      const schedule::Tensor& x = out.tensors(static_cast<int>(now));
      if (x.def_step() >= 0 && !(x.def_step() < static_cast<int>(at) && HasUseFrom(x, at))) {
        return bad("input '" + x.name() + "' of its defining step is not in hbm at the step");
      }
      inputs.push_back(now);
    }
    // The copy takes the uses after `at`; the tensor keeps those before.
    const auto copy_id = static_cast<std::uint32_t>(out.tensors_size());
    schedule::Tensor* made = out.add_tensors();
    *made = t;
    made->set_id(copy_id);
    made->set_name(t.name() + "@recompute");
    made->set_def_step(static_cast<int>(at));
    made->clear_use_steps();
    schedule::Tensor* kept = out.mutable_tensors(static_cast<int>(id));
    std::vector<std::uint32_t> before, after;
    for (auto u : kept->use_steps()) (u < at ? before : after).push_back(u);
    kept->clear_use_steps();
    for (auto u : before) kept->add_use_steps(u);
    for (auto u : after) made->add_use_steps(u);
    for (auto in : inputs) {
      auto* x = out.mutable_tensors(static_cast<int>(in))->mutable_use_steps();
      if (!std::binary_search(x->begin(), x->end(), at)) {
        x->Add(at);
        std::sort(x->begin(), x->end());
      }
    }
    schedule::Step* to = out.mutable_steps(static_cast<int>(at));
    if (t.has_recipe()) {
      // The op alone: its time, on the step's clock (its kernels too, where they are split).
      const double us = t.recipe().compute_us();
      to->set_compute_us(to->compute_us() + us);
      if (to->kernel_us() > 0) to->set_kernel_us(to->kernel_us() + us);
    } else {
      const schedule::Step& from = s.steps(static_cast<int>(producer));
      to->set_compute_us(to->compute_us() + from.compute_us());
      to->set_kernel_us(to->kernel_us() + from.kernel_us());
      to->set_flops(to->flops() + from.flops());
      to->set_bytes_touched(to->bytes_touched() + from.bytes_touched());
    }
    copy[id] = copy_id;
    copy_at[id] = at;
  }
  TIERPOOL_RETURN_IF_ERROR(Validate(out));
  return out;
}

Result<const Schedule*> ScheduleForPlan(const Schedule& s, const schedule::Plan& plan,
                                        Schedule* out) {
  if (plan.recomputes().empty()) return &s;
  auto applied = ApplyRecomputes(s, plan.recomputes());
  if (!applied.ok()) return applied.status();
  *out = std::move(applied).value();
  return out;
}

double RecomputeUs(const Schedule& s, const schedule::Plan& plan) {
  double us = 0;
  for (const auto& r : plan.recomputes()) {
    if (r.tensor() >= static_cast<std::uint32_t>(s.tensors_size())) continue;
    const auto& t = s.tensors(static_cast<int>(r.tensor()));
    if (t.def_step() >= 0 && t.def_step() < s.steps_size()) us += MakeUs(s, t);
  }
  return us;
}

std::uint64_t RecomputeBytes(const Schedule& s, const schedule::Plan& plan) {
  std::uint64_t b = 0;
  for (const auto& r : plan.recomputes()) {
    if (r.tensor() < static_cast<std::uint32_t>(s.tensors_size())) {
      b += s.tensors(static_cast<int>(r.tensor())).size_bytes();
    }
  }
  return b;
}

}  // namespace tierpool::prefetch
