#include "compiler_hooks/tool/schedule_summary.h"

#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <utility>

#include "common/units.h"
#include "prefetch/cost_model.h"

namespace tierpool::prefetch {

namespace {

// What `schedule show` reports, computed once for the text and the JSON forms.
struct ScheduleSummary {
  std::map<std::string, std::pair<std::uint64_t, std::uint64_t>> by_kind;  // tensors, bytes
  double compute_us = 0;                                                   // per iteration
  std::uint64_t peak_bytes = 0;
  std::uint64_t persistent_bytes = 0;
};

ScheduleSummary Summarize(const Schedule& s) {
  ScheduleSummary r;
  for (const auto& t : s.tensors()) {
    auto& e = r.by_kind[schedule::TensorKind_Name(t.kind())];
    e.first++;
    e.second += t.size_bytes();
  }
  for (const auto& st : s.steps()) r.compute_us += st.compute_us();
  Lifetimes lt(s);
  r.peak_bytes = lt.peak_bytes();
  r.persistent_bytes = lt.persistent_bytes();
  return r;
}

}  // namespace

std::string CostTable(const Schedule& s, const DeviceProfile& d) {
  const auto by = CostByClass(d, s);
  double total = 0;
  for (const auto& c : by) total += c.total_us;
  std::ostringstream o;
  char line[256];
  std::snprintf(line, sizeof line, "  time on %s by op class (estimated %.3f ms per iteration):\n",
                d.name.c_str(), total / 1000);
  o << line;
  std::snprintf(line, sizeof line, "    %-12s %6s %10s %10s %10s %6s %9s %9s\n", "class", "steps",
                "GFLOP", "GB", "ms", "share", "compute-", "dispatch-");
  o << line;
  for (std::size_t i = 0; i < kOpClasses; ++i) {
    const auto& c = by[i];
    if (c.steps == 0) continue;
    std::snprintf(line, sizeof line,
                  "    %-12s %6u %10.1f %10.2f %10.3f %5.1f%% %6u/%-3u %6u/%-3u\n",
                  std::string(OpClassName(static_cast<OpClass>(i))).c_str(), c.steps, c.flops / 1e9,
                  static_cast<double>(c.bytes) / 1e9, c.total_us / 1000,
                  total > 0 ? 100 * c.total_us / total : 0, c.compute_bound, c.steps,
                  c.dispatch_bound, c.steps);
    o << line;
  }
  return o.str();
}

std::string Summary(const Schedule& s) {
  const ScheduleSummary r = Summarize(s);
  std::ostringstream o;
  o << s.name() << " (" << s.source() << ")" << (s.repeats() ? ", repeats" : "") << "\n"
    << "  " << s.steps_size() << " steps, " << s.tensors_size() << " tensors, estimated "
    << r.compute_us / 1000 << " ms per iteration on " << (s.device().empty() ? "?" : s.device())
    << "\n  peak without offload " << FormatBytes(r.peak_bytes) << " (persistent "
    << FormatBytes(r.persistent_bytes) << ")\n";
  for (const auto& [k, v] : r.by_kind) {
    o << "  " << k << ": " << v.first << " tensors, " << FormatBytes(v.second) << "\n";
  }
  return o.str();
}

std::string SummaryJson(const Schedule& s) {
  const ScheduleSummary r = Summarize(s);
  nlohmann::json kinds = nlohmann::json::object();
  for (const auto& [k, v] : r.by_kind) kinds[k] = {{"tensors", v.first}, {"bytes", v.second}};
  return nlohmann::json{{"name", s.name()},
                        {"source", s.source()},
                        {"device", s.device()},
                        {"repeats", s.repeats()},
                        {"steps", s.steps_size()},
                        {"tensors", s.tensors_size()},
                        {"compute_us_per_iteration", r.compute_us},
                        {"peak_bytes_without_offload", r.peak_bytes},
                        {"persistent_bytes", r.persistent_bytes},
                        {"by_kind", kinds}}
             .dump(2) +
         "\n";
}

}  // namespace tierpool::prefetch
