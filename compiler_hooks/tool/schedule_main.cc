// tierpool-schedule: run as `tierpool schedule ...`, `tierpool plan ...` and `tierpool replay ...`.
//   schedule from-onnx MODEL.onnx -o OUT.pb [--json OUT.json] [--device NAME] [--batch N]
//   schedule from-torch --model MODULE:CALLABLE --input SHAPE [...] [--optimizer adam] -o OUT.pb
//   schedule show SCHEDULE
//   plan SCHEDULE --device NAME --hbm BUDGET -o PLAN.pb [--json PLAN.json]
//   replay SCHEDULE --device NAME --hbm BUDGET --policy P [--json R.json] [--trace T.json] [--svg
//   M.svg] replay SCHEDULE --device NAME --sweep [--max-overhead 0.01] [--json SWEEP.json]
#include <google/protobuf/util/json_util.h>
#include <unistd.h>

#include <boost/program_options.hpp>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>

#include "common/logging.h"
#include "common/option_errors.h"
#include "common/units.h"
#include "compiler_hooks/onnx_importer.h"
#include "prefetch/planner.h"
#include "prefetch/report.h"

namespace po = boost::program_options;
using namespace tierpool;
using namespace tierpool::prefetch;

namespace {

constexpr const char* kUsage = R"(usage:
  tierpool schedule from-onnx MODEL.onnx -o OUT.pb [--json OUT.json] [--device NAME] [--batch N]
                              [--dim NAME=N ...] [--data-input NAME ...] [--no-repeat]
  tierpool schedule from-torch --model MODULE:CALLABLE --input SHAPE [--input SHAPE ...]
                              [--optimizer adam|sgd|none] -o OUT.pb [--json OUT.json]
                              [--device NAME] [--python /usr/bin/python3]
  tierpool schedule show SCHEDULE [--json OUT.json, or - for standard output]
  tierpool schedule convert SCHEDULE [-o OUT.pb] [--json OUT.json]
  tierpool plan SCHEDULE --device NAME --hbm BUDGET -o PLAN.pb [--json PLAN.json]
  tierpool replay SCHEDULE --device NAME --hbm BUDGET --policy none|reactive-lru|planned
                              [--json REPORT.json] [--trace TRACE.json] [--svg MEM.svg]
  tierpool replay SCHEDULE --device NAME --sweep [--max-overhead 0.01] [--json SWEEP.json]

SCHEDULE is a .pb or .json schedule. BUDGET is a size (40G) or a share of the no-offload
peak (60%). NAME is a built-in device profile (h100, gh200, a100) or a JSON profile file.
)";

int Fail(const Status& s) {
  std::cerr << "tierpool: " << s.ToString() << "\n";
  return 1;
}

// "-" is standard output.
Status WriteFile(const std::string& path, const std::string& data) {
  if (path == "-") {
    std::cout << data;
    return std::cout ? Status::Ok() : Status::IoError("cannot write to standard output");
  }
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << data;
  return out ? Status::Ok() : Status::IoError("cannot write " + path);
}

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

// What Summary says, for `schedule show --json`.
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

Status Emit(const Schedule& s, const std::string& out, const std::string& json) {
  if (out.empty() && json.empty())
    return Status::InvalidArgument("give -o OUT.pb and/or --json OUT.json");
  if (!out.empty()) TIERPOOL_RETURN_IF_ERROR(SaveSchedule(s, out));
  if (!json.empty()) TIERPOOL_RETURN_IF_ERROR(SaveScheduleJson(s, json));
  std::cout << Summary(s);
  return Status::Ok();
}

std::string HookPath() {
  if (std::filesystem::exists(TIERPOOL_TORCH_HOOK_SOURCE)) return TIERPOOL_TORCH_HOOK_SOURCE;
  return TIERPOOL_TORCH_HOOK_INSTALLED;
}

}  // namespace

