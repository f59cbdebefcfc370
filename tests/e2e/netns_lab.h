// Hosts for cluster fault tests: network namespaces of the test's own, each with one veth into
// a bridge in a hub namespace (10.231.0.0/24, nothing routed anywhere else), and the faults an
// operator's bad day brings between them: a link cut (blackhole routes both ways), a slow
// link (tbf on the hub's side of a host's veth, so that everything sent to it is slowed), and a
// lossy or late one (hosts named impairable reach the bridge through a FrameForwarder).
// Everything it made is removed when it goes. Needs root (CAP_NET_ADMIN): ok() says whether
// the namespaces could be made here, why() why not.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "tests/e2e/frame_forwarder.h"

namespace tierpool::testing {

class NetLab {
 public:
  // Hosts in `impairable` reach the bridge through a forwarder of the test's (Impair); then every
  // host sends one TCP segment per frame, so that a loss is one segment's, as on a wire.
  explicit NetLab(int hosts, const std::vector<int>& impairable = {});
  ~NetLab();
  NetLab(const NetLab&) = delete;
  NetLab& operator=(const NetLab&) = delete;

  bool ok() const { return ok_; }
  const std::string& why() const { return why_; }
  const std::string& ns(int host) const { return hosts_[host]; }
  std::string ip(int host) const { return "10.231.0." + std::to_string(10 + host); }
  // Every packet between the two is dropped (heal: delivered again). Open connections stall, as
  // behind a failed switch port: no reset comes.
  bool Cut(int a, int b);
  bool Heal(int a, int b);
  // What reaches `host` is limited to `rate` (tc's units: "40mbit"); Unlimit lifts it.
  bool Limit(int host, const std::string& rate);
  bool Unlimit(int host);
  // Frames to and from an impairable host are dropped with probability `loss` and the rest
  // delivered `delay_ms` late (both 0: as they come). False for a host not made impairable.
  bool Impair(int host, double loss, std::uint32_t delay_ms);
  std::uint64_t FramesDropped(int host) const;

 private:
  bool Run(const std::string& cmd);
  bool ConnectThroughForwarder(int host, const std::string& tag);
  std::string hub_;
  std::vector<std::string> hosts_;
  std::vector<std::string> hub_ends_;  // each host's veth as the hub sees it
  std::map<int, std::unique_ptr<FrameForwarder>> forwarders_;
  bool ok_ = false;
  std::string why_;
};

}  // namespace tierpool::testing
