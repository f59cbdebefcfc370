// tierpool-crash-soak: tierpoold with --persist and a kept nvme tier killed with SIGKILL at random
// moments under load, and now and then stopped cleanly, over and over. After every restart each
// key is read back and judged against a model of what the server acknowledged: the bytes must
// be the key's version in the last snapshot (if it was not deleted or replaced since), its last
// acknowledged version (its record on nvme came back), a put in flight at the crash, or absent;
// anything else is a wrong byte. A quarter of the keys are written once and then only read:
// every crash must bring them back. Before each kill the soak notes the keys on nvme whose
// records the journal holds (persist_records_durable has passed what was queued): those not touched
// again before the kill must come back too. Every start with a kept nvme tier writes a new snapshot
// of what came back (store/persist_recovery.h), so the model's snapshot is what was judged.
//
//   tierpool-crash-soak --server PATH [--seconds 120] [--threads 4] [--keys 2000]
//                       [--dram 64M] [--nvme-bytes 256M] [--clean-every 5] [--seed 1]
//
// Prints one JSON object; exits 1 on any wrong byte, any object of the last snapshot lost that
// was not removed since, any key durable on nvme at a kill lost, a clean stop that did not exit 0,
// or a server that would not start.
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <boost/program_options.hpp>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "common/option_errors.h"
#include "tierpool/client.h"

namespace {

using namespace tierpool;
using Clock = std::chrono::steady_clock;
namespace fs = std::filesystem;

// A version of a key: (seed, size) bytes.
struct Version {
  std::uint64_t seed = 0;
  std::uint64_t size = 0;
  bool operator==(const Version&) const = default;
};

std::string Bytes(const Version& v) {
  std::string s(v.size, '\0');
  std::uint64_t x = v.seed * 0x9E3779B97F4A7C15ull + 1;
  for (auto& c : s) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    c = static_cast<char>(x);
  }
  return s;
}

// What the model knows of a key across restarts.
struct KeyModel {
  std::optional<Version> snapshot;        // its version in the last clean snapshot
  bool removed_since = false;             // deleted or replaced (acknowledged) since that snapshot
  std::optional<Version> current;         // what the server acknowledged last (this life)
  std::optional<Version> in_flight;       // a put not yet acknowledged
  bool uncertain = false;                 // a put or delete in flight when the server died
  std::atomic<std::uint64_t> touches{0};  // operations begun on it (its worker's, read by main)
  bool must_come_back = false;            // on nvme, its record durable, untouched since
};

struct Totals {
  std::uint64_t ops = 0, crashes = 0, clean_stops = 0, came_back = 0, lost_not_durable = 0,
                lost_durable = 0, wrong = 0, read_errors = 0, absent_as_expected = 0,
                came_back_from_nvme = 0, nvme_checked = 0, nvme_lost = 0, nvme_checks_skipped = 0,
                journal_compactions = 0;
};

struct Options {
  std::string server;
  double seconds = 120;
  int threads = 4;
  int keys = 2000;
  std::string dram = "64M";
  std::string nvme_bytes = "256M";
  int clean_every = 5;
  std::uint64_t seed = 1;
};

