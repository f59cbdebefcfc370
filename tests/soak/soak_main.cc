// tierpool-soak: many client processes against one tierpoold with its tiers near full, each
// checking every byte it reads against a model of what it was acknowledged, while one of them
// is killed every few seconds. Afterwards every acknowledged `retained` object is read back and
// checked, and the server's memory outside its arenas is compared with its baseline.
//
//   tierpool-soak --server PATH [--seconds 600] [--clients 16] [--kill-every-ms 3000]
//                 [--dram 64M] [--nvme-bytes 256M] [--fill 0.95] [--seed 1]
//                 [--namespace-policy FILE] [--server-arg=--io-threads=2 ...]
//
// The model: each client owns the keys "c<slot>/k<j>". Before a put or a delete it tells the
// parent what it is about to do (over a pipe), and again once the server answered; a client
// killed in between leaves that key uncertain (either value may be there), and the next client
// in its slot resolves it with its first read. Prints one JSON object; exits 1 on any wrong byte,
// lost object, reservation or pin left held for a dead client, or server death.
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <boost/program_options.hpp>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "common/option_errors.h"
#include "common/units.h"
#include "tierpool/client.h"

namespace {

using namespace tierpool;
using Clock = std::chrono::steady_clock;

// What a key holds: absent, or (seed, size) bytes.
struct Value {
  bool present = false;
  std::uint64_t seed = 0;
  std::uint64_t size = 0;
  bool operator==(const Value&) const = default;
};

// A key's state in the model: its value, and the value a put or delete in flight would leave.
struct KeyState {
  Value value;
  std::optional<Value> pending;
};

using SlotModel = std::map<std::uint32_t, KeyState>;

std::string Bytes(std::uint64_t seed, std::uint64_t size) {
  std::string s(size, '\0');
  std::mt19937_64 rng(seed * 0x9e3779b97f4a7c15ull + size);
  std::size_t i = 0;
  for (; i + 8 <= size; i += 8) {
    const std::uint64_t v = rng();
    std::memcpy(&s[i], &v, 8);
  }
  for (; i < size; ++i) s[i] = static_cast<char>(rng());
  return s;
}

std::string Key(int slot, std::uint32_t j) {
  return "c" + std::to_string(slot) + "/k" + std::to_string(j);
}

// Does the object now under key match v? kError: the get failed for another reason than the
// object's absence (no room to bring it back from nvme, say): neither right nor wrong.
enum class Check { kMatch, kMismatch, kError };
// A get's outcome (its status, and the bytes when it found the object) against v.
Check CompareOutcome(const Status& status, const void* data, std::size_t size, const Value& v,
                     std::string* why) {
  if (!status.ok()) {
    if (status.code() != StatusCode::kNotFound) {
      *why = status.ToString();
      return Check::kError;
    }
    *why = "not found";
    return v.present ? Check::kMismatch : Check::kMatch;
  }
  if (!v.present || size != v.size) {
    *why = "found " + std::to_string(size) + " bytes";
    return Check::kMismatch;
  }
  const std::string want = Bytes(v.seed, v.size);
  *why = "other bytes";
  return std::memcmp(data, want.data(), want.size()) == 0 ? Check::kMatch : Check::kMismatch;
}
Check Compare(Client& c, const std::string& key, const Value& v, std::string* why) {
  auto got = c.GetBytes(key);
  if (!got.ok()) return CompareOutcome(got.status(), nullptr, 0, v, why);
  return CompareOutcome(Status::Ok(), got->data(), got->size(), v, why);
}

struct Settings {
  std::string socket;
  std::uint32_t keys = 100;
  std::uint64_t max_size = 256 << 10;
};

// What a client tells the parent, one line per event (Apply reads them).
struct Reporter {
  int fd;
  void operator()(char what, std::uint32_t j, const Value& v = {}) const {
    char line[128];
    const int n = std::snprintf(line, sizeof(line), "%c %u %d %llu %llu\n", what, j,
                                v.present ? 1 : 0, static_cast<unsigned long long>(v.seed),
                                static_cast<unsigned long long>(v.size));
    if (::write(fd, line, static_cast<std::size_t>(n)) != n) _exit(4);
  }
};

// One batch (one round trip) over key j and up to seven others of the slot that no killed
// predecessor left uncertain: puts, copying gets, views, or deletes.
void RunBatch(Client& client, int slot, std::uint32_t j, SlotModel& model, const Settings& s,
              std::mt19937_64& rng, const Reporter& report) {
  std::vector<std::uint32_t> js{j};
  for (int tries = 0; tries < 16 && js.size() < 8; ++tries) {
    const auto o = static_cast<std::uint32_t>(rng() % s.keys);
    if (!model[o].pending && std::find(js.begin(), js.end(), o) == js.end()) js.push_back(o);
  }
  std::vector<std::string> keys;
  for (auto o : js) keys.push_back(Key(slot, o));
  const auto kind = rng() % 8;
  if (kind < 3) {  // puts: one size for all (a run staged room serves) or each its own
    const bool one_size = rng() % 2 == 0;
    const std::uint64_t size = 1 + rng() % (s.max_size / 4);
    std::vector<std::string> bytes;
    std::vector<Value> values;
    std::vector<PutItem> items;
    for (std::size_t i = 0; i < js.size(); ++i) {
      values.push_back({true, rng(), one_size ? size : 1 + rng() % (s.max_size / 4)});
      report('P', js[i], values.back());
      bytes.push_back(Bytes(values.back().seed, values.back().size));
    }
    for (std::size_t i = 0; i < js.size(); ++i) {
      items.push_back({keys[i], bytes[i].data(), bytes[i].size(), {}});
    }
    auto st = client.PutBatch(items);
    for (std::size_t i = 0; i < js.size(); ++i) {
      const bool ok = i < st.size() && st[i].ok();
      if (ok) model[js[i]].value = values[i];
      report(ok ? 'A' : 'F', js[i], values[i]);
    }
  } else if (kind < 5) {  // copying gets
    std::vector<std::string> buffers(js.size(), std::string(s.max_size, '\0'));
    std::vector<GetItem> items;
    for (std::size_t i = 0; i < js.size(); ++i) {
      items.push_back({keys[i], buffers[i].data(), buffers[i].size()});
    }
    auto got = client.GetBatch(items);
    for (std::size_t i = 0; i < js.size(); ++i) {
      std::string why;
      const Check c =
          i >= got.size() ? Check::kError
          : got[i].ok()
              ? CompareOutcome(Status::Ok(), buffers[i].data(), *got[i], model[js[i]].value, &why)
              : CompareOutcome(got[i].status(), nullptr, 0, model[js[i]].value, &why);
      if (c == Check::kMismatch) report('X', js[i]);
      report(c == Check::kError ? 'E' : 'G', js[i]);
    }
  } else if (kind < 7) {  // views, wanting hbm half the time
    GetViewOptions o;
    if (rng() % 2 == 0) o.tier = TierKind::kHbm;
    auto views = client.GetViews(keys, o);
    for (std::size_t i = 0; i < js.size(); ++i) {
      std::string why;
      const Check c = i >= views.size() ? Check::kError
                      : views[i].ok()
                          ? CompareOutcome(Status::Ok(), views[i]->data(), views[i]->size(),
                                           model[js[i]].value, &why)
                          : CompareOutcome(views[i].status(), nullptr, 0, model[js[i]].value, &why);
      if (c == Check::kMismatch) report('X', js[i]);
      report(c == Check::kError ? 'E' : 'G', js[i]);
    }
  } else {  // deletes
    for (auto o : js) report('D', o);
    auto st = client.DeleteBatch(keys);
    for (std::size_t i = 0; i < js.size(); ++i) {
      const bool ok = i < st.size() && (st[i].ok() || st[i].code() == StatusCode::kNotFound);
      if (ok) model[js[i]].value = Value{};
      report(ok ? 'A' : 'F', js[i], model[js[i]].value);
    }
  }
}

// One client process: random puts, gets, deletes and batches on its own keys, forever.
[[noreturn]] void RunClient(int slot, SlotModel model, const Settings& s, int report_fd,
                            std::uint64_t seed) {
  ClientOptions options;
  options.socket_path = s.socket;
  options.ns = "soak";
  auto client = Client::Connect(options);
  if (!client.ok()) _exit(3);
  std::mt19937_64 rng(seed);
  const Reporter report{report_fd};
  std::uint64_t last_size = 0;
  for (;;) {
    const std::uint32_t j = static_cast<std::uint32_t>(rng() % s.keys);
    KeyState& k = model[j];
    const std::string key = Key(slot, j);
    if (k.pending) {
      // Left uncertain by a killed predecessor: whichever value is there is the truth.
      std::string why;
      const Check pending = Compare(**client, key, *k.pending, &why);
      if (pending == Check::kError) {
        report('E', j);
        continue;  // try again later
      }
      if (pending == Check::kMatch) {
        k.value = *k.pending;
      } else if (Compare(**client, key, k.value, &why) == Check::kMismatch) {
        report('X', j);  // neither: a wrong byte or a lost object
        if (std::getenv("SOAK_DEBUG")) {
          std::fprintf(stderr, "slot %d key %u: neither value nor pending (%s)\n", slot, j,
                       why.c_str());
        }
      }
      k.pending.reset();
      report('R', j, k.value);
      continue;
    }
    const auto dice = rng() % 100;
    if (dice >= 90) {
      RunBatch(**client, slot, j, model, s, rng, report);
      continue;
    }
    if (dice < 50) {
      // Two puts in a row of one size stage room for the next (one round trip): a third of the
      // puts repeat the size before them.
      const std::uint64_t size =
          last_size != 0 && rng() % 3 == 0 ? last_size : 1 + rng() % s.max_size;
      last_size = size;
      Value v{true, rng(), size};
      report('P', j, v);
      const std::string bytes = Bytes(v.seed, v.size);
      Status st;
      if (dice < 10) {  // zero copy
        auto r = (*client)->Reserve(key, bytes.size());
        st = r.status();
        if (r.ok()) {
          std::memcpy(r->data(), bytes.data(), bytes.size());
          st = r->Commit();
        }
      } else {
        st = (*client)->Put(key, bytes.data(), bytes.size());
      }
      if (st.ok()) {
        k.value = v;
        report('A', j, v);
      } else {
        report('F', j);  // not stored (no room): the old value stays
      }
    } else if (dice < 85) {
      if (dice < 60) {  // a view, wanting hbm
        GetViewOptions o;
        o.tier = TierKind::kHbm;
        auto view = (*client)->GetView(key, o);
        if (view.ok() && k.value.present && view->size() == k.value.size) {
          const std::string want = Bytes(k.value.seed, k.value.size);
          if (std::memcmp(view->data(), want.data(), want.size()) != 0) report('X', j);
          report('G', j);
          continue;
        }
      }
      std::string why;
      const Check c = Compare(**client, key, k.value, &why);
      if (c == Check::kMismatch) {
        report('X', j);
        if (std::getenv("SOAK_DEBUG")) {
          std::fprintf(stderr, "slot %d key %u: want %d/%llu: %s\n", slot, j,
                       k.value.present ? 1 : 0, static_cast<unsigned long long>(k.value.seed),
                       why.c_str());
        }
      }
      if (c == Check::kError && std::getenv("SOAK_DEBUG")) {
        std::fprintf(stderr, "slot %d key %u: get failed: %s\n", slot, j, why.c_str());
      }
      report(c == Check::kError ? 'E' : 'G', j);
    } else {  // (dice < 90)
      report('D', j);
      Status st = (*client)->Delete(key);
      if (st.ok() || st.code() == StatusCode::kNotFound) {
        k.value = Value{};
        report('A', j, k.value);
      } else {
        report('F', j);
      }
    }
  }
}

// Applies a client's reports to its slot's model; returns the wrong-byte reports and the ops.
void Apply(const std::string& lines, SlotModel& model, std::uint64_t* wrong, std::uint64_t* ops,
           std::uint64_t* errors) {
  std::istringstream in(lines);
  char what;
  std::uint32_t j;
  int present;
  unsigned long long seed, size;
  while (in >> what >> j >> present >> seed >> size) {
    KeyState& k = model[j];
    const Value v{present != 0, seed, size};
    switch (what) {
      case 'P':
        k.pending = v;
        break;
      case 'D':
        k.pending = Value{};
        break;
      case 'A':
      case 'R':
        k.value = v;
        k.pending.reset();
        ++*ops;
        break;
      case 'F':
        k.pending.reset();
        ++*ops;
        break;
      case 'G':
        ++*ops;
        break;
      case 'X':
        ++*wrong;
        break;
      case 'E':
        ++*errors;
        ++*ops;
        break;
    }
  }
}

struct Child {
  pid_t pid = -1;
  int fd = -1;
  std::string partial;  // bytes read that do not end a line yet
};

// Reads what a child has written so far (everything, after it died).
void Drain(Child& c, SlotModel& model, std::uint64_t* wrong, std::uint64_t* ops,
           std::uint64_t* errors, bool to_eof) {
  char buf[65536];
  for (;;) {
    ssize_t n = ::read(c.fd, buf, sizeof(buf));
    if (n <= 0) break;
    c.partial.append(buf, static_cast<std::size_t>(n));
    const auto end = c.partial.rfind('\n');
    if (end != std::string::npos) {
      Apply(c.partial.substr(0, end + 1), model, wrong, ops, errors);
      c.partial.erase(0, end + 1);
    }
    if (!to_eof) break;
  }
}

Child Spawn(int slot, const SlotModel& model, const Settings& s, std::uint64_t seed) {
  int p[2];
  if (::pipe(p) != 0) std::exit(2);
  pid_t pid = ::fork();
  if (pid == 0) {
    ::close(p[0]);
    RunClient(slot, model, s, p[1], seed);
  }
  ::close(p[1]);
  return Child{pid, p[0], {}};
}

// Resident bytes of the server outside its arenas (memfd mappings): heap, stacks, code.
std::uint64_t RssOutsideArenas(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/smaps");
  std::string line;
  bool arena = false;
  std::uint64_t total = 0;
  while (std::getline(in, line)) {
    if (!line.empty() && std::isxdigit(static_cast<unsigned char>(line[0])) &&
        line.find('-') != std::string::npos && line.find(' ') != std::string::npos) {
      arena = line.find("memfd:") != std::string::npos;
    } else if (line.rfind("Rss:", 0) == 0 && !arena) {
      total += std::stoull(line.substr(4)) * 1024;
    }
  }
  return total;
}

}  // namespace

