#include "benchmarks/private_server.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <thread>
#include <vector>

#include "tierpool/client.h"

namespace tierpool::live {

namespace {
std::atomic<int> servers{0};  // sockets of one process's servers differ
}

Status PrivateServer::Start(std::uint64_t hbm, std::uint64_t dram, const std::string& link_rate,
                            const std::string& log_level, int hbm_device) {
  namespace fs = std::filesystem;
  const fs::path self = fs::read_symlink("/proc/self/exe").parent_path();
  std::string path;
  for (const auto& c : {self / "tierpoold", self / ".." / "store" / "tierpoold"}) {
    if (fs::exists(c)) {
      path = c.string();
      break;
    }
  }
  if (path.empty()) return Status::NotFound("tierpoold not found beside " + self.string());
  socket_ = "/tmp/tierpool-live-" + std::to_string(::getpid()) + "-" +
            std::to_string(servers.fetch_add(1)) + ".sock";
  std::vector<std::string> args = {path, "--socket", socket_, "--hbm", std::to_string(hbm),
                                   "--dram", std::to_string(dram), "--hbm-high-watermark", "1",
                                   "--hbm-low-watermark", "1", "--link-rate", link_rate,
                                   "--no-populate",  // the warm-up iteration touches it
                                   // The job and the server's mover share the host's cores:
                                   // an I/O thread polling beside the job's own held a core,
                                   // and moves and commits waited a scheduler tick for one
                                   // (4 ms a commit on a 2-vCPU VM).
                                   "--busy-poll-us", "0", "--metrics-listen", "off", "--log-level",
                                   log_level, "--hbm-device", std::to_string(hbm_device)};
  pid_ = ::fork();
  if (pid_ < 0) return Status::IoError("fork failed");
  if (pid_ == 0) {
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  for (int i = 0; i < 1500; ++i) {
    ClientOptions o;
    o.socket_path = socket_;
    if (Client::Connect(o).ok()) return Status::Ok();
    int st = 0;
    if (::waitpid(pid_, &st, WNOHANG) == pid_) {
      pid_ = -1;
      return Status::Unavailable("tierpoold exited at start");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return Status::Unavailable("tierpoold did not start within 30 s");
}

PrivateServer::~PrivateServer() {
  if (pid_ <= 0) return;
  ::kill(pid_, SIGTERM);
  ::waitpid(pid_, nullptr, 0);
}

}  // namespace tierpool::live
