// Starts a real tierpoold on a temporary socket for end-to-end tests, and stops it.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "tierpool/client.h"

namespace tierpool::testing {

class ServerProcess {
 public:
  // extra: flags added to "--socket PATH --no-populate --log-level warn". Its log is shown when
  // the test has failed, once it stopped (TIERPOOL_TEST_LOG_LEVEL: live). socket: PATH (empty:
  // a fresh one), e.g. an earlier server's, to start the next daemon where clients wait. netns:
  // a network namespace (ip netns) to run it in; clients still reach it by its socket's path.
  explicit ServerProcess(std::vector<std::string> extra = {}, std::string socket = "",
                         std::string netns = "");
  ~ServerProcess();
  ServerProcess(const ServerProcess&) = delete;
  ServerProcess& operator=(const ServerProcess&) = delete;

  bool started() const { return started_; }
  bool alive();
  // After killing it by pid(): reaps it (true once gone, within 5 s).
  bool WaitGone();
  // Stops it as an operator would (SIGTERM) and returns its exit status (-1: killed by a
  // signal, or still running after 10 s); also for a server that exited by itself.
  int Stop();
  // From now on its writes past `bytes` of a file fail with EFBIG, as on a full disk
  // (RLIMIT_FSIZE; SIGXFSZ is ignored in every test server). Set once it runs: its arenas were
  // sized at start.
  bool LimitFileSize(std::uint64_t bytes);
  const std::string& socket() const { return socket_; }
  pid_t pid() const { return pid_; }
  ClientOptions options() const;
  Result<std::unique_ptr<Client>> Connect() const { return Client::Connect(options()); }
  // Polls the server's stats until pred holds or timeout_ms passes.
  bool WaitFor(const std::function<bool(const ServerStats&)>& pred, int timeout_ms = 5000) const;

 private:
  // Its log on failure (see the constructor), then removes the file.
  void ShowLogIfFailed() const;

  std::string socket_;
  std::string log_;    // where its stderr goes (empty: the test's stderr)
  std::string label_;  // its node id and socket, for its log
  pid_t pid_ = -1;
  bool started_ = false;
  int exit_status_ = -1;  // once reaped by alive()
  bool reaped_ = false;
};

// A counter of the server's stat reply, through `c` (a failed stat fails the test).
// "requests": the requests the server received, through the socket or a request ring (a ring's
// doorbell is a frame but no request).
std::uint64_t ServerCounter(Client& c, std::string_view name);
// The same from a stat reply already at hand (several counters of one moment).
std::uint64_t ServerCounter(const ServerStats& stat, std::string_view name);

// Runs a shell command; returns what it printed (stdout and stderr) and sets *rc to its exit
// status.
std::string RunShell(const std::string& cmd, int* rc);

// Deterministic bytes for (seed, size), so any reader can check what it got.
std::string Pattern(std::uint64_t seed, std::size_t size);

}  // namespace tierpool::testing
