#include "tests/e2e/netns_lab.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>

#include "tests/e2e/server_process.h"

namespace tierpool::testing {

namespace {
std::atomic<int> g_labs{0};
}

bool NetLab::Run(const std::string& cmd) {
  int rc = 0;
  const std::string out = RunShell(cmd + " 2>&1", &rc);
  if (rc != 0 && why_.empty()) why_ = cmd + ": " + out;
  return rc == 0;
}

NetLab::NetLab(int hosts, const std::vector<int>& impairable) {
  // Short, unique names: a veth name has at most 15 characters.
  const std::string tag =
      "tp" + std::to_string(::getpid() % 100000) + "x" + std::to_string(g_labs++);
  hub_ = tag + "h";
  if (!Run("ip netns add " + hub_)) return;
  ok_ = Run("ip -n " + hub_ + " link set lo up") &&
        Run("ip -n " + hub_ + " link add br0 type bridge") &&
        Run("ip -n " + hub_ + " link set br0 up");
  for (int i = 0; ok_ && i < hosts; ++i) {
    const std::string host = tag + "n" + std::to_string(i);
    const std::string inside = tag + "a" + std::to_string(i),
                      outside = tag + "b" + std::to_string(i);
    if (!Run("ip netns add " + host)) {
      ok_ = false;
      break;
    }
    hosts_.push_back(host);
    hub_ends_.push_back(outside);
    const bool impaired = std::count(impairable.begin(), impairable.end(), i) != 0;
    ok_ = Run("ip link add " + inside + " type veth peer name " + outside) &&
          Run("ip link set " + inside + " netns " + host) &&
          Run("ip link set " + outside + " netns " + hub_) &&
          (impaired ? ConnectThroughForwarder(i, tag)
                    : Run("ip -n " + hub_ + " link set " + outside + " master br0 up")) &&
          Run("ip -n " + host + " addr add " + ip(i) + "/24 dev " + inside) &&
          (impairable.empty() ||
           Run("ip -n " + host + " link set dev " + inside + " gso_max_segs 1")) &&
          Run("ip -n " + host + " link set " + inside + " up") &&
          Run("ip -n " + host + " link set lo up");
  }
}

bool NetLab::ConnectThroughForwarder(int i, const std::string& tag) {
  // host <-> outside ... forwarder ... near <-> far (in the bridge)
  const std::string outside = hub_ends_[i], near = tag + "c" + std::to_string(i),
                    far = tag + "d" + std::to_string(i);
  if (!Run("ip -n " + hub_ + " link add " + near + " type veth peer name " + far) ||
      !Run("ip -n " + hub_ + " link set " + far + " master br0 up") ||
      !Run("ip -n " + hub_ + " link set " + near + " promisc on up") ||
      !Run("ip -n " + hub_ + " link set " + outside + " promisc on up")) {
    return false;
  }
  auto forwarder = std::make_unique<FrameForwarder>(hub_, outside, near);
  if (!forwarder->ok()) {
    why_ = "frame forwarder: " + forwarder->why();
    return false;
  }
  forwarders_[i] = std::move(forwarder);
  return true;
}

bool NetLab::Impair(int host, double loss, std::uint32_t delay_ms) {
  auto it = forwarders_.find(host);
  if (it == forwarders_.end()) return false;
  it->second->Set(loss, delay_ms);
  return true;
}

std::uint64_t NetLab::FramesDropped(int host) const {
  auto it = forwarders_.find(host);
  return it == forwarders_.end() ? 0 : it->second->dropped();
}

NetLab::~NetLab() {
  forwarders_.clear();  // before their devices go
  // Deleting a namespace deletes its veth ends, and with them their peers.
  for (const auto& h : hosts_) Run("ip netns del " + h);
  if (!hub_.empty()) Run("ip netns del " + hub_);
}

bool NetLab::Cut(int a, int b) {
  return Run("ip -n " + ns(a) + " route add blackhole " + ip(b) + "/32") &&
         Run("ip -n " + ns(b) + " route add blackhole " + ip(a) + "/32");
}

bool NetLab::Heal(int a, int b) {
  const bool one = Run("ip -n " + ns(a) + " route del blackhole " + ip(b) + "/32");
  const bool two = Run("ip -n " + ns(b) + " route del blackhole " + ip(a) + "/32");
  return one && two;
}

bool NetLab::Limit(int host, const std::string& rate) {
  return Run("ip netns exec " + hub_ + " tc qdisc add dev " + hub_ends_[host] + " root tbf rate " +
             rate + " burst 64kb latency 500ms");
}

bool NetLab::Unlimit(int host) {
  return Run("ip netns exec " + hub_ + " tc qdisc del dev " + hub_ends_[host] + " root");
}

}  // namespace tierpool::testing
