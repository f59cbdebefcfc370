#include "prefetch/schedule.h"

#include <google/protobuf/util/json_util.h>

#include <algorithm>

#include <fstream>
#include <string_view>
#include <unordered_set>

#include "common/posix.h"

namespace tierpool::prefetch {

namespace {
constexpr std::uint64_t kMaxTensorBytes = 1ull << 44;  // 16 TiB: anything larger is garbage
// All tensors together: 64 PiB. Memory curves and step floors sum sizes in 64 bits, which 2^20
// tensors of the largest size would overflow.
constexpr std::uint64_t kMaxTotalBytes = 1ull << 56;
constexpr std::size_t kMaxSteps = 10'000'000;
constexpr std::size_t kMaxTensors = 50'000'000;

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}
// A recipe reads other tensors that exist when the tensor is defined, and costs a sane time.
Status ValidateRecipe(const Schedule& s, const schedule::Tensor& t, const std::string& who) {
  const auto& r = t.recipe();
  if (!(r.compute_us() >= 0) || r.compute_us() > 1e12) {
    return Status::InvalidArgument(who + ": its recipe has a negative or absurd compute time");
  }
  if (r.inputs_size() > 64) return Status::InvalidArgument(who + ": its recipe reads too much");
  for (auto in : r.inputs()) {
    if (in >= static_cast<std::uint32_t>(s.tensors_size()) || in == t.id()) {
      return Status::InvalidArgument(who + ": its recipe reads tensor " + std::to_string(in) +
                                     ", not another tensor of the schedule");
    }
    const int def = s.tensors(static_cast<int>(in)).def_step();
    if (t.def_step() < 0 || def > t.def_step()) {
      return Status::InvalidArgument(who + ": its recipe reads tensor " + std::to_string(in) +
                                     ", which is defined after it");
    }
  }
  return Status::Ok();
}
}  // namespace

Status Validate(const Schedule& s) {
  if (s.format_version() != 1) {
    return Status::InvalidArgument("schedule format version " + std::to_string(s.format_version()) +
                                   " (this reads 1)");
  }
  if (s.steps_size() == 0) return Status::InvalidArgument("schedule has no steps");
  if (static_cast<std::size_t>(s.steps_size()) > kMaxSteps ||
      static_cast<std::size_t>(s.tensors_size()) > kMaxTensors) {
    return Status::InvalidArgument("schedule too large");
  }
  const auto n = static_cast<std::uint32_t>(s.steps_size());
  for (int i = 0; i < s.steps_size(); ++i) {
    const auto& st = s.steps(i);
    if (!(st.compute_us() >= 0) || st.compute_us() > 1e12 || !(st.flops() >= 0)) {
      return Status::InvalidArgument("step " + std::to_string(i) + " (" + st.name() +
                                     ") has a negative or absurd compute time or FLOP count");
    }
  }
  // Names are the objects' default keys in a live job: one tensor each.
  std::unordered_set<std::string_view> names;
  std::uint64_t total_bytes = 0;
  for (int i = 0; i < s.tensors_size(); ++i) {
    const auto& t = s.tensors(i);
    std::string who = "tensor " + std::to_string(i) + " (" + t.name() + ")";
    if (!names.insert(t.name()).second) {
      return Status::InvalidArgument(who + ": another tensor has this name");
    }
    if (t.id() != static_cast<std::uint32_t>(i)) {
      return Status::InvalidArgument(who + " has id " + std::to_string(t.id()) +
                                     "; ids must be the tensor's index");
    }
    if (t.size_bytes() > kMaxTensorBytes) return Status::InvalidArgument(who + " is too large");
    total_bytes += t.size_bytes();  // checked at each tensor: never past 2^56 + 2^44
    if (total_bytes > kMaxTotalBytes) {
      return Status::InvalidArgument(who + ": the tensors so far total more than " +
                                     std::to_string(kMaxTotalBytes >> 50) + " PiB");
    }
    if (t.def_step() < -1 || t.def_step() >= static_cast<int>(n)) {
      return Status::InvalidArgument(who + " is defined at step " + std::to_string(t.def_step()) +
                                     ", outside 0.." + std::to_string(n - 1));
    }
    std::int64_t prev = t.def_step();
    for (auto u : t.use_steps()) {
      if (u >= n) {
        return Status::InvalidArgument(who + " is used at step " + std::to_string(u) +
                                       ", outside the schedule");
      }
      if (static_cast<std::int64_t>(u) <= prev && !(prev == t.def_step() && t.def_step() < 0)) {
        return Status::InvalidArgument(who + ": uses must be ascending and after the def");
      }
      prev = u;
    }
    for (auto u : t.update_steps()) {
      if (u >= n) return Status::InvalidArgument(who + " is updated outside the schedule");
    }
    if (t.has_recipe()) TIERPOOL_RETURN_IF_ERROR(ValidateRecipe(s, t, who));
  }
  return Status::Ok();
}