int main(int argc, char** argv) {
  LogToStderr();
  std::vector<std::string> args;
  std::string out, json, device = "h100", hbm, policy = "planned", trace, svg, model,
                         optimizer = "adam", python = "/usr/bin/python3", hook, dtype = "float32";
  std::vector<std::string> dims, data_inputs, inputs;
  std::int64_t batch = 1;
  double max_overhead = 0.01, sweep_step = 0.05, sweep_lowest = 0.2,
         margin = PlannerConfig{}.prefetch_margin;
  bool no_repeat = false, sweep = false;
  po::options_description opts("options");
  // clang-format off
  opts.add_options()
    ("help,h", "help")
    ("output,o", po::value(&out), "output file (.pb)")
    ("json", po::value(&json), "JSON output file")
    ("device", po::value(&device)->default_value("h100"), "device profile")
    ("batch", po::value(&batch)->default_value(1), "from-onnx: symbolic batch size")
    ("dim", po::value(&dims), "from-onnx: NAME=N for another symbolic dimension")
    ("data-input", po::value(&data_inputs), "from-onnx: a graph input that is data, not a weight")
    ("no-repeat", po::bool_switch(&no_repeat), "the schedule runs once (no loop)")
    ("model", po::value(&model), "from-torch: MODULE:CALLABLE returning the model")
    ("input", po::value(&inputs), "from-torch: an input shape, e.g. 32x3x224x224")
    ("optimizer", po::value(&optimizer)->default_value("adam"), "from-torch: adam, sgd or none")
    ("dtype", po::value(&dtype)->default_value("float32"), "from-torch: parameter dtype")
    ("python", po::value(&python)->default_value("/usr/bin/python3"), "from-torch: interpreter")
    ("hook", po::value(&hook), "from-torch: the hook script (default: the one shipped)")
    ("hbm", po::value(&hbm), "hbm budget: a size or a percentage of the no-offload peak")
    ("policy", po::value(&policy)->default_value("planned"), "none, reactive-lru or planned")
    ("trace", po::value(&trace), "replay: Chrome trace (open in Perfetto)")
    ("svg", po::value(&svg), "replay: SVG of each tier's use over time")
    ("sweep", po::bool_switch(&sweep), "replay: try budgets from 100% down")
    ("max-overhead", po::value(&max_overhead)->default_value(0.01), "sweep: allowed time overhead")
    ("sweep-step", po::value(&sweep_step)->default_value(0.05), "sweep: budget step")
    ("sweep-lowest", po::value(&sweep_lowest)->default_value(0.2), "sweep: lowest budget tried")
    ("prefetch-margin", po::value(&margin)->default_value(PlannerConfig{}.prefetch_margin),
     "plan: prefetch windows cover this many times a transfer's estimated time")
    ("args", po::value(&args), "positional");
  // clang-format on
  po::positional_options_description pos;
  pos.add("args", -1);
  po::variables_map vm;
  try {
    po::store(po::command_line_parser(argc, argv).options(opts).positional(pos).run(), vm);
    po::notify(vm);
  } catch (const po::error& e) {
    std::cerr << "tierpool: " << OptionErrorMessage(e) << "\n" << kUsage;
    return 2;
  }
  if (vm.count("help") || args.empty()) {
    std::cout << kUsage << "\n" << opts;
    return args.empty() && !vm.count("help") ? 2 : 0;
  }
  auto profile = LoadProfile(device);
  if (!profile.ok()) return Fail(profile.status());

  const std::string& cmd = args[0];
  if (cmd == "schedule" && args.size() >= 2 && args[1] == "from-onnx") {
    if (args.size() != 3) return Fail(Status::InvalidArgument("from-onnx takes one MODEL.onnx"));
    hooks::OnnxImportOptions o;
    o.batch = batch;
    o.repeats = !no_repeat;
    o.data_inputs = data_inputs;
    for (const auto& d : dims) {
      auto eq = d.find('=');
      try {
        if (eq == std::string::npos) throw std::invalid_argument(d);
        o.dims[d.substr(0, eq)] = std::stoll(d.substr(eq + 1));
      } catch (const std::exception&) {
        return Fail(Status::InvalidArgument("--dim takes NAME=N, got '" + d + "'"));
      }
    }
    auto s = hooks::ImportOnnx(args[2], o);
    if (!s.ok()) return Fail(s.status());
    ApplyCostModel(*profile, &*s);
    Status st = Emit(*s, out, json);
    return st.ok() ? 0 : Fail(st);
  }
  if (cmd == "schedule" && args.size() >= 2 && args[1] == "from-torch") {
    if (model.empty() || inputs.empty()) {
      return Fail(
          Status::InvalidArgument("from-torch needs --model MODULE:CALLABLE and --input SHAPE"));
    }
    std::string tmp = std::filesystem::temp_directory_path() /
                      ("tierpool-torch-" + std::to_string(::getpid()) + ".json");
    std::vector<std::string> cmdline = {python,        hook.empty() ? HookPath() : hook,
                                        "--model",     model,
                                        "--optimizer", optimizer,
                                        "--dtype",     dtype,
                                        "--out",       tmp};
    for (const auto& in : inputs) {
      cmdline.push_back("--input");
      cmdline.push_back(in);
    }
    if (no_repeat) cmdline.push_back("--no-repeat");
    std::string shell;
    for (const auto& a : cmdline) {
      std::string q = a;
      std::string esc;
      for (char c : q) esc += c == '\'' ? std::string("'\\''") : std::string(1, c);
      shell += "'" + esc + "' ";
    }
    int rc = std::system(shell.c_str());
    if (rc != 0) {
      return Fail(Status::FailedPrecondition("the PyTorch hook failed (" + python +
                                             "; it needs python3-torch): see its message above"));
    }
    auto s = LoadSchedule(tmp);
    std::filesystem::remove(tmp);
    if (!s.ok()) return Fail(s.status());
    ApplyCostModel(*profile, &*s);
    Status st = Emit(*s, out, json);
    return st.ok() ? 0 : Fail(st);
  }
  if (cmd == "schedule" && args.size() == 3 && args[1] == "convert") {
    auto s = LoadSchedule(args[2]);
    if (!s.ok()) return Fail(s.status());
    Status st = Emit(*s, out, json);
    return st.ok() ? 0 : Fail(st);
  }
  if (cmd == "schedule" && args.size() == 3 && args[1] == "show") {
    auto s = LoadSchedule(args[2]);
    if (!s.ok()) return Fail(s.status());
    if (!json.empty()) {  // --json FILE, or --json - for standard output
      Status st = WriteFile(json, SummaryJson(*s));
      return st.ok() ? 0 : Fail(st);
    }
    std::cout << Summary(*s);
    return 0;
  }
  if ((cmd == "replay" || cmd == "plan") && args.size() == 2) {
    auto s = LoadSchedule(args[1]);
    if (!s.ok()) return Fail(s.status());
    ApplyCostModel(*profile, &*s);
    Lifetimes lt(*s);
    if (cmd == "replay" && sweep) {
      auto r = Sweep(*s, lt, *profile, max_overhead, sweep_step, sweep_lowest, margin);
      if (!r.ok()) return Fail(r.status());
      std::cout << SweepTable(*r, *s, *profile);
      if (!json.empty()) {
        Status st = WriteFile(json, SweepJson(*r, *s, *profile));
        if (!st.ok()) return Fail(st);
      }
      return 0;
    }
    if (hbm.empty() && !(cmd == "replay" && policy == "none")) {
      return Fail(Status::InvalidArgument("give --hbm BUDGET (a size, or a % of the peak)"));
    }
    std::uint64_t budget = 0;
    if (!hbm.empty()) {
      auto b = ParseHbmBudget(hbm, lt.peak_bytes());
      if (!b.ok()) return Fail(b.status());
      budget = *b;
    }
    std::optional<schedule::Plan> plan;
    auto p = ParsePolicy(policy);
    if (!p.ok()) return Fail(p.status());
    if (cmd == "plan" || *p == Policy::kPlanned) {
      auto built = BuildPlan(*s, lt, *profile, {.hbm_budget = budget, .prefetch_margin = margin});
      if (!built.ok()) return Fail(built.status());
      plan = std::move(built).value();
    }
    if (cmd == "plan") {
      if (out.empty() && json.empty()) return Fail(Status::InvalidArgument("give -o PLAN.pb"));
      if (!out.empty()) {
        std::ofstream f(out, std::ios::binary | std::ios::trunc);
        if (!plan->SerializeToOstream(&f)) return Fail(Status::IoError("cannot write " + out));
      }
      if (!json.empty()) {
        std::string text;
        google::protobuf::util::JsonPrintOptions jo;
        jo.add_whitespace = true;
        jo.preserve_proto_field_names = true;
        (void)google::protobuf::util::MessageToJsonString(*plan, &text, jo);
        Status st = WriteFile(json, text);
        if (!st.ok()) return Fail(st);
      }
      std::printf("plan for %s under %s on %s: %d actions, predicted peak %s\n", s->name().c_str(),
                  FormatBytes(budget).c_str(), profile->name.c_str(), plan->actions_size(),
                  FormatBytes(plan->predicted_peak_bytes()).c_str());
      return 0;
    }
    auto r = Replay(*s, lt, *profile,
                    {.policy = *p,
                     .hbm_budget = budget,
                     .plan = plan ? &*plan : nullptr,
                     .record_timeline = !trace.empty() || !svg.empty()});
    if (!r.ok()) return Fail(r.status());
    std::printf(
        "%s, %s, budget %s: peak hbm %s, time %.3f ms (compute %.3f ms, stall %.3f ms, "
        "lower bound %.3f ms), h2d %s, d2h %s, %llu actions\n",
        s->name().c_str(), r->policy.c_str(), budget ? FormatBytes(budget).c_str() : "none",
        FormatBytes(r->peak_hbm).c_str(), r->time_us / 1000, r->compute_us / 1000,
        r->stall_us / 1000, r->stall_lower_bound_us / 1000, FormatBytes(r->h2d_bytes).c_str(),
        FormatBytes(r->d2h_bytes).c_str(), static_cast<unsigned long long>(r->actions));
    for (const auto& prob : r->problems) std::printf("  problem: %s\n", prob.c_str());
    if (!json.empty()) {
      Status st = WriteFile(json, ReportJson(*r, *s));
      if (!st.ok()) return Fail(st);
    }
    if (!trace.empty()) {
      Status st = WriteFile(trace, ChromeTraceJson(*r));
      if (!st.ok()) return Fail(st);
    }
    if (!svg.empty()) {
      Status st = WriteFile(svg, MemorySvg(*r, s->name() + " on " + profile->name));
      if (!st.ok()) return Fail(st);
    }
    return r->missing_at_use + r->budget_violations + r->bad_actions == 0 ? 0 : 3;
  }
  std::cerr << "tierpool: unknown command\n" << kUsage;
  return 2;
}
