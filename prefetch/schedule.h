// Lifetime schedules: reading, writing and checking them, and what follows from them — each
// tensor's def and uses (the use-def chains), its next use at any step, and the memory in use at
// each step without offload.
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "common/status.h"
#include "proto/schedule.pb.h"

namespace tierpool::prefetch {

using schedule::Schedule;

// Reads a schedule from a binary (.pb) or JSON (.json, protobuf's JSON mapping) file, and checks
// it (Validate). Files larger than max_bytes are refused.
Result<Schedule> LoadSchedule(const std::string& path, std::uint64_t max_bytes = 1ull << 30);
Status SaveSchedule(const Schedule& s, const std::string& path);      // binary
Status SaveScheduleJson(const Schedule& s, const std::string& path);  // JSON
Result<Schedule> ParseScheduleJson(const std::string& json);

// Every field from outside is checked: ids are indexes, steps exist, uses are ascending and come
// after the def, sizes are sane. The message names the first problem.
Status Validate(const Schedule& s);

// A plan's fields checked against the schedule it is for: every action of a known kind, naming a
// tensor and steps of the schedule, with a finite delay of under an hour; resident tensors that
// exist. The message names the first problem. (Replay and the executor call it; a plan from a
// file is outside input.)
Status ValidatePlan(const schedule::Plan& plan, const Schedule& s);
// Reads a plan for `s` from a binary (.pb) or JSON (.json) file, and checks it (ValidatePlan, and
// that it names `s` as its schedule). Files larger than max_bytes are refused.
Result<schedule::Plan> LoadPlan(const std::string& path, const Schedule& s,
                                std::uint64_t max_bytes = 1ull << 30);

// When each step's compute starts with no stall at all (n + 1 entries: the last is the
// iteration's compute time): the clock the stall bounds reason on.
std::vector<double> ComputeStarts(const Schedule& s);

inline constexpr std::uint32_t kNoUse = std::numeric_limits<std::uint32_t>::max();

// Use-def chains and lifetimes of a validated schedule.
class Lifetimes {
 public:
  explicit Lifetimes(const Schedule& s);

  std::uint32_t steps() const { return steps_; }
  bool persistent(std::uint32_t t) const { return def_[t] < 0; }
  int def(std::uint32_t t) const { return def_[t]; }
  const std::vector<std::uint32_t>& uses(std::uint32_t t) const { return uses_[t]; }
  // Last step that touches it (def or use); for a tensor never used, its def.
  std::uint32_t last_touch(std::uint32_t t) const { return last_[t]; }
  // First use at or after step; kNoUse if none in this iteration.
  std::uint32_t NextUse(std::uint32_t t, std::uint32_t step) const;
  // Tensors a step defines, uses, or either.
  const std::vector<std::uint32_t>& defined_at(std::uint32_t step) const { return defs_at_[step]; }
  const std::vector<std::uint32_t>& used_at(std::uint32_t step) const { return uses_at_[step]; }
  // Bytes in hbm during each step if nothing is offloaded: persistent tensors always, others
  // from def to last use.
  const std::vector<std::uint64_t>& memory_curve() const { return curve_; }
  std::uint64_t peak_bytes() const { return peak_; }
  std::uint64_t persistent_bytes() const { return persistent_bytes_; }
  // The most bytes one step touches (the tensors it defines and uses), and the first step that
  // touches that many: a step's tensors are all in hbm while it runs, so no policy keeps a
  // budget below this, whatever it moves.
  std::uint64_t step_floor_bytes() const { return step_floor_; }
  std::uint32_t step_floor_step() const { return step_floor_at_; }

 private:
  std::uint32_t steps_;
  std::vector<int> def_;
  std::vector<std::vector<std::uint32_t>> uses_;
  std::vector<std::uint32_t> last_;
  std::vector<std::vector<std::uint32_t>> defs_at_, uses_at_;
  std::vector<std::uint64_t> curve_;
  std::uint64_t peak_ = 0;
  std::uint64_t persistent_bytes_ = 0;
  std::uint64_t step_floor_ = 0;
  std::uint32_t step_floor_at_ = 0;
};

}  // namespace tierpool::prefetch