Result<Schedule> ParseScheduleJson(const std::string& json) {
  Schedule s;
  google::protobuf::util::JsonParseOptions opts;
  opts.ignore_unknown_fields = false;
  auto st = google::protobuf::util::JsonStringToMessage(json, &s, opts);
  if (!st.ok()) return Status::InvalidArgument("not a schedule: " + st.ToString());
  TIERPOOL_RETURN_IF_ERROR(Validate(s));
  return s;
}

Result<Schedule> LoadSchedule(const std::string& path, std::uint64_t max_bytes) {
  auto read = ReadFileUpTo(path, max_bytes);
  if (!read.ok()) return read.status();
  const std::string& data = *read;
  if (EndsWith(path, ".json")) {
    auto s = ParseScheduleJson(data);
    if (!s.ok()) return Status(s.status().code(), path + ": " + s.status().message());
    return s;
  }
  Schedule s;
  if (!s.ParseFromString(data)) {
    return Status::InvalidArgument(path + " is not a binary schedule (use .json for JSON)");
  }
  if (Status v = Validate(s); !v.ok()) return Status(v.code(), path + ": " + v.message());
  return s;
}

Status ValidatePlan(const schedule::Plan& plan, const Schedule& s) {
  const auto steps = static_cast<std::uint32_t>(s.steps_size());
  // A plan that recomputes is for the schedule with its recomputes applied: one more tensor
  // for each (recompute.h checks the recomputes themselves when it applies them).
  if (plan.recomputes_size() > s.tensors_size()) {
    return Status::InvalidArgument("the plan recomputes " + std::to_string(plan.recomputes_size()) +
                                   " tensors, more than the schedule's " +
                                   std::to_string(s.tensors_size()));
  }
  const auto tensors = static_cast<std::uint32_t>(s.tensors_size() + plan.recomputes_size());
  // Every replay of every planning pass checks its plan: the message is built only on a problem.
  auto bad = [](int i, const std::string& what) {
    return Status::InvalidArgument("plan action " + std::to_string(i) + ": " + what);
  };
  for (int i = 0; i < plan.actions_size(); ++i) {
    const schedule::Action& a = plan.actions(i);
    if (!schedule::ActionKind_IsValid(a.kind())) return bad(i, "unknown action kind");
    if (a.tensor() >= tensors) {
      return bad(i, "names tensor " + std::to_string(a.tensor()) + ", the schedule has " +
                        std::to_string(tensors));
    }
    if (a.step() >= steps || (a.kind() == schedule::PREFETCH && a.needed_by() >= steps)) {
      return bad(i, "step out of range (the schedule has " + std::to_string(steps) + " steps)");
    }
    if (!(a.delay_us() >= 0 && a.delay_us() < 3.6e9)) return bad(i, "delay_us out of range");
  }
  // A plan moves each tensor a few times around each def, use and update: more actions than
  // four per such event is no plan of this schedule (a million duplicates of one action made
  // every progress report carry them all out again).
  std::uint64_t events = 0;
  for (const auto& t : s.tensors()) events += 1 + t.use_steps_size() + t.update_steps_size();
  events += 8 * static_cast<std::uint64_t>(plan.recomputes_size());
  if (static_cast<std::uint64_t>(plan.actions_size()) > 4 * events + 64) {
    return Status::InvalidArgument(
        "the plan has " + std::to_string(plan.actions_size()) + " actions, more than four per " +
        "def, use and update of the schedule's tensors (" + std::to_string(4 * events + 64) + ")");
  }
  for (auto t : plan.resident_at_start()) {
    if (t >= tensors) {
      return Status::InvalidArgument("resident tensor " + std::to_string(t) +
                                     " out of range (the schedule has " + std::to_string(tensors) +
                                     " tensors)");
    }
  }
  return Status::Ok();
}

