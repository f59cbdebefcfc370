// tierpool: the command-line tool. put, get, rm, ls, stat, bench against a running tierpoold.
#include <unistd.h>
#include <boost/program_options.hpp>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>

#include "client/stats_json.h"
#include "client/tool/bench.h"
#include "common/defaults.h"
#include "common/option_errors.h"
#include "common/units.h"
#include "tierpool/client.h"

namespace po = boost::program_options;
using nlohmann::json;
using namespace tierpool;

namespace {

constexpr const char* kUsage = R"(usage: tierpool COMMAND [options]

commands:
  put KEY FILE     store the bytes of FILE under KEY ("-" reads standard input)
  get KEY FILE     write the object KEY to FILE ("-" writes standard output)
  rm KEY           delete KEY
  ls [PREFIX]      list objects [--json]
  stat [KEY]       each tier's capacity, use and object count, or one object's metadata [--json]
  promote KEY      move KEY to hbm (--to dram moves it down)
  peers            the server's cluster: each member's incarnation, address, what it lends,
                   what it would still lend this server (FREE; for this server, its own free
                   room), and what it lent this server [--json]
  bench            put/get throughput and latency against memcpy [--json]
                   [--compare redis] (a redis-server started for the run) [--threads N]
                   [--plain-copies]
  bench nvme       nvme spill write / promote read against fio [--path DIR --size 1G
                   --block-size 1M --queue-depth 16 --json]
  bench remote     remote tier put / get to lenders, on loopback or across a veth pair
                   (--veth, root), against iperf3 (--transport tcp) or ucx_perftest
                   (--transport ucx) [--sizes 1M,4M,64M --volume 1G --replicas 1
                   --in-flight 1 --json]
  schedule ...     build a lifetime schedule from an ONNX file or a PyTorch model
  plan ...         the offload/prefetch plan for a schedule under an hbm budget
  replay ...       simulate a schedule under a policy, or sweep budgets; with --live, play it
                   against tierpoold with real bytes beside the simulation's prediction
                   (tierpool schedule --help for these three)

every command takes --socket PATH (default $TIERPOOL_SOCKET or )"
                               "/tmp/tierpool-<uid>.sock)"
                               R"( and --ns NAMESPACE (default "default").
)";

// The tool's own flags that take a value: what follows one is not a command word.
bool TakesValue(const std::string& flag) {
  static const std::set<std::string> kFlags = {"--socket", "--ns",   "--durability", "--kind",
                                               "--dtype",  "--tier", "--to",         "--seconds"};
  return kFlags.count(flag) != 0;
}

// The indices of argv's positional words (the command, its subcommand, their arguments), with
// flags allowed anywhere: `tierpool --socket S bench nvme --json` is `bench nvme`.
std::vector<int> Positionals(int argc, char** argv) {
  std::vector<int> out;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--") {
      for (++i; i < argc; ++i) out.push_back(i);
      break;
    }
    if (a.size() > 1 && a[0] == '-') {
      if (TakesValue(a)) ++i;  // "--flag value"; "--flag=value" is one word
      continue;
    }
    out.push_back(i);
  }
  return out;
}

// argv without the words at `drop` and, when `server_flags` is false, without --socket and
// --ns (the sibling talks to no server and would refuse them).
std::vector<std::string> ArgsFor(int argc, char** argv, const std::vector<int>& drop,
                                 bool server_flags) {
  std::vector<std::string> out;
  for (int i = 1; i < argc; ++i) {
    if (std::find(drop.begin(), drop.end(), i) != drop.end()) continue;
    const std::string a = argv[i];
    if (!server_flags && (a == "--socket" || a == "--ns")) {
      ++i;
      continue;
    }
    if (!server_flags && (a.rfind("--socket=", 0) == 0 || a.rfind("--ns=", 0) == 0)) continue;
    out.push_back(a);
  }
  return out;
}

