// A link of the test's own that loses and delays frames: sch_netem is missing on these machines
// (#71), so a thread forwards every Ethernet frame between two devices of one namespace (packet
// sockets, both ways) and drops a share of them, or holds them for a while, as told. Frames keep
// their offload header (PACKET_VNET_HDR), so a TCP segment the sender did not checksum or split
// yet goes on as it came; a loss is per frame as the sender framed it (NetLab lets its hosts
// send one segment per frame where it asks for impairable links).
//
// Thread safety: Set may be called from any thread while the forwarder runs.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <thread>

namespace tierpool::testing {

class FrameForwarder {
 public:
  // Starts forwarding between devices `a` and `b` of network namespace `ns` (a name under
  // /run/netns). ok() says whether it could; why() why not.
  FrameForwarder(const std::string& ns, const std::string& a, const std::string& b);
  ~FrameForwarder();
  FrameForwarder(const FrameForwarder&) = delete;
  FrameForwarder& operator=(const FrameForwarder&) = delete;

  bool ok() const { return ok_; }
  const std::string& why() const { return why_; }
  // From now on, each frame is dropped with probability `loss` (0 to 1) and the rest delivered
  // `delay_ms` after they came.
  void Set(double loss, std::uint32_t delay_ms);
  std::uint64_t dropped() const { return dropped_.load(); }

 private:
  bool Open(const std::string& ns, const std::string& a, const std::string& b);
  void Loop();

  int fds_[2] = {-1, -1};
  bool ok_ = false;
  std::string why_;
  std::atomic<bool> stop_{false};
  std::atomic<std::uint32_t> loss_ppm_{0};
  std::atomic<std::uint32_t> delay_us_{0};
  std::atomic<std::uint64_t> dropped_{0};
  std::thread thread_;
};

}  // namespace tierpool::testing
