#include "benchmarks/bench_netns.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <utility>

#include "common/posix.h"

namespace tierpool {

namespace {

bool Sh(const std::string& command) {
  return std::system((command + " >/dev/null 2>&1").c_str()) == 0;
}

}  // namespace

Result<BenchNetns> BenchNetns::Create() {
  BenchNetns n;
  const std::string id = std::to_string(::getpid());
  const std::string subnet = "10.241." + std::to_string(::getpid() % 250 + 1) + ".";
  n.name_ = "tpbench" + id;
  n.link_ = "tpb" + id;
  n.near_ = subnet + "1";
  n.far_ = subnet + "2";
  const std::string far_link = n.link_ + "f";
  if (!Sh("ip netns add " + n.name_)) {
    return Status::PermissionDenied("cannot make a network namespace (ip netns add; root needed)");
  }
  if (!Sh("ip link add " + n.link_ + " type veth peer name " + far_link) ||
      !Sh("ip link set " + far_link + " netns " + n.name_) ||
      !Sh("ip addr add " + n.near_ + "/24 dev " + n.link_) ||
      !Sh("ip link set " + n.link_ + " up") ||
      !Sh("ip -n " + n.name_ + " addr add " + n.far_ + "/24 dev " + far_link) ||
      !Sh("ip -n " + n.name_ + " link set " + far_link + " up") ||
      !Sh("ip -n " + n.name_ + " link set lo up")) {
    return Status::Internal("cannot set up the veth pair to " + n.name_);
  }
  return n;
}

BenchNetns::BenchNetns(BenchNetns&& o) noexcept
    : name_(std::exchange(o.name_, {})),
      link_(std::exchange(o.link_, {})),
      far_(std::move(o.far_)),
      near_(std::move(o.near_)) {}

BenchNetns::~BenchNetns() {
  if (!link_.empty()) Sh("ip link del " + link_);  // its peer goes with it
  if (!name_.empty()) Sh("ip netns del " + name_);
}

bool BenchNetns::EnterInChild() const { return EnterNetworkNamespace(name_); }

pid_t SpawnQuiet(const std::vector<std::string>& argv, const BenchNetns* netns) {
  const pid_t pid = ::fork();
  if (pid != 0) return pid;
  if (netns != nullptr && !netns->EnterInChild()) ::_exit(126);
  std::freopen("/dev/null", "w", stdout);
  std::freopen("/dev/null", "w", stderr);
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  ::execv(args[0], args.data());
  ::_exit(127);
}

void StopSpawned(pid_t pid) {
  if (pid <= 0) return;
  ::kill(pid, SIGTERM);
  ::waitpid(pid, nullptr, 0);
}

}  // namespace tierpool