class Daemon {
 public:
  Daemon(const Options& o, const std::string& socket, const std::string& dir,
         const std::string& nvme) {
    std::vector<std::string> args = {
        o.server, "--socket", socket, "--dram", o.dram, "--hbm", "8M", "--persist", dir,
        "--nvme-path", nvme, "--nvme-bytes", o.nvme_bytes, "--metrics-listen", "off", "--log-level",
        "error", "--no-populate",
        // Small, so that crashes land around the journal's rewrites too.
        "--persist-journal-bytes", "256K"};
    pid_ = ::fork();
    if (pid_ == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      std::vector<char*> argv;
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      ::execv(argv[0], argv.data());
      ::_exit(127);
    }
    ClientOptions co;
    co.socket_path = socket;
    co.ns = "crash";
    for (int i = 0; i < 1000; ++i) {
      if (Client::Connect(co).ok()) {
        up_ = true;
        return;
      }
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  bool up() const { return up_; }
  void Kill() {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
  }
  int Stop() {
    ::kill(pid_, SIGTERM);
    int status = 0;
    ::waitpid(pid_, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }

 private:
  pid_t pid_ = -1;
  bool up_ = false;
};

// One life of the server: threads put, replace, delete and read their own keys until `stop`.
void Work(Client& c, std::vector<KeyModel>& model, int first, int last, std::uint64_t seed,
          const std::atomic<bool>& stop, std::atomic<std::uint64_t>& ops,
          std::atomic<std::uint64_t>& wrong) {
  std::mt19937_64 rng(seed);
  const std::uint64_t sizes[] = {0, 100, 4096, 65536, 1 << 20};
  while (!stop) {
    const int k = first + static_cast<int>(rng() % static_cast<std::uint64_t>(last - first));
    KeyModel& m = model[static_cast<std::size_t>(k)];
    const std::string key = "k" + std::to_string(k);
    // Every fourth key is cold: written once at the start, read ever after. They stay in every
    // snapshot untouched, so each crash must bring them back.
    const int what = k % 4 == 0 ? 9 : static_cast<int>(rng() % 10);
    ++m.touches;
    if (what < 6) {
      const Version v{rng(), sizes[rng() % 5]};
      const std::string bytes = Bytes(v);
      m.uncertain = true;
      m.in_flight = v;
      if (c.Put(key, bytes.data(), bytes.size()).ok()) {
        m.current = v;
        m.removed_since = m.removed_since || m.snapshot.has_value();
        m.uncertain = false;
      }
    } else if (what < 8) {
      m.uncertain = true;
      m.in_flight.reset();
      Status s = c.Delete(key);
      if (s.ok() || s.code() == StatusCode::kNotFound) {
        m.current.reset();
        m.removed_since = m.removed_since || m.snapshot.has_value();
        m.uncertain = false;
      }
    } else {
      auto got = c.GetBytes(key);
      if (got.ok() && !m.uncertain) {
        const std::string want = m.current ? Bytes(*m.current) : std::string("<absent>");
        if (!m.current || got->size() != want.size() ||
            std::memcmp(got->data(), want.data(), want.size()) != 0) {
          ++wrong;
        }
      }
    }
    ++ops;
  }
}

// After a restart: every key judged against the model, which then holds what is there now (and
// is in the new snapshot).
void Judge(Client& c, std::vector<KeyModel>& model, bool clean, Totals& t) {
  for (std::size_t k = 0; k < model.size(); ++k) {
    KeyModel& m = model[k];
    // After a clean stop the snapshot is what was acknowledged (a write in flight may or may
    // not be in it); after a crash it is the last one, less what was removed since.
    if (clean) {
      m.snapshot = m.current;
      m.removed_since = false;
    }
    const bool may_come_back = m.snapshot.has_value() && !m.removed_since;
    auto got = c.GetBytes("k" + std::to_string(k));
    if (!got.ok() && got.status().code() != StatusCode::kNotFound) {
      ++t.read_errors;
      std::cerr << "k" << k << ": " << got.status().ToString() << "\n";
      continue;
    }
    if (m.must_come_back) ++t.nvme_checked;
    if (got.ok()) {
      const std::string bytes(reinterpret_cast<const char*>(got->data()), got->size());
      auto is = [&](const std::optional<Version>& v) { return v && bytes == Bytes(*v); };
      if (is(m.snapshot) && !m.removed_since) {
        ++t.came_back;
        m.current = m.snapshot;
      } else if (is(m.current) || (m.uncertain && is(m.in_flight))) {
        ++t.came_back_from_nvme;  // its record on nvme was durable
        if (!is(m.current)) m.current = m.in_flight;
      } else {
        ++t.wrong;
        std::cerr << "k" << k << ": wrong bytes (" << bytes.size() << ") with OK\n";
      }
    } else {
      // (A removal in flight may have made its tombstone durable before the crash.)
      if (may_come_back && !m.uncertain) {
        ++t.lost_durable;
        std::cerr << "k" << k << ": its snapshot version was lost\n";
      } else if (m.must_come_back) {
        ++t.nvme_lost;
        std::cerr << "k" << k << ": on nvme, its record durable, and lost\n";
      } else if (m.current && !(m.snapshot && *m.current == *m.snapshot && !m.removed_since)) {
        ++t.lost_not_durable;
      } else {
        ++t.absent_as_expected;
      }
      m.current.reset();
    }
    // Every start with a kept nvme tier writes a snapshot of what it brought back.
    m.snapshot = m.current;
    m.removed_since = false;
    m.uncertain = false;
    m.in_flight.reset();
    m.must_come_back = false;
  }
}

// Just before a kill: the keys on nvme whose records are durable. Returns false (nothing noted)
// when the journal did not catch up within a second.
bool NoteDurableOnNvme(Client& c, std::vector<KeyModel>& model, std::vector<std::uint64_t>* touches,
                       std::uint64_t* compactions) {
  touches->resize(model.size());
  for (std::size_t k = 0; k < model.size(); ++k) (*touches)[k] = model[k].touches;
  std::vector<std::size_t> on_nvme;
  for (std::size_t k = 0; k < model.size(); ++k) {
    auto meta = c.Stat("k" + std::to_string(k));
    if (meta.ok() && meta->tier == TierKind::kNvme) on_nvme.push_back(k);
  }
  // A spill's record is queued as the copy is recorded, and records become durable in order:
  // once persist_records_durable reaches the records queued after the listing, every key listed
  // has its record on disk.
  auto at_listing = c.ServerStat();
  if (!at_listing.ok()) return false;
  const std::uint64_t queued = at_listing->counter("persist_records_queued");
  *compactions += at_listing->counter("persist_journal_compactions");
  for (int i = 0; i < 100; ++i) {
    auto now = c.ServerStat();
    if (now.ok() && now->counter("persist_records_durable") >= queued) {
      for (std::size_t k : on_nvme) model[k].must_come_back = true;
      return true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  namespace po = boost::program_options;
  Options o;
  po::options_description desc("tierpool-crash-soak");
  desc.add_options()("help", "this text")("server", po::value(&o.server)->required(),
                                          "tierpoold to run")(
      "seconds", po::value(&o.seconds)->default_value(120), "how long in all")(
      "threads", po::value(&o.threads)->default_value(4), "client threads")(
      "keys", po::value(&o.keys)->default_value(2000), "keys in all")(
      "dram", po::value(&o.dram)->default_value("64M"), "the server's --dram")(
      "nvme-bytes", po::value(&o.nvme_bytes)->default_value("256M"), "the server's nvme tier")(
      "clean-every", po::value(&o.clean_every)->default_value(5),
      "every n-th stop is clean (SIGTERM), the others SIGKILL")(
      "seed", po::value(&o.seed)->default_value(1), "random seed");
  po::variables_map vm;
  try {
    po::store(po::parse_command_line(argc, argv, desc), vm);
    if (vm.count("help")) {
      std::cout << desc;
      return 0;
    }
    po::notify(vm);
  } catch (const po::error& e) {
    std::cerr << "tierpool-crash-soak: " << OptionErrorMessage(e) << "\n" << desc;
    return 2;
  }
  const fs::path work =
      fs::temp_directory_path() / ("tierpool-crash-" + std::to_string(::getpid()));
  fs::create_directories(work / "persist");
  fs::create_directories(work / "nvme");
  const std::string socket = (work / "s.sock").string();
  std::vector<KeyModel> model(static_cast<std::size_t>(o.keys));
  Totals t;
  std::mt19937_64 rng(o.seed);
  bool clean_before = false;
  bool ok = true;
  const auto end = Clock::now() + std::chrono::duration<double>(o.seconds);
  for (int life = 0; Clock::now() < end; ++life) {
    Daemon d(o, socket, (work / "persist").string(), (work / "nvme").string());
    if (!d.up()) {
      std::cerr << "tierpoold did not start (life " << life << ")\n";
      ok = false;
      break;
    }
    ClientOptions co;
    co.socket_path = socket;
    co.ns = "crash";
    auto judge = Client::Connect(co);
    if (!judge.ok()) {
      ok = false;
      break;
    }
    if (life > 0) Judge(**judge, model, clean_before, t);
    for (int k = 0; life == 0 && k < o.keys; k += 4) {  // the cold keys
      const Version v{rng(), 4096};
      const std::string bytes = Bytes(v);
      if ((*judge)->Put("k" + std::to_string(k), bytes.data(), bytes.size()).ok()) {
        model[static_cast<std::size_t>(k)].current = v;
      }
    }
    std::atomic<bool> stop{false};
    std::atomic<std::uint64_t> ops{0}, wrong{0};
    std::vector<std::thread> workers;
    std::vector<std::unique_ptr<Client>> clients;
    for (int i = 0; i < o.threads; ++i) {
      auto c = Client::Connect(co);
      if (!c.ok()) continue;
      clients.push_back(std::move(c).value());
      const int per = o.keys / o.threads;
      workers.emplace_back(Work, std::ref(*clients.back()), std::ref(model), i * per, (i + 1) * per,
                           rng(), std::cref(stop), std::ref(ops), std::ref(wrong));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(300 + rng() % 2700));
    // The first life ends cleanly: the cold keys are in every snapshot from then on.
    clean_before = life == 0 || (o.clean_every > 0 && life % o.clean_every == o.clean_every - 1);
    if (clean_before) {
      stop = true;
      for (auto& w : workers) w.join();
      judge->reset();
      clients.clear();
      if (const int rc = d.Stop(); rc != 0) {
        std::cerr << "a clean stop exited " << rc << "\n";
        ok = false;
      }
      ++t.clean_stops;
    } else {
      std::vector<std::uint64_t> touches;
      if (!NoteDurableOnNvme(**judge, model, &touches, &t.journal_compactions)) {
        ++t.nvme_checks_skipped;
      }
      d.Kill();  // under load: the workers' calls in flight fail
      // A key touched since it was listed may have left nvme (read up, replaced, deleted).
      for (std::size_t k = 0; k < model.size(); ++k) {
        if (model[k].touches != touches[k]) model[k].must_come_back = false;
      }
      stop = true;
      for (auto& w : workers) w.join();
      ++t.crashes;
    }
    t.ops += ops;
    t.wrong += wrong;
  }
  {
    Daemon d(o, socket, (work / "persist").string(), (work / "nvme").string());
    ClientOptions co;
    co.socket_path = socket;
    co.ns = "crash";
    auto judge = Client::Connect(co);
    if (d.up() && judge.ok()) Judge(**judge, model, clean_before, t);
    judge->reset();
    d.Stop();
  }
  fs::remove_all(work);
  nlohmann::json out = {{"seconds", o.seconds},
                        {"crashes", t.crashes},
                        {"clean_stops", t.clean_stops},
                        {"operations", t.ops},
                        {"keys_came_back_from_the_snapshot", t.came_back},
                        {"keys_came_back_from_nvme", t.came_back_from_nvme},
                        {"keys_durable_on_nvme_at_a_kill", t.nvme_checked},
                        {"keys_durable_on_nvme_lost", t.nvme_lost},
                        {"kills_without_the_nvme_check", t.nvme_checks_skipped},
                        {"journal_rewrites_before_kills", t.journal_compactions},
                        {"keys_lost_not_yet_durable", t.lost_not_durable},
                        {"keys_absent_as_expected", t.absent_as_expected},
                        {"snapshot_objects_lost", t.lost_durable},
                        {"wrong_bytes", t.wrong},
                        {"read_errors", t.read_errors}};
  std::cout << out.dump(2) << "\n";
  return ok && t.wrong == 0 && t.lost_durable == 0 && t.nvme_lost == 0 && t.read_errors == 0 ? 0
                                                                                             : 1;
}