Result<schedule::Plan> LoadPlan(const std::string& path, const Schedule& s,
                                std::uint64_t max_bytes) {
  auto read = ReadFileUpTo(path, max_bytes);
  if (!read.ok()) return read.status();
  schedule::Plan plan;
  if (EndsWith(path, ".json")) {
    google::protobuf::util::JsonParseOptions opts;
    opts.ignore_unknown_fields = false;
    auto st = google::protobuf::util::JsonStringToMessage(*read, &plan, opts);
    if (!st.ok()) return Status::InvalidArgument(path + ": not a plan: " + st.ToString());
  } else if (!plan.ParseFromString(*read)) {
    return Status::InvalidArgument(path + " is not a binary plan (use .json for JSON)");
  }
  if (plan.schedule() != s.name()) {
    return Status::InvalidArgument(path + ": the plan is for schedule '" + plan.schedule() +
                                   "', not '" + s.name() + "'");
  }
  if (Status v = ValidatePlan(plan, s); !v.ok()) {
    return Status(v.code(), path + ": " + v.message());
  }
  return plan;
}

Status SaveSchedule(const Schedule& s, const std::string& path) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out || !s.SerializeToOstream(&out)) return Status::IoError("cannot write " + path);
  return Status::Ok();
}

Status SaveScheduleJson(const Schedule& s, const std::string& path) {
  std::string json;
  google::protobuf::util::JsonPrintOptions opts;
  opts.add_whitespace = true;
  opts.preserve_proto_field_names = true;
  auto st = google::protobuf::util::MessageToJsonString(s, &json, opts);
  if (!st.ok()) return Status::Internal(st.ToString());
  std::ofstream out(path, std::ios::trunc);
  out << json;
  if (!out) return Status::IoError("cannot write " + path);
  return Status::Ok();
}

Lifetimes::Lifetimes(const Schedule& s) : steps_(static_cast<std::uint32_t>(s.steps_size())) {
  const std::size_t nt = static_cast<std::size_t>(s.tensors_size());
  def_.resize(nt);
  uses_.resize(nt);
  last_.resize(nt);
  defs_at_.resize(steps_);
  uses_at_.resize(steps_);
  std::vector<std::int64_t> delta(steps_ + 1, 0);
  for (std::size_t t = 0; t < nt; ++t) {
    const auto& ts = s.tensors(static_cast<int>(t));
    def_[t] = ts.def_step();
    uses_[t].assign(ts.use_steps().begin(), ts.use_steps().end());
    std::uint32_t last = def_[t] < 0 ? 0 : static_cast<std::uint32_t>(def_[t]);
    if (!uses_[t].empty()) last = std::max(last, uses_[t].back());
    last_[t] = last;
    if (def_[t] >= 0)
      defs_at_[static_cast<std::size_t>(def_[t])].push_back(static_cast<std::uint32_t>(t));
    for (auto u : uses_[t]) uses_at_[u].push_back(static_cast<std::uint32_t>(t));
    auto size = static_cast<std::int64_t>(ts.size_bytes());
    if (def_[t] < 0) {
      persistent_bytes_ += ts.size_bytes();
      delta[0] += size;
    } else {
      delta[static_cast<std::size_t>(def_[t])] += size;
      delta[last + 1] -= size;
    }
  }
  curve_.resize(steps_);
  std::int64_t running = 0;
  for (std::uint32_t i = 0; i < steps_; ++i) {
    running += delta[i];
    curve_[i] = static_cast<std::uint64_t>(running);
    peak_ = std::max(peak_, curve_[i]);
    // A tensor is never defined and used at one step (Validate: uses come after the def).
    std::uint64_t touched = 0;
    for (auto t : defs_at_[i]) touched += s.tensors(static_cast<int>(t)).size_bytes();
    for (auto t : uses_at_[i]) touched += s.tensors(static_cast<int>(t)).size_bytes();
    if (touched > step_floor_) {
      step_floor_ = touched;
      step_floor_at_ = i;
    }
  }
}

std::vector<double> ComputeStarts(const Schedule& s) {
  std::vector<double> start(static_cast<std::size_t>(s.steps_size()) + 1, 0.0);
  for (int i = 0; i < s.steps_size(); ++i)
    start[static_cast<std::size_t>(i) + 1] =
        start[static_cast<std::size_t>(i)] + s.steps(i).compute_us();
  return start;
}

std::uint32_t Lifetimes::NextUse(std::uint32_t t, std::uint32_t step) const {
  const auto& u = uses_[t];
  auto it = std::lower_bound(u.begin(), u.end(), step);
  return it == u.end() ? kNoUse : *it;
}

}  // namespace tierpool::prefetch
