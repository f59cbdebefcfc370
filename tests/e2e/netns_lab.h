// Hosts for cluster fault tests: network namespaces of the test's own, each with one veth into
// a bridge in a hub namespace (10.231.0.0/24, nothing routed anywhere else), and the faults an
// operator's bad day brings between them: a link cut (blackhole routes both ways), and a slow
// link (tbf on the hub's side of a host's veth, so that everything sent to it is slowed).
// Everything it made is removed when it goes. Needs root (CAP_NET_ADMIN): ok() says whether
// the namespaces could be made here, why() why not.
#pragma once

#include <string>
#include <vector>

namespace tierpool::testing {

class NetLab {
 public:
  explicit NetLab(int hosts);
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

 private:
  bool Run(const std::string& cmd);
  std::string hub_;
  std::vector<std::string> hosts_;
  std::vector<std::string> hub_ends_;  // each host's veth as the hub sees it
  bool ok_ = false;
  std::string why_;
};

}  // namespace tierpool::testing