int main(int argc, char** argv) {
  namespace po = boost::program_options;
  std::string server, dram = "64M", nvme = "256M", policy;
  std::vector<std::string> server_args;
  int seconds = 600, clients = 16, kill_every_ms = 3000;
  double fill = 0.95;
  std::uint64_t seed = 1;
  po::options_description opts("tierpool-soak");
  opts.add_options()("help,h", "this help")("server", po::value(&server), "tierpoold binary")(
      "seconds", po::value(&seconds), "how long the clients run")("clients", po::value(&clients),
                                                                  "client processes")(
      "kill-every-ms", po::value(&kill_every_ms), "kill a random client this often")(
      "dram", po::value(&dram), "dram tier")("nvme-bytes", po::value(&nvme), "nvme tier")(
      "fill", po::value(&fill), "the clients' keys hold about this fraction of dram + nvme")(
      "seed", po::value(&seed), "random seed")("namespace-policy", po::value(&policy),
                                               "tierpoold's --namespace-policy (a pool for "
                                               "\"soak\" puts the clients in arenas of their own)")(
      "server-arg", po::value(&server_args),
      "one more tierpoold argument, as one token (repeatable): --server-arg=--io-threads=2");
  po::variables_map vm;
  try {
    po::store(po::parse_command_line(argc, argv, opts), vm);
    po::notify(vm);
  } catch (const po::error& e) {
    std::cerr << OptionErrorMessage(e) << "\n" << opts;
    return 2;
  }
  if (vm.count("help") || server.empty() || clients < 1) {
    std::cout << opts;
    return vm.count("help") ? 0 : 2;
  }
  ::signal(SIGPIPE, SIG_IGN);
  const auto dram_bytes = ParseByteSize(dram), nvme_bytes = ParseByteSize(nvme);
  if (!dram_bytes.ok() || !nvme_bytes.ok()) return 2;

  const std::string dir = "/tmp/tierpool-soak-" + std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  Settings s;
  s.socket = dir + "/sock";
  // Keys per client such that the expected live bytes (half the puts' average size, 3 in 4
  // keys present) fill `fill` of dram + nvme.
  const double avg = static_cast<double>(s.max_size) / 2;
  s.keys = std::max<std::uint32_t>(
      8, static_cast<std::uint32_t>(fill * static_cast<double>(*dram_bytes + *nvme_bytes) /
                                    (clients * avg * 0.75)));
  std::vector<std::string> args = {
      server,        "--socket", s.socket,       "--dram", dram,          "--hbm", "16M",
      "--nvme-path", dir,        "--nvme-bytes", nvme,     "--log-level", "error", "--no-populate"};
  for (const auto& a : server_args) args.push_back(a);
  if (!policy.empty()) {
    args.push_back("--namespace-policy");
    args.push_back(policy);
  }
  pid_t srv = ::fork();
  if (srv == 0) {
    std::vector<char*> a;
    for (auto& x : args) a.push_back(x.data());
    a.push_back(nullptr);
    ::execv(a[0], a.data());
    _exit(127);
  }
  std::unique_ptr<Client> probe;
  ClientOptions po_opts;
  po_opts.socket_path = s.socket;
  po_opts.ns = "soak";
  for (int i = 0; i < 500 && !probe; ++i) {
    if (auto c = Client::Connect(po_opts); c.ok()) probe = std::move(c).value();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (!probe) {
    std::cerr << "tierpoold did not start\n";
    return 2;
  }
  const std::uint64_t baseline = RssOutsideArenas(srv);

  std::vector<SlotModel> models(static_cast<std::size_t>(clients));
  std::vector<Child> kids;
  std::mt19937_64 rng(seed);
  for (int i = 0; i < clients; ++i) kids.push_back(Spawn(i, models[i], s, rng()));
  std::uint64_t wrong = 0, ops = 0, kills = 0, errors = 0;
  const auto end = Clock::now() + std::chrono::seconds(seconds);
  auto next_kill = Clock::now() + std::chrono::milliseconds(kill_every_ms);
  for (auto& k : kids) ::fcntl(k.fd, F_SETFL, O_NONBLOCK);
  bool server_died = false;
  while (Clock::now() < end) {
    for (int i = 0; i < clients; ++i) Drain(kids[i], models[i], &wrong, &ops, &errors, false);
    if (::waitpid(srv, nullptr, WNOHANG) == srv) {
      server_died = true;
      break;
    }
    if (Clock::now() >= next_kill) {
      const int victim = static_cast<int>(rng() % static_cast<std::uint64_t>(clients));
      ::kill(kids[victim].pid, SIGKILL);
      ::waitpid(kids[victim].pid, nullptr, 0);
      ::fcntl(kids[victim].fd, F_SETFL, 0);
      Drain(kids[victim], models[victim], &wrong, &ops, &errors, true);
      ::close(kids[victim].fd);
      // A request the killed client sent before it died is still carried out: its successor
      // starts once the server has closed that connection, so that nothing lands after it
      // looked (the probe and the other clients hold one connection each).
      for (int i = 0; i < 400; ++i) {
        auto st = probe->ServerStat();
        if (!st.ok() || st->counter("connections_active") <= static_cast<std::uint64_t>(clients)) {
          break;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
      kids[victim] = Spawn(victim, models[victim], s, rng());
      ::fcntl(kids[victim].fd, F_SETFL, O_NONBLOCK);
      ++kills;
      next_kill += std::chrono::milliseconds(kill_every_ms);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  for (int i = 0; i < clients; ++i) {
    ::kill(kids[i].pid, SIGKILL);
    ::waitpid(kids[i].pid, nullptr, 0);
    ::fcntl(kids[i].fd, F_SETFL, 0);
    Drain(kids[i], models[i], &wrong, &ops, &errors, true);
    ::close(kids[i].fd);
  }

  // How often the clients' requests went off the I/O thread: sent there by the server's look
  // ahead, or moved there when they found they must wait after all (common/no_wait_scope.h).
  std::uint64_t on_workers = 0, moved_to_workers = 0;
  if (!server_died) {
    if (auto st = probe->ServerStat(); st.ok()) {
      on_workers = st->counter("requests_on_workers");
      moved_to_workers = st->counter("requests_moved_to_workers");
    }
  }
  // Every key read back: its value, or for a key left uncertain, one of the two.
  std::uint64_t checked = 0, lost_or_wrong = 0, retained = 0, end_errors = 0;
  if (!server_died) {
    for (int i = 0; i < clients; ++i) {
      for (const auto& [j, k] : models[i]) {
        std::string why;
        Check c = Compare(*probe, Key(i, j), k.value, &why);
        for (int retry = 0; c == Check::kError && retry < 50; ++retry) {
          std::this_thread::sleep_for(std::chrono::milliseconds(20));
          c = Compare(*probe, Key(i, j), k.value, &why);
        }
        if (c == Check::kMismatch && k.pending) c = Compare(*probe, Key(i, j), *k.pending, &why);
        if (c == Check::kMismatch) {
          ++lost_or_wrong;
          std::fprintf(stderr, "c%d/k%u: %s\n", i, j, why.c_str());
        }
        if (c == Check::kError) {
          ++end_errors;
          std::fprintf(stderr, "c%d/k%u: unreadable: %s\n", i, j, why.c_str());
        }
        // Checked: its room goes to the objects still to read back (with the tiers at 95%, one
        // on nvme may otherwise find no room in dram to come back to).
        if (c == Check::kMatch) (void)probe->Delete(Key(i, j));
        if (k.value.present) ++retained;
        ++checked;
      }
    }
  }
  // Every client is dead: nothing may stay reserved or pinned for them (the server notices a
  // closed connection at once; a few seconds allowed for the last ones).
  std::uint64_t held_reservations = 0, held_leases = 0;
  for (int round = 0; !server_died && round < 50; ++round) {
    if (auto st = probe->ServerStat(); st.ok()) {
      held_reservations = st->counter("reservations_open");
      held_leases = st->counter("leases_open");
    }
    if (held_reservations == 0 && held_leases == 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  for (int round = 0; !server_died && round < 10000; ++round) {
    auto listed = probe->List("", 1000);
    if (!listed.ok() || listed->empty()) break;
    for (const auto& m : *listed) (void)probe->Delete(m.key);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  // SOAK_PAUSE_S: time to look at the server (a debugger, /proc) before the last measurement.
  if (const char* pause = std::getenv("SOAK_PAUSE_S")) {
    std::fprintf(stderr, "server pid %d: pausing %s s\n", static_cast<int>(srv), pause);
    std::this_thread::sleep_for(std::chrono::seconds(std::atoi(pause)));
  }
  const std::uint64_t after = server_died ? 0 : RssOutsideArenas(srv);
  probe.reset();
  ::kill(srv, SIGTERM);
  ::waitpid(srv, nullptr, 0);
  std::filesystem::remove_all(dir);

  nlohmann::json out = {{"seconds", seconds},
                        {"clients", clients},
                        {"keys_per_client", s.keys},
                        {"kills", kills},
                        {"operations", ops},
                        {"wrong_bytes_seen_by_clients", wrong},
                        {"get_errors_seen_by_clients", errors},
                        {"unreadable_at_end", end_errors},
                        {"keys_checked_at_end", checked},
                        {"retained_objects_at_end", retained},
                        {"lost_or_wrong_at_end", lost_or_wrong},
                        {"reservations_held_after_kills", held_reservations},
                        {"pins_held_after_kills", held_leases},
                        {"requests_on_workers", on_workers},
                        {"requests_moved_to_workers", moved_to_workers},
                        {"server_died", server_died},
                        {"rss_outside_arenas_baseline", baseline},
                        {"rss_outside_arenas_after", after}};
  std::cout << out.dump() << "\n";
  return (server_died || wrong != 0 || lost_or_wrong != 0 || end_errors != 0 ||
          held_reservations != 0 || held_leases != 0)
             ? 1
             : 0;
}
