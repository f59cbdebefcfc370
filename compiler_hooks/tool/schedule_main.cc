// tierpool-schedule: run as `tierpool schedule ...`, `tierpool plan ...` and `tierpool replay ...`.
//   schedule from-onnx MODEL.onnx -o OUT.pb [--json OUT.json] [--device NAME] [--batch N]
//   schedule from-torch --model MODULE:CALLABLE --input SHAPE [...] [--optimizer adam] -o OUT.pb
//   schedule show SCHEDULE
//   plan SCHEDULE --device NAME --hbm BUDGET -o PLAN.pb [--json PLAN.json]
//   replay SCHEDULE --device NAME --hbm BUDGET --policy P [--json R.json] [--trace T.json] [--svg
//   M.svg] replay SCHEDULE --device NAME --sweep [--max-overhead 0.01] [--json SWEEP.json]
// This file parses the flags and runs the `schedule ...` commands; plan_replay.cc runs `plan` and
// `replay`.
#include <unistd.h>

#include <boost/program_options.hpp>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>

#include "common/logging.h"
#include "common/option_errors.h"
#include "common/units.h"
#include "compiler_hooks/onnx_generate.h"
#include "compiler_hooks/onnx_importer.h"
#include "compiler_hooks/onnx_reorder.h"
#include "compiler_hooks/tool/plan_replay.h"
#include "compiler_hooks/tool/schedule_summary.h"
#include "compiler_hooks/tool/tool_common.h"
#include "prefetch/cost_model.h"
#include "prefetch/guided_plan.h"
#include "prefetch/planner.h"
#include "prefetch/reorder.h"
#include "prefetch/report.h"
#include "prefetch/split_updates.h"

namespace po = boost::program_options;
using namespace tierpool;
using namespace tierpool::prefetch;
using tierpool::tool::Fail;
using tierpool::tool::PlanOrReplay;
using tierpool::tool::SplitUpdates;
using tierpool::tool::WriteFile;

