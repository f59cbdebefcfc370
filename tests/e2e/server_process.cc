#include "tests/e2e/server_process.h"

#include "common/posix.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>
#include <array>
#include <cstdio>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <fstream>
#include <functional>
#include <random>
#include <thread>
#include <utility>

#include <gtest/gtest.h>

namespace tierpool::testing {

namespace {
std::atomic<int> g_counter{0};
}

ServerProcess::ServerProcess(std::vector<std::string> extra, std::string socket, std::string netns)
    : socket_(std::move(socket)) {
  if (socket_.empty()) {
    socket_ = "/tmp/tierpool-test-" + std::to_string(::getpid()) + "-" +
              std::to_string(g_counter++) + ".sock";
  }
  // TIERPOOL_TEST_SERVER runs the suite against another build (to show a test fails before a fix).
  const char* other = std::getenv("TIERPOOL_TEST_SERVER");
  // TIERPOOL_TEST_LOG_LEVEL (info, debug) shows the servers' logs when chasing a failure.
  const char* level = std::getenv("TIERPOOL_TEST_LOG_LEVEL");
  std::vector<std::string> args = {other != nullptr ? other : TIERPOOLD_PATH,
                                   "--socket",
                                   socket_,
                                   "--no-populate",
                                   "--log-level",
                                   level != nullptr ? level : "warn"};
  args.insert(args.end(), extra.begin(), extra.end());
  // Its log goes to a file, shown only when the test fails, and after the test's own messages:
  // several servers' warnings on the test's stderr buried which check failed (CI shows a test's
  // first lines and its last). Chasing a failure with TIERPOOL_TEST_LOG_LEVEL shows them live.
  if (level == nullptr) log_ = socket_ + "." + std::to_string(g_counter++) + ".log";
  label_ = socket_;
  for (std::size_t i = 0; i + 1 < extra.size(); ++i) {
    if (extra[i] == "--node-id") label_ = "node " + extra[i + 1] + " (" + socket_ + ")";
  }
  pid_ = ::fork();
  if (pid_ == 0) {
    // A test that dies (a sanitizer abort) must not leave its server running.
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    ::signal(SIGXFSZ, SIG_IGN);  // inherited across exec: past LimitFileSize, writes fail
    if (!log_.empty()) {
      const int fd = ::open(log_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
      if (fd >= 0) ::dup2(fd, STDERR_FILENO);
    }
    if (!netns.empty() && !EnterNetworkNamespace(netns)) ::_exit(126);
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (std::chrono::steady_clock::now() < deadline) {
    if (!alive()) return;
    if (Client::Connect(options()).ok()) {
      started_ = true;
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

void ServerProcess::ShowLogIfFailed() const {
  if (log_.empty()) return;
  if (::testing::Test::HasFailure()) {
    // Its last lines: what it said as the test failed.
    constexpr std::size_t kLines = 60;
    std::ifstream in(log_);
    std::deque<std::string> tail;
    std::size_t total = 0;
    for (std::string line; std::getline(in, line); ++total) {
      tail.push_back(std::move(line));
      if (tail.size() > kLines) tail.pop_front();
    }
    std::fprintf(stderr, "---- tierpoold, %s: the last %zu of %zu log lines ----\n", label_.c_str(),
                 tail.size(), total);
    for (const auto& line : tail) std::fprintf(stderr, "%s\n", line.c_str());
  }
  ::unlink(log_.c_str());
}

ServerProcess::~ServerProcess() {
  struct ShowLog {
    const ServerProcess* server;
    ~ShowLog() { server->ShowLogIfFailed(); }
  } show_log{this};  // once it has stopped, whichever way this returns
  if (pid_ <= 0 || reaped_) return;
  ::kill(pid_, SIGCONT);  // a test that froze it and failed
  ::kill(pid_, SIGTERM);
  for (int i = 0; i < 500; ++i) {
    if (::waitpid(pid_, nullptr, WNOHANG) == pid_) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ADD_FAILURE() << "tierpoold did not stop on SIGTERM within 5 s";
  ::kill(pid_, SIGKILL);
  ::waitpid(pid_, nullptr, 0);
}

bool ServerProcess::LimitFileSize(std::uint64_t bytes) {
  const rlimit limit{bytes, bytes};
  return pid_ > 0 && !reaped_ && ::prlimit(pid_, RLIMIT_FSIZE, &limit, nullptr) == 0;
}

int ServerProcess::Stop() {
  if (reaped_) return exit_status_;
  if (pid_ <= 0) return -1;
  ::kill(pid_, SIGTERM);
  int status = 0;
  for (int i = 0; i < 1000; ++i) {
    if (::waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return -1;
}

bool ServerProcess::WaitGone() {
  for (int i = 0; i < 500 && pid_ > 0; ++i) {
    if (::waitpid(pid_, nullptr, WNOHANG) == pid_) pid_ = -1;
    if (pid_ > 0) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return pid_ <= 0;
}

bool ServerProcess::alive() {
  if (pid_ <= 0) return false;
  int status = 0;
  const pid_t got = ::waitpid(pid_, &status, WNOHANG);
  if (got == 0) return true;
  if (got == pid_) {
    exit_status_ = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    reaped_ = true;
  }
  return false;
}

ClientOptions ServerProcess::options() const {
  ClientOptions o;
  o.socket_path = socket_;
  o.ns = "test";
  o.client_name = "e2e";
  return o;
}

bool ServerProcess::WaitFor(const std::function<bool(const ServerStats&)>& pred,
                            int timeout_ms) const {
  auto client = Connect();
  if (!client.ok()) return false;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    auto s = (*client)->ServerStat();
    if (s.ok() && pred(*s)) return true;
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

std::string Pattern(std::uint64_t seed, std::size_t size) {
  std::string s(size, '\0');
  std::mt19937_64 rng(seed * 0x9e3779b97f4a7c15ull + size);
  std::size_t i = 0;
  for (; i + 8 <= size; i += 8) {
    std::uint64_t v = rng();
    std::memcpy(s.data() + i, &v, 8);
  }
  for (; i < size; ++i) s[i] = static_cast<char>(rng());
  return s;
}

std::string RunShell(const std::string& cmd, int* rc) {
  std::string out;
  FILE* p = ::popen((cmd + " 2>&1").c_str(), "r");
  std::array<char, 4096> buf;
  std::size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
  *rc = WEXITSTATUS(::pclose(p));
  return out;
}

std::uint64_t ServerCounter(const ServerStats& stat, std::string_view name) {
  if (name == "requests") {
    return stat.counter("frames_received") - stat.counter("ring_doorbells") +
           stat.counter("ring_requests");
  }
  return stat.counter(name);
}

std::uint64_t ServerCounter(Client& c, std::string_view name) {
  auto stat = c.ServerStat();
  EXPECT_TRUE(stat.ok());
  if (!stat.ok()) return ~0ull;
  return ServerCounter(*stat, name);
}

}  // namespace tierpool::testing