// Replaces this process with a binary that sits beside it, passing `args`.
int ExecSibling(const std::string& name, std::vector<std::string> args) {
  std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  std::string path = self.substr(0, self.rfind('/') + 1) + name;
  std::vector<char*> argv = {path.data()};
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  ::execv(path.c_str(), argv.data());
  std::cerr << "tierpool: cannot run " << path << ": " << std::strerror(errno) << "\n";
  return 1;
}

int Fail(const Status& s) {
  std::cerr << "tierpool: " << s.ToString() << "\n";
  return 1;
}

Result<std::string> ReadInput(const std::string& path) {
  if (path == "-") {
    return std::string(std::istreambuf_iterator<char>(std::cin), {});
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::NotFound("cannot open " + path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// A command that runs in a sibling binary (`bench nvme|hbm|remote`, `schedule`, `plan`,
// `replay`): its exit status once it ran, or nothing for the commands this tool serves.
std::optional<int> RunSiblingCommand(int argc, char** argv) {
  // Global flags may come before the command: the command is the first positional word.
  const std::vector<int> words = Positionals(argc, argv);
  const std::string first = words.empty() ? "" : argv[words[0]];
  const std::string second = words.size() < 2 ? "" : argv[words[1]];
  if (first == "bench" && second == "nvme") {
    return ExecSibling("tierpool-nvme-bench", ArgsFor(argc, argv, {words[0], words[1]}, false));
  }
  if (first == "bench" && second == "hbm") {
    const auto self = std::filesystem::read_symlink("/proc/self/exe");
    if (!std::filesystem::exists(self.parent_path() / "tierpool-hbm-bench")) {
      std::cerr << "tierpool: bench hbm needs a build with -DTIERPOOL_CUDA=ON (the hbm tier in "
                   "a GPU's memory)\n";
      return 1;
    }
    return ExecSibling("tierpool-hbm-bench", ArgsFor(argc, argv, {words[0], words[1]}, false));
  }
  if (first == "bench" && second == "remote") {
    return ExecSibling("tierpool-remote-bench", ArgsFor(argc, argv, {words[0], words[1]}, false));
  }
  if (first == "replay") {
    for (int i = 1; i < argc; ++i) {
      if (std::string(argv[i]) == "--live") {
        return ExecSibling("tierpool-live-replay", ArgsFor(argc, argv, {words[0]}, true));
      }
    }
  }
  if (first == "schedule" || first == "replay" || first == "plan") {
    // tierpool-schedule reads the command word itself: it goes first.
    std::vector<std::string> args = ArgsFor(argc, argv, {words[0]}, false);
    args.insert(args.begin(), first);
    return ExecSibling("tierpool-schedule", std::move(args));
  }
  return std::nullopt;
}

// The flags of the commands this tool serves, and the command with its arguments.
struct CliOptions {
  std::string command;
  std::vector<std::string> args;  // after the command
  std::string tier;
  std::string socket, ns, to = "hbm", durability = "retained", kind = "other", dtype;
  bool as_json = false;
  bool plain_copies = false;  // bench: gets without the check of what they copy
  double seconds = 0.4;
  tool::BenchOptions bench;
};

// Reads the flags into *cli: nothing when a command is to run, else the exit status (help
// printed, or a usage error).
std::optional<int> ParseCli(int argc, char** argv, CliOptions* cli) {
  po::options_description opts("options");
  // clang-format off
  opts.add_options()
    ("help,h", "print help")
    ("version", "print the version")
    ("socket", po::value(&cli->socket)->default_value(DefaultSocketPath()), "tierpoold's socket")
    ("ns", po::value(&cli->ns)->default_value("default"), "namespace")
    ("json", po::bool_switch(&cli->as_json), "print JSON")
    ("durability", po::value(&cli->durability)->default_value("retained"), "put: retained or cache")
    ("kind", po::value(&cli->kind)->default_value("other"),
     "put: other, kv_block, activation, optimizer_state, weight")
    ("dtype", po::value(&cli->dtype), "put: dtype label")
    ("tier", po::value(&cli->tier), "put: place it in hbm or dram (default dram)")
    ("to", po::value(&cli->to)->default_value("hbm"), "promote: hbm or dram")
    ("seconds", po::value(&cli->seconds)->default_value(0.4), "bench: time per measured case")
    ("compare", po::value(&cli->bench.compare), "bench: also measure this peer in the same run (redis)")
    ("redis-server", po::value(&cli->bench.redis_server)->default_value("redis-server"),
     "bench --compare redis: the redis-server program to start")
    ("threads", po::value(&cli->bench.threads)->default_value(2),
     "bench: client threads of the second batch case (1: none)")
    ("verify-checksums", "bench: gets check the XXH3 of the bytes they copy (the default)")
    ("plain-copies", po::bool_switch(&cli->plain_copies),
     "bench: gets copy without checking, as a client with verify_checksums off")
    ("cases", po::value(&cli->bench.cases)->default_value("all"),
     "bench: all, sizes (one object at a time) or batches (64 x 4 KiB)")
    ("args", po::value(&cli->args), "positional arguments");
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
  if (vm.count("help")) {
    std::cout << kUsage << "\n" << opts;
    return 0;
  }
  // The command is the first positional argument, so flags may come before or after it.
  if (cli->args.empty()) {
    std::cerr << "tierpool: no command given\n" << kUsage;
    return 2;
  }
  cli->command = cli->args.front();
  cli->args.erase(cli->args.begin());
  return std::nullopt;
}

// Exits with a usage error unless the command has n arguments.
void Need(const CliOptions& cli, std::size_t n, const char* form) {
  if (cli.args.size() != n) {
    std::cerr << "tierpool: usage: tierpool " << form << "\n";
    std::exit(2);
  }
}

// put KEY FILE: stores the file (or standard input) and says where it went.
int PutCommand(Client& client, const CliOptions& cli) {
  Need(cli, 2, "put KEY FILE");
  const auto& args = cli.args;
  auto data = ReadInput(args[1]);
  if (!data.ok()) return Fail(data.status());
  PutOptions o;
  o.dtype = cli.dtype;
  if (cli.tier == "hbm") {
    o.tier = TierKind::kHbm;
  } else if (!cli.tier.empty() && cli.tier != "dram") {
    return Fail(Status::InvalidArgument("--tier must be hbm or dram"));
  }
  if (cli.durability == "cache") {
    o.durability = Durability::kCache;
  } else if (cli.durability != "retained") {
    return Fail(Status::InvalidArgument("--durability must be retained or cache"));
  }
  bool kind_ok = false;
  for (auto k : {ObjectKind::kOther, ObjectKind::kKvBlock, ObjectKind::kActivation,
                 ObjectKind::kOptimizerState, ObjectKind::kWeight}) {
    if (ObjectKindName(k) == cli.kind) {
      o.kind = k;
      kind_ok = true;
    }
  }
  if (!kind_ok) return Fail(Status::InvalidArgument("unknown --kind " + cli.kind));
  Status s = client.Put(args[0], data->data(), data->size(), o);
  if (!s.ok()) return Fail(s);
  auto meta = client.Stat(args[0]);
  if (!meta.ok()) return Fail(meta.status());
  char sum[17];
  std::snprintf(sum, sizeof(sum), "%016llx", static_cast<unsigned long long>(meta->checksum));
  std::cout << "stored " << cli.ns << "/" << args[0] << ": " << FormatBytes(meta->size) << " in "
            << TierName(meta->tier) << ", " << DurabilityName(meta->durability) << ", xxh3 " << sum
            << "\n";
  return 0;
}

// get KEY FILE: the object's bytes, checked, into the file (or standard output).
int GetCommand(Client& client, const CliOptions& cli) {
  Need(cli, 2, "get KEY FILE");
  const auto& args = cli.args;
  auto bytes = client.GetBytes(args[0]);
  if (!bytes.ok()) return Fail(bytes.status());
  if (args[1] == "-") {
    std::cout.write(reinterpret_cast<const char*>(bytes->data()),
                    static_cast<std::streamsize>(bytes->size()));
    return std::cout ? 0 : 1;
  }
  std::ofstream out(args[1], std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes->data()),
            static_cast<std::streamsize>(bytes->size()));
  if (!out) return Fail(Status::IoError("cannot write " + args[1]));
  std::cerr << "wrote " << FormatBytes(bytes->size()) << " of " << cli.ns << "/" << args[0]
            << " to " << args[1] << " (checksum verified)\n";
  return 0;
}

int RmCommand(Client& client, const CliOptions& cli) {
  Need(cli, 1, "rm KEY");
  Status s = client.Delete(cli.args[0]);
  if (!s.ok()) return Fail(s);
  std::cout << "deleted " << cli.ns << "/" << cli.args[0] << "\n";
  return 0;
}

int PromoteCommand(Client& client, const CliOptions& cli) {
  Need(cli, 1, "promote KEY [--to hbm|dram]");
  if (cli.to != "hbm" && cli.to != "dram") {
    return Fail(Status::InvalidArgument("--to must be hbm or dram"));
  }
  Status s = client.Promote(cli.args[0], cli.to == "hbm" ? TierKind::kHbm : TierKind::kDram);
  if (!s.ok()) return Fail(s);
  std::cout << "moved " << cli.ns << "/" << cli.args[0] << " to " << cli.to << "\n";
  return 0;
}

// ls [PREFIX]: the namespace's objects, a line each or JSON.
int LsCommand(Client& client, const CliOptions& cli) {
  if (cli.args.size() > 1) Need(cli, 1, "ls [PREFIX]");
  auto list = client.List(cli.args.empty() ? "" : cli.args[0], 100000);
  if (!list.ok()) return Fail(list.status());
  if (cli.as_json) {
    json out = json::array();
    for (const auto& m : *list) out.push_back(MetaJson(m));
    std::cout << out.dump(2) << "\n";
    return 0;
  }
  std::printf("%-40s %12s %-6s %-9s %-16s\n", "KEY", "SIZE", "TIER", "CLASS", "KIND");
  for (const auto& m : *list) {
    std::printf("%-40s %12s %-6s %-9s %-16s\n", m.key.c_str(), FormatBytes(m.size).c_str(),
                std::string(TierName(m.tier)).c_str(),
                std::string(DurabilityName(m.durability)).c_str(),
                std::string(ObjectKindName(m.kind)).c_str());
  }
  std::printf("%zu object(s) in namespace %s\n", list->size(), cli.ns.c_str());
  return 0;
}

// peers: the cluster's members as this server sees them.
int PeersCommand(Client& client, const CliOptions& cli) {
  Need(cli, 0, "peers");
  auto stats = client.ServerStat();
  if (!stats.ok()) return Fail(stats.status());
  if (cli.as_json) {
    std::cout << StatsJson(*stats)["members"].dump(2) << "\n";
    return 0;
  }
  if (stats->members.empty()) {
    std::printf("the server is in no cluster (tierpoold --etcd joins one)\n");
    return 0;
  }
  std::printf("%-20s %-16s %-22s %10s %10s %10s %10s %-9s %s\n", "NODE", "INCARNATION", "ADDRESS",
              "LENDS", "FREE", "LENT US", "USED", "TRANSPORT", "STATE");
  for (const auto& m : stats->members) {
    char inc[17];
    std::snprintf(inc, sizeof inc, "%016llx", static_cast<unsigned long long>(m.incarnation));
    std::printf("%-20s %-16s %-22s %10s %10s %10s %10s %-9s %s\n", m.node_id.c_str(), inc,
                m.peer_address.c_str(), FormatBytes(m.lend_bytes).c_str(),
                FormatBytes(m.lend_free).c_str(), FormatBytes(m.granted_to_us).c_str(),
                FormatBytes(m.used_by_us).c_str(), m.transport.empty() ? "-" : m.transport.c_str(),
                m.self ? "self" : (m.responsive ? "up" : "unresponsive"));
  }
  return 0;
}

// The server's tiers, a line each, and its counters on one line.
void PrintTiersAndCounters(const ServerStats& stats) {
  std::printf("tierpoold %s, up %.1f s\n", stats.server_version.c_str(),
              static_cast<double>(stats.uptime_ms) / 1000.0);
  std::printf("%-6s %12s %12s %6s %8s %6s %-8s %s\n", "TIER", "CAPACITY", "USED", "USE%", "OBJECTS",
              "FRAG", "STATE", "BACKEND");
  for (const auto& t : stats.tiers) {
    double pct = t.capacity
                     ? 100.0 * static_cast<double>(t.used_bytes) / static_cast<double>(t.capacity)
                     : 0.0;
    std::string errors;
    if (t.read_errors + t.write_errors + t.checksum_failures > 0) {
      errors = " (errors: " + std::to_string(t.read_errors) + " read, " +
               std::to_string(t.write_errors) + " write, " + std::to_string(t.checksum_failures) +
               " checksum)";
    }
    std::printf("%-6s %12s %12s %5.1f%% %8llu %6.2f %-8s %s%s%s\n",
                std::string(TierName(t.tier)).c_str(), FormatBytes(t.capacity).c_str(),
                FormatBytes(t.used_bytes).c_str(), pct,
                static_cast<unsigned long long>(t.object_count), t.fragmentation, t.state.c_str(),
                t.backend.c_str(), t.pages_locked ? ", page-locked" : "", errors.c_str());
  }
  std::printf("counters:");
  for (const auto& [n, v] : stats.counters) {
    std::printf(" %s=%llu", n.c_str(), static_cast<unsigned long long>(v));
  }
  std::printf("\n");
}

// Each registered plan's job: where it is, and what its actions did.
void PrintJobs(const ServerStats& stats) {
  for (const auto& j : stats.jobs) {
    std::printf(
        "job %llu '%s' in %s: budget %s, at iteration %llu step %u, hits %llu, late %llu"
        " (%.1f ms waited), misses %llu, in %s, out %s\n",
        static_cast<unsigned long long>(j.id), j.name.c_str(), j.ns.c_str(),
        FormatBytes(j.hbm_budget_bytes).c_str(), static_cast<unsigned long long>(j.iteration),
        j.step, static_cast<unsigned long long>(j.counter("hits")),
        static_cast<unsigned long long>(j.counter("late")),
        static_cast<double>(j.counter("late_wait_us")) / 1000.0,
        static_cast<unsigned long long>(j.counter("misses")),
        FormatBytes(j.counter("bytes_in")).c_str(), FormatBytes(j.counter("bytes_out")).c_str());
    std::printf(
        "  actions: %llu issued, %llu skipped (%llu absent, %llu already in place, %llu left "
        "to the job's delete), %llu cancelled, %llu failed; hbm peak %s and %s outside "
        "tierpool this iteration (the last: %s and %s)\n",
        static_cast<unsigned long long>(j.counter("actions_issued")),
        static_cast<unsigned long long>(j.counter("actions_skipped")),
        static_cast<unsigned long long>(j.counter("skipped_absent")),
        static_cast<unsigned long long>(j.counter("skipped_in_place")),
        static_cast<unsigned long long>(j.counter("skipped_dead")),
        static_cast<unsigned long long>(j.counter("actions_cancelled")),
        static_cast<unsigned long long>(j.counter("failed")),
        FormatBytes(j.counter("hbm_peak_bytes")).c_str(),
        FormatBytes(j.counter("outside_peak_bytes")).c_str(),
        FormatBytes(j.counter("last_hbm_peak_bytes")).c_str(),
        FormatBytes(j.counter("last_outside_peak_bytes")).c_str());
  }
}

// stat [KEY]: one object's metadata, or the server's tiers, counters and jobs.
int StatCommand(Client& client, const CliOptions& cli) {
  if (cli.args.size() == 1) {
    auto meta = client.Stat(cli.args[0]);
    if (!meta.ok()) return Fail(meta.status());
    std::cout << MetaJson(*meta).dump(2) << "\n";
    return 0;
  }
  Need(cli, 0, "stat [KEY]");
  auto stats = client.ServerStat();
  if (!stats.ok()) return Fail(stats.status());
  if (cli.as_json) {
    std::cout << StatsJson(*stats).dump(2) << "\n";
    return 0;
  }
  PrintTiersAndCounters(*stats);
  PrintJobs(*stats);
  return 0;
}

// bench: put/get throughput and latency against memcpy (tool/bench.h), on a connection of its
// own with the checks it asks for.
int BenchCommand(ClientOptions copts, const CliOptions& cli) {
  Need(cli, 0,
       "bench [--json] [--seconds S] [--compare redis] [--threads N] [--plain-copies] "
       "[--cases all|sizes|batches]");
  // What a library user gets by default: gets that check what they copy, unless asked for
  // plain copies.
  tool::BenchOptions bench = cli.bench;
  bench.verify_checksums = !cli.plain_copies;
  copts.verify_checksums = bench.verify_checksums;
  auto bench_client = Client::Connect(copts);
  if (!bench_client.ok()) return Fail(bench_client.status());
  bench.seconds_per_case = cli.seconds;
  auto rows = tool::RunBench(**bench_client, bench);
  if (!rows.ok()) return Fail(rows.status());
  if (cli.as_json) {
    std::cout << rows->dump(2) << "\n";
    return 0;
  }
  auto ratio = [](const nlohmann::json& r, const char* field) {
    char text[16] = "-";
    if (r.contains(field)) std::snprintf(text, sizeof text, "%.2f", r[field].get<double>());
    return std::string(text);
  };
  std::printf("%-10s %-10s %-10s %3s %9s %12s %9s %9s %8s %8s %9s\n", "SIZE", "OP", "PATH", "THR",
              "GB/s", "objects/s", "p50 us", "p99 us", "x memcpy", "x redis", "(at p50)");
  for (const auto& r : *rows) {
    const auto n = r["objects_per_op"].get<std::uint64_t>();
    const std::string size = (n > 1 ? std::to_string(n) + "x" : std::string()) +
                             FormatBytes(r["size"].get<std::uint64_t>());
    std::printf("%-10s %-10s %-10s %3d %9.2f %12.0f %9.1f %9.1f %8s %8s %9s\n", size.c_str(),
                r["op"].get<std::string>().c_str(), r["path"].get<std::string>().c_str(),
                r["threads"].get<int>(), r["gbps"].get<double>(), r["objects_per_s"].get<double>(),
                r["p50_us"].get<double>(), r["p99_us"].get<double>(),
                ratio(r, "ratio_to_memcpy").c_str(), ratio(r, "ratio_to_redis").c_str(),
                ratio(r, "ratio_to_redis_p50").c_str());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  // `tierpool bench nvme ...` (the nvme tier in-process against fio) and the schedule, plan and
  // replay commands live in sibling binaries, so this tool links neither the tiers nor ONNX.
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--version") {
      std::cout << "tierpool " << TIERPOOL_VERSION << "\n";
      return 0;
    }
  }
  if (auto ran = RunSiblingCommand(argc, argv)) return *ran;
  if (argc < 2 || std::string(argv[1]) == "help") {
    std::cout << kUsage;
    return argc < 2 ? 2 : 0;
  }
  CliOptions cli;
  if (auto done = ParseCli(argc, argv, &cli)) return *done;
  ClientOptions copts;
  copts.socket_path = cli.socket;
  copts.ns = cli.ns;
  copts.client_name = "tierpool-cli";
  copts.verify_checksums = true;
  auto client_or = Client::Connect(copts);
  if (!client_or.ok()) return Fail(client_or.status());
  Client& client = **client_or;
  const std::string& command = cli.command;
  if (command == "put") return PutCommand(client, cli);
  if (command == "get") return GetCommand(client, cli);
  if (command == "rm") return RmCommand(client, cli);
  if (command == "promote") return PromoteCommand(client, cli);
  if (command == "ls") return LsCommand(client, cli);
  if (command == "peers") return PeersCommand(client, cli);
  if (command == "stat") return StatCommand(client, cli);
  if (command == "bench") return BenchCommand(copts, cli);
  std::cerr << "tierpool: unknown command '" << command << "'\n" << kUsage;
  return 2;
}