namespace {

constexpr const char* kUsage = R"(usage:
  tierpool schedule from-onnx MODEL.onnx -o OUT.pb [--json OUT.json] [--device NAME] [--batch N]
                              [--dim NAME=N ...] [--data-input NAME ...] [--no-repeat]
                              [--generate PROMPT:NEW_TOKENS [--prefill-chunk N] [--decode-only]]
                              (a decoder export with past* cache inputs and present* outputs)
  tierpool schedule from-torch --model MODULE:CALLABLE --input SHAPE [--input SHAPE ...]
                              [--optimizer adam|sgd|none] [--dtype float32|bfloat16|float16]
                              [--inference] [--attention fused|decomposed]
                              -o OUT.pb [--json OUT.json] [--device NAME] [--python /usr/bin/python3]
  tierpool schedule from-torch --model MODULE:CALLABLE --generate PROMPT:NEW_TOKENS [--batch N]
                              [--prefill-chunk N] [--decode-only] [--dtype ...] -o OUT.pb
                              (a decoder called as `logits, present = model(tokens, past)`)
  tierpool schedule calibrate --model MODULE:CALLABLE --input SHAPE [...] -o PROFILE.json
                              [--device BASE] [--measured SCHEDULE.json] [--json TABLE.json]
                              [--device-kind cuda|cpu] [--warmup 3] [--repeat 10] [--name N]
                              [--host-costs on|off: each op class's host time per op,
                              measured (default: on a GPU)]
                              (and from-torch's --optimizer, --dtype, --inference)
  tierpool schedule fit-profile MEASURED.json --device BASE --json OUT.json
                              [--dispatch-us X | --eager-ms T: fit it to the whole step]
  tierpool schedule profile [--device NAME] [--json OUT.json]
  tierpool schedule show SCHEDULE [--json OUT.json, or - for standard output]
                              [--device NAME: where the time goes on it, by op class]
  tierpool schedule convert SCHEDULE [-o OUT.pb] [--json OUT.json]
  tierpool schedule reorder SCHEDULE|MODEL.onnx -o OUT.pb [--json OUT.json]
                              [--onnx-out OUT.onnx] [--updates-only] [--device NAME]
                              [--max-overhead 0.01]
                              (each optimizer update right after its gradient, then an
                              order with a lower peak where one exists and the no-offload
                              iteration on the device grows by at most the overhead, every
                              dependency kept; for a model, from-onnx's options and the
                              reordered model)
  tierpool schedule split-updates SCHEDULE --chunk 16M -o OUT.pb [--json OUT.json]
                              (each optimizer update larger than the chunk as slices that
                              stream through hbm one after another)
  tierpool plan SCHEDULE --device NAME --hbm BUDGET -o PLAN.pb [--json PLAN.json] [--lp-guided]
                              [--split-updates SIZE: split-updates' slices first; also replay's]
  tierpool replay SCHEDULE --device NAME --hbm BUDGET --policy none|reactive-lru|planned
                              [--json REPORT.json] [--trace TRACE.json] [--svg MEM.svg]
                              [--plan PLAN.pb|.json: replay a plan made earlier (by `plan`,
                              under another profile, or by hand) instead of planning; its
                              budget unless --hbm gives one]
                              [--lp-guided: solve the LP bound and let its optimum choose
                              what to evict; kept if it stalls less (seconds, not ms;
                              its LP at 8 boundaries unless --lp-windows says)]
  tierpool replay SCHEDULE --device NAME --sweep [--max-overhead 0.01] [--json SWEEP.json]
                              [--sweep-step 0.05] [--sweep-lowest 0.2]
                              [--lp-windows 64: the LP stall bound's boundaries, 0 to skip it]
                              [--jobs 1: budgets worked on at once, a thread each]
  plan and replay: [--no-early-loads: skip the rounds the planner adds where its plan stalls
                              (early loads, reload-aware evictions): faster, may stall more]
                              [--recompute SHARE: where the plan stalls, also recompute
                              activations instead of moving them, adding at most SHARE
                              (0.05 or 5%) of the compute; kept where it runs faster]

SCHEDULE is a .pb or .json schedule. BUDGET is a size (40G) or a share of the no-offload
peak (60%). NAME is a built-in device profile (h100, gh200, a100, rtx3090) or a JSON profile
file (docs/cost-model.md); `schedule profile` prints one to start a file from.
)";

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

// This binary, for the calibration script to call back (fit-profile).
std::string SelfPath(const char* argv0) {
  std::error_code ec;
  auto p = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::string(argv0) : p.string();
}

// The calibration script lies beside the hook it imports.
std::string CalibratePath(const std::string& hook) {
  return (std::filesystem::path(hook).parent_path() / "tierpool_calibrate.py").string();
}

// What from-torch traces: a step of the model (training or inference), or a generation loop.
struct TorchTraceArgs {
  std::string model;
  std::vector<std::string> inputs;
  std::string optimizer = "adam";
  std::string dtype = "float32";
  bool no_repeat = false;
  bool inference = false;
  std::string attention = "fused";  // MultiheadAttention as PyTorch 2 runs it, on any PyTorch
  std::string generate;             // PROMPT:NEW_TOKENS
  std::int64_t batch = 1;
  std::int64_t prefill_chunk = 0;
  bool decode_only = false;
};

// The arguments from-torch and calibrate pass to the hook's parser.
std::vector<std::string> TorchArgs(const TorchTraceArgs& t, const std::string& out) {
  std::vector<std::string> a = {"--model", t.model, "--optimizer", t.optimizer,   "--dtype",
                                t.dtype,   "--out", out,           "--attention", t.attention};
  if (!t.generate.empty()) {
    a.insert(a.end(), {"--generate", t.generate, "--batch", std::to_string(t.batch),
                       "--prefill-chunk", std::to_string(t.prefill_chunk)});
    if (t.decode_only) a.push_back("--decode-only");
  }
  for (const auto& in : t.inputs) {
    a.push_back("--input");
    a.push_back(in);
  }
  if (t.no_repeat) a.push_back("--no-repeat");
  if (t.inference) a.push_back("--inference");
  return a;
}

// Runs `python script args...`; its own messages go to our standard error.
Status RunPython(const std::string& python, const std::string& script,
                 const std::vector<std::string>& args) {
  std::string shell;
  auto quote = [&shell](const std::string& a) {
    std::string esc;
    for (char c : a) esc += c == '\'' ? std::string("'\\''") : std::string(1, c);
    shell += "'" + esc + "' ";
  };
  quote(python);
  quote(script);
  for (const auto& a : args) quote(a);
  if (std::system(shell.c_str()) != 0) {
    return Status::FailedPrecondition("the PyTorch hook failed (" + python +
                                      "; it needs python3-torch): see its message above");
  }
  return Status::Ok();
}

// `tierpool schedule reorder`: the optimizer updates moved up, then (unless updates_only) the
// lower-peak order where its no-offload iteration on the device grows by at most max_overhead
// (it moves kernels against each other, which an eager profile charges). The order is against
// `s`; *lowered counts the steps the second pass moved.
Result<ReorderResult> RefineOrder(const Schedule& s, const DeviceProfile& device, bool updates_only,
                                  double max_overhead, std::uint32_t* lowered) {
  auto r = HoistOptimizerUpdates(s);
  if (!r.ok() || updates_only) return r;
  auto iteration_us = [&](Schedule candidate) {
    ApplyCostModel(device, &candidate);
    auto replay = Replay(candidate, Lifetimes(candidate), device, {.policy = Policy::kNone});
    return replay.ok() ? replay->time_us : std::numeric_limits<double>::infinity();
  };
  const double hoisted_us = iteration_us(r->schedule);
  auto lower = LowerPeakOrder(r->schedule, [&](const Schedule& candidate) {
    return iteration_us(candidate) <= hoisted_us * (1 + max_overhead);
  });
  if (!lower.ok()) return lower.status();
  *lowered = lower->moved;
  if (lower->moved == 0) return r;
  std::vector<std::uint32_t> order(r->order.size());  // composed: lower's positions over r's
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = r->order[lower->order[i]];
  r->order = std::move(order);
  r->schedule = std::move(lower->schedule);
  r->moved = 0;
  for (std::uint32_t i = 0; i < r->order.size(); ++i) r->moved += r->order[i] != i ? 1 : 0;
  return r;
}

// Every flag of the schedule, plan and replay commands, and the words after them.
struct ScheduleFlags {
  std::vector<std::string> args;
  std::string out, json, device = "h100", python = "/usr/bin/python3", hook;
  std::vector<std::string> dims, data_inputs;
  TorchTraceArgs torch;
  tool::PlanReplayFlags plan_replay;
  std::int64_t batch = 1;
  double max_overhead = 0.01;
  std::string measured, device_kind, host_costs, name, chunk, onnx_out;
  bool updates_only = false;
  int warmup = 3, repeat = 10;
  double dispatch = 0, eager_ms = 0;
  bool device_given = false;      // --device on the command line, not its default
  bool lp_windows_given = false;  // --lp-windows likewise
};

// Reads the flags into *f: nothing when a command is to run, else the exit status (help
// printed, or a usage error).
std::optional<int> ParseFlags(int argc, char** argv, ScheduleFlags* f) {
  po::options_description opts("options");
  // clang-format off
  opts.add_options()
    ("help,h", "help")
    ("output,o", po::value(&f->out), "output file (.pb)")
    ("json", po::value(&f->json), "JSON output file")
    ("device", po::value(&f->device)->default_value("h100"), "device profile")
    ("batch", po::value(&f->batch)->default_value(1), "from-onnx: symbolic batch size; --generate: sequences")
    ("dim", po::value(&f->dims), "from-onnx: NAME=N for another symbolic dimension")
    ("data-input", po::value(&f->data_inputs), "from-onnx: a graph input that is data, not a weight")
    ("no-repeat", po::bool_switch(&f->torch.no_repeat), "the schedule runs once (no loop)")
    ("model", po::value(&f->torch.model), "from-torch: MODULE:CALLABLE returning the model")
    ("input", po::value(&f->torch.inputs), "from-torch: an input shape, e.g. 32x3x224x224")
    ("optimizer", po::value(&f->torch.optimizer)->default_value("adam"), "from-torch: adam, sgd or none")
    ("dtype", po::value(&f->torch.dtype)->default_value("float32"), "from-torch: parameter dtype")
    ("inference", po::bool_switch(&f->torch.inference), "from-torch: the forward pass only (eval mode)")
    ("attention", po::value(&f->torch.attention)->default_value("fused"),
     "from-torch: fused (MultiheadAttention as one op, as PyTorch 2 runs it) or decomposed "
     "(as this PyTorch traces it)")
    ("generate", po::value(&f->torch.generate), "PROMPT:NEW_TOKENS: trace a prefill and decodes")
    ("prefill-chunk", po::value(&f->torch.prefill_chunk)->default_value(0),
     "--generate: prompt tokens per prefill call (0: all at once)")
    ("decode-only", po::bool_switch(&f->torch.decode_only),
     "--generate: the prompt's KV cache exists at the start; only the decodes run")
    ("python", po::value(&f->python)->default_value("/usr/bin/python3"), "from-torch: interpreter")
    ("hook", po::value(&f->hook), "from-torch: the hook script (default: the one shipped)")
    ("measured", po::value(&f->measured), "calibrate: write the schedule with measured step times")
    ("device-kind", po::value(&f->device_kind), "calibrate: cuda or cpu (default: cuda if present)")
    ("host-costs", po::value(&f->host_costs),
     "calibrate: on or off: measure each op class's host time per op (default: on a GPU)")
    ("warmup", po::value(&f->warmup)->default_value(3), "calibrate: untimed runs of each step")
    ("repeat", po::value(&f->repeat)->default_value(10), "calibrate: timed runs (median kept)")
    ("name", po::value(&f->name), "calibrate, fit-profile: the new profile's name")
    ("dispatch-us", po::value(&f->dispatch)->default_value(0), "fit-profile: host time per kernel")
    ("eager-ms", po::value(&f->eager_ms)->default_value(0),
     "fit-profile: the whole step's measured time, to fit the host time per kernel to")
    ("hbm", po::value(&f->plan_replay.hbm), "hbm budget: a size or a percentage of the no-offload peak")
    ("policy", po::value(&f->plan_replay.policy)->default_value("planned"), "none, reactive-lru or planned")
    ("plan", po::value(&f->plan_replay.plan_file), "replay: a plan made earlier (.pb or .json) instead of planning")
    ("trace", po::value(&f->plan_replay.trace), "replay: Chrome trace (open in Perfetto)")
    ("svg", po::value(&f->plan_replay.svg), "replay: SVG of each tier's use over time")
    ("sweep", po::bool_switch(&f->plan_replay.sweep), "replay: try budgets from 100% down")
    ("chunk", po::value(&f->chunk), "split-updates: the largest slice of a tensor (e.g. 16M)")
    ("onnx-out", po::value(&f->onnx_out), "reorder of a MODEL.onnx: write the reordered model")
    ("updates-only", po::bool_switch(&f->updates_only), "reorder: only move optimizer updates")
    ("split-updates", po::value(&f->plan_replay.split_updates),
     "plan, replay: split optimizer updates into slices of at most this size first")
    ("lp-guided", po::bool_switch(&f->plan_replay.lp_guided), "plan, replay: guide the planner by the LP bound's optimum")
    ("no-early-loads", po::bool_switch(&f->plan_replay.no_early_loads),
     "plan, replay: skip the rounds with early loads and reload-aware evictions (faster, may stall more)")
    ("recompute", po::value(&f->plan_replay.recompute),
     "plan, replay: recompute activations, adding at most this share of the compute (0.05, 5%)")
    ("max-overhead", po::value(&f->max_overhead)->default_value(0.01), "sweep: allowed time overhead; reorder: longest the no-offload iteration may grow")
    ("sweep-step", po::value(&f->plan_replay.sweep_step)->default_value(0.05), "sweep: budget step")
    ("sweep-lowest", po::value(&f->plan_replay.sweep_lowest)->default_value(0.2), "sweep: lowest budget tried")
    ("lp-windows", po::value(&f->plan_replay.lp_windows)->default_value(TransferLpOptions{}.max_windows),
     "sweep: boundaries of the LP stall bound (0: skip it); plan, replay --lp-guided: of the LP "
     "that guides (default there 8)")
    ("jobs", po::value(&f->plan_replay.sweep_jobs)->default_value(1), "sweep: budgets worked on at once")
    ("prefetch-margin", po::value(&f->plan_replay.margin)->default_value(PlannerConfig{}.prefetch_margin),
     "plan: prefetch windows cover this many times a transfer's estimated time")
    ("args", po::value(&f->args), "positional");
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
  if (vm.count("help") || f->args.empty()) {
    std::cout << kUsage << "\n" << opts;
    return f->args.empty() && !vm.count("help") ? 2 : 0;
  }
  f->device_given = !vm["device"].defaulted();
  f->lp_windows_given = !vm["lp-windows"].defaulted();
  return std::nullopt;
}

// from-onnx's options, for every command that imports a model.
Result<hooks::OnnxImportOptions> OnnxOptions(const ScheduleFlags& f) {
  hooks::OnnxImportOptions o;
  o.batch = f.batch;
  o.repeats = !f.torch.no_repeat;
  o.data_inputs = f.data_inputs;
  for (const auto& d : f.dims) {
    auto eq = d.find('=');
    try {
      if (eq == std::string::npos) throw std::invalid_argument(d);
      o.dims[d.substr(0, eq)] = std::stoll(d.substr(eq + 1));
    } catch (const std::exception&) {
      return Status::InvalidArgument("--dim takes NAME=N, got '" + d + "'");
    }
  }
  return o;
}

// The schedule a command made, priced on the profile where it was imported, written out.
int EmitOrFail(const Schedule& s, const ScheduleFlags& f) {
  Status st = Emit(s, f.out, f.json);
  return st.ok() ? 0 : Fail(st);
}

// schedule from-onnx MODEL.onnx: a step of the model, or with --generate a prefill and decodes.
int FromOnnx(const ScheduleFlags& f, const hooks::OnnxImportOptions& o,
             const DeviceProfile& profile) {
  if (f.args.size() != 3) return Fail(Status::InvalidArgument("from-onnx takes one MODEL.onnx"));
  const TorchTraceArgs& torch = f.torch;
  Result<Schedule> s = Status::Internal("not imported");
  if (torch.generate.empty()) {
    s = hooks::ImportOnnx(f.args[2], o);
  } else {
    hooks::OnnxGenerateOptions g{
        .import = o, .prefill_chunk = torch.prefill_chunk, .decode_only = torch.decode_only};
    auto colon = torch.generate.find(':');
    try {
      if (colon == std::string::npos) throw std::invalid_argument(torch.generate);
      g.prompt = std::stoll(torch.generate.substr(0, colon));
      g.new_tokens = std::stoll(torch.generate.substr(colon + 1));
    } catch (const std::exception&) {
      return Fail(Status::InvalidArgument("--generate takes PROMPT:NEW_TOKENS, got '" +
                                          torch.generate + "'"));
    }
    s = hooks::GenerateFromOnnx(f.args[2], g);
  }
  if (!s.ok()) return Fail(s.status());
  ApplyCostModel(profile, &*s);
  return EmitOrFail(*s, f);
}

// schedule from-torch: the hook traces the model in Debian's PyTorch.
int FromTorch(const ScheduleFlags& f, const DeviceProfile& profile) {
  const TorchTraceArgs& torch = f.torch;
  if (torch.model.empty() || (torch.inputs.empty() && torch.generate.empty())) {
    return Fail(Status::InvalidArgument(
        "from-torch needs --model MODULE:CALLABLE and --input SHAPE or --generate P:N"));
  }
  std::string tmp = std::filesystem::temp_directory_path() /
                    ("tierpool-torch-" + std::to_string(::getpid()) + ".json");
  Status ran = RunPython(f.python, f.hook.empty() ? HookPath() : f.hook, TorchArgs(torch, tmp));
  if (!ran.ok()) return Fail(ran);
  auto s = LoadSchedule(tmp);
  std::filesystem::remove(tmp);
  if (!s.ok()) return Fail(s.status());
  ApplyCostModel(profile, &*s);
  return EmitOrFail(*s, f);
}

// schedule calibrate: each step timed on this machine, written as a profile.
int Calibrate(const ScheduleFlags& f, const char* argv0) {
  const TorchTraceArgs& torch = f.torch;
  if (torch.model.empty() || torch.inputs.empty() || f.out.empty()) {
    return Fail(Status::InvalidArgument(
        "calibrate needs --model MODULE:CALLABLE, --input SHAPE and -o PROFILE.json"));
  }
  if (!torch.generate.empty()) {
    return Fail(Status::InvalidArgument("calibrate traces one step; --generate is not for it"));
  }
  auto a = TorchArgs(torch, f.out);
  a.insert(a.end(), {"--base", f.device, "--schedule-tool", SelfPath(argv0), "--warmup",
                     std::to_string(f.warmup), "--repeat", std::to_string(f.repeat)});
  if (!f.device_kind.empty()) a.insert(a.end(), {"--device-kind", f.device_kind});
  if (f.host_costs == "on" || f.host_costs == "off") {
    a.push_back(f.host_costs == "on" ? "--host-costs" : "--no-host-costs");
  } else if (!f.host_costs.empty()) {
    return Fail(Status::InvalidArgument("--host-costs is on or off, not '" + f.host_costs + "'"));
  }
  if (!f.measured.empty()) a.insert(a.end(), {"--measured", f.measured});
  if (!f.json.empty()) a.insert(a.end(), {"--table", f.json});
  if (!f.name.empty()) a.insert(a.end(), {"--name", f.name});
  Status ran = RunPython(f.python, CalibratePath(f.hook.empty() ? HookPath() : f.hook), a);
  return ran.ok() ? 0 : Fail(ran);
}

// schedule fit-profile MEASURED.json: the profile fitted to a schedule's measured step times.
int FitProfileCommand(const ScheduleFlags& f, const DeviceProfile& profile) {
  auto s = LoadSchedule(f.args[2]);
  if (!s.ok()) return Fail(s.status());
  if (f.json.empty()) return Fail(Status::InvalidArgument("fit-profile needs --json OUT.json"));
  if (f.dispatch > 0 && f.eager_ms > 0) {
    return Fail(Status::InvalidArgument("fit-profile takes --dispatch-us or --eager-ms, not both"));
  }
  if (!(f.eager_ms >= 0 && f.eager_ms < 1e9) || !(f.dispatch >= 0 && f.dispatch < 1e9)) {
    return Fail(Status::InvalidArgument("fit-profile: --eager-ms and --dispatch-us are >= 0"));
  }
  ProfileFit fit = FitProfile(profile, *s, f.dispatch);
  if (f.eager_ms > 0) fit.profile.dispatch_us = FitDispatch(fit.profile, *s, f.eager_ms * 1000);
  fit.profile.name = f.name.empty() ? profile.name + "-calibrated" : f.name;
  if (Status v = fit.profile.validate(); !v.ok()) return Fail(v);
  nlohmann::json rows = nlohmann::json::array();
  for (std::size_t i = 0; i < kOpClasses; ++i) {
    const auto& c = fit.by_class[i];
    if (c.steps == 0) continue;
    rows.push_back({{"class", OpClassName(static_cast<OpClass>(i))},
                    {"steps", c.steps},
                    {"modeled_ms", c.modeled_us / 1000},
                    {"measured_ms", c.measured_us / 1000},
                    {"calibrated_ms", c.calibrated_us / 1000}});
  }
  nlohmann::json j{{"profile", nlohmann::json::parse(ProfileToJson(fit.profile))},
                   {"by_class", rows}};
  Status st = WriteFile(f.json, j.dump(2) + "\n");
  return st.ok() ? 0 : Fail(st);
}

// schedule reorder SCHEDULE|MODEL.onnx: updates right after their gradients, then a lower peak.
int ReorderCommand(const ScheduleFlags& f, const hooks::OnnxImportOptions& onnx_options,
                   const DeviceProfile& profile) {
  const std::string& path = f.args[2];
  const bool is_onnx = std::filesystem::path(path).extension() == ".onnx";
  if (!f.onnx_out.empty() && !is_onnx) {
    return Fail(Status::InvalidArgument("--onnx-out needs a MODEL.onnx to reorder"));
  }
  Result<Schedule> s = is_onnx ? hooks::ImportOnnx(path, onnx_options) : LoadSchedule(path);
  if (s.ok() && is_onnx) ApplyCostModel(profile, &*s);
  if (!s.ok()) return Fail(s.status());
  std::uint32_t lowered = 0;  // steps the lower-peak pass moved after the updates'
  auto r = RefineOrder(*s, profile, f.updates_only, f.max_overhead, &lowered);
  if (!r.ok()) return Fail(r.status());
  Lifetimes before(*s), after(r->schedule);
  std::cout << s->name() << ": " << r->hoisted << " optimizer updates run earlier, "
            << (f.updates_only ? std::string()
                               : std::to_string(lowered) + " steps moved for a lower peak, ")
            << r->moved << " of " << s->steps_size() << " steps moved; no-offload peak "
            << FormatBytes(before.peak_bytes()) << " -> " << FormatBytes(after.peak_bytes())
            << "\n";
  if (!f.onnx_out.empty()) {
    Status st = hooks::WriteReorderedOnnx(path, onnx_options, *s, r->order, f.onnx_out);
    if (!st.ok()) return Fail(st);
  }
  return EmitOrFail(r->schedule, f);
}

// schedule split-updates SCHEDULE --chunk SIZE.
int SplitUpdatesCommand(const ScheduleFlags& f) {
  if (f.chunk.empty()) return Fail(Status::InvalidArgument("give --chunk SIZE (e.g. 16M)"));
  auto s = LoadSchedule(f.args[2]);
  if (!s.ok()) return Fail(s.status());
  auto r = SplitUpdates(*s, f.chunk);
  if (!r.ok()) return Fail(r.status());
  std::cout << s->name() << ": " << r->steps_split << " optimizer updates split into "
            << r->chunk_steps << " slices (" << r->tensors_split << " tensors sliced, "
            << r->skipped << " large updates left whole); " << s->steps_size() << " -> "
            << r->schedule.steps_size() << " steps\n";
  return EmitOrFail(r->schedule, f);
}

// schedule show SCHEDULE: its summary (with --device, where the time goes on it).
int Show(const ScheduleFlags& f, const DeviceProfile& profile) {
  auto s = LoadSchedule(f.args[2]);
  if (!s.ok()) return Fail(s.status());
  if (f.device_given) ApplyCostModel(profile, &*s);
  if (!f.json.empty()) {  // --json FILE, or --json - for standard output
    Status st = WriteFile(f.json, SummaryJson(*s));
    return st.ok() ? 0 : Fail(st);
  }
  std::cout << Summary(*s);
  if (f.device_given) std::cout << CostTable(*s, profile);
  return 0;
}

// `tierpool schedule ...`: the subcommand named in args[1].
int ScheduleCommand(const ScheduleFlags& f, const hooks::OnnxImportOptions& onnx_options,
                    const DeviceProfile& profile, const char* argv0) {
  const auto& args = f.args;
  const std::string sub = args.size() >= 2 ? args[1] : "";
  if (sub == "from-onnx") return FromOnnx(f, onnx_options, profile);
  if (sub == "from-torch") return FromTorch(f, profile);
  if (args.size() == 2 && sub == "calibrate") return Calibrate(f, argv0);
  if (args.size() == 3 && sub == "fit-profile") return FitProfileCommand(f, profile);
  if (args.size() == 2 && sub == "profile") {
    Status st = WriteFile(f.json.empty() ? "-" : f.json, ProfileToJson(profile));
    return st.ok() ? 0 : Fail(st);
  }
  if (args.size() == 3 && sub == "convert") {
    auto s = LoadSchedule(args[2]);
    if (!s.ok()) return Fail(s.status());
    return EmitOrFail(*s, f);
  }
  if (args.size() == 3 && sub == "reorder") return ReorderCommand(f, onnx_options, profile);
  if (args.size() == 3 && sub == "split-updates") return SplitUpdatesCommand(f);
  if (args.size() == 3 && sub == "show") return Show(f, profile);
  std::cerr << "tierpool: unknown command\n" << kUsage;
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  LogToStderr();
  ScheduleFlags f;
  if (auto done = ParseFlags(argc, argv, &f)) return *done;
  auto profile = LoadProfile(f.device);
  if (!profile.ok()) return Fail(profile.status());
  auto onnx_options = OnnxOptions(f);
  if (!onnx_options.ok()) return Fail(onnx_options.status());
  f.torch.batch = f.batch;
  const std::string& cmd = f.args[0];
  if (cmd == "schedule") return ScheduleCommand(f, *onnx_options, *profile, argv[0]);
  if ((cmd == "replay" || cmd == "plan") && f.args.size() == 2) {
    f.plan_replay.out = f.out;
    f.plan_replay.json = f.json;
    f.plan_replay.max_overhead = f.max_overhead;
    f.plan_replay.lp_windows_given = f.lp_windows_given;
    return PlanOrReplay(cmd, f.args[1], *profile, f.plan_replay);
  }
  std::cerr << "tierpool: unknown command\n" << kUsage;
  return 2;
}
