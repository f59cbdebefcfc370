#include "tests/e2e/frame_forwarder.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <linux/if_ether.h>
#include <linux/if_packet.h>
#include <net/if.h>
#include <poll.h>
#include <sched.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <deque>
#include <future>
#include <random>
#include <vector>

namespace tierpool::testing {
namespace {

// struct virtio_net_hdr before each frame (linux/virtio_net.h, which C++ cannot include).
constexpr std::size_t kVnetHeaderBytes = 10;
constexpr std::size_t kMaxFrame = 65536 + kVnetHeaderBytes;
// Frames held per direction at most (a router's queue): past it, arrivals are dropped.
constexpr std::size_t kMaxHeldBytes = 64u << 20;

std::uint64_t NowUs() {
  return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(
                                        std::chrono::steady_clock::now().time_since_epoch())
                                        .count());
}

std::string Errno(const std::string& what) { return what + ": " + std::strerror(errno); }

}  // namespace

FrameForwarder::FrameForwarder(const std::string& ns, const std::string& a, const std::string& b) {
  // The sockets are made inside the namespace, by a thread that entered it (setns changes only
  // the calling thread's namespace); the thread stays there and forwards.
  std::promise<void> opened;
  thread_ = std::thread([&, ns, a, b] {
    const bool ok = Open(ns, a, b);
    ok_ = ok;
    opened.set_value();
    if (ok) Loop();
  });
  opened.get_future().wait();
}

FrameForwarder::~FrameForwarder() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
  for (int fd : fds_) {
    if (fd >= 0) ::close(fd);
  }
}

void FrameForwarder::Set(double loss, std::uint32_t delay_ms) {
  loss_ppm_ = static_cast<std::uint32_t>(std::clamp(loss, 0.0, 1.0) * 1e6);
  delay_us_ = delay_ms * 1000u;
}

bool FrameForwarder::Open(const std::string& ns, const std::string& a, const std::string& b) {
  const int nsfd = ::open(("/run/netns/" + ns).c_str(), O_RDONLY | O_CLOEXEC);
  if (nsfd < 0) {
    why_ = Errno("open /run/netns/" + ns);
    return false;
  }
  const int entered = ::setns(nsfd, CLONE_NEWNET);
  ::close(nsfd);
  if (entered != 0) {
    why_ = Errno("setns " + ns);
    return false;
  }
  const std::string devices[2] = {a, b};
  for (int i = 0; i < 2; ++i) {
    const int fd = ::socket(AF_PACKET, SOCK_RAW | SOCK_CLOEXEC, htons(ETH_P_ALL));
    if (fd < 0) {
      why_ = Errno("packet socket");
      return false;
    }
    fds_[i] = fd;
    const int one = 1, buffer = 8 << 20;
    sockaddr_ll at{};
    at.sll_family = AF_PACKET;
    at.sll_protocol = htons(ETH_P_ALL);
    at.sll_ifindex = static_cast<int>(::if_nametoindex(devices[i].c_str()));
    if (at.sll_ifindex == 0 ||
        ::setsockopt(fd, SOL_PACKET, PACKET_VNET_HDR, &one, sizeof one) != 0 ||
        ::setsockopt(fd, SOL_PACKET, PACKET_IGNORE_OUTGOING, &one, sizeof one) != 0 ||
        ::bind(fd, reinterpret_cast<sockaddr*>(&at), sizeof at) != 0) {
      why_ = Errno("packet socket on " + devices[i]);
      return false;
    }
    (void)::setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &buffer, sizeof buffer);
    (void)::setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &buffer, sizeof buffer);
  }
  return true;
}

void FrameForwarder::Loop() {
  struct Held {
    std::uint64_t due_us;
    std::vector<char> bytes;
  };
  std::deque<Held> held[2];  // held[i]: to be sent out of device i
  std::size_t held_bytes[2] = {0, 0};
  std::mt19937 rng(71);
  std::uniform_int_distribution<std::uint32_t> ppm(0, 999'999);
  std::vector<char> frame(kMaxFrame);
  while (!stop_) {
    std::uint64_t now = NowUs();
    int wait_ms = 20;  // and the stop flag is seen within it
    for (const auto& q : held) {
      if (!q.empty()) {
        const std::uint64_t due = q.front().due_us;
        wait_ms = std::min<int>(wait_ms, due <= now ? 0 : static_cast<int>((due - now) / 1000));
      }
    }
    pollfd p[2] = {{fds_[0], POLLIN, 0}, {fds_[1], POLLIN, 0}};
    (void)::poll(p, 2, wait_ms);
    now = NowUs();
    for (int i = 0; i < 2; ++i) {
      if ((p[i].revents & POLLIN) == 0) continue;
      for (int n = 0; n < 512; ++n) {  // a bounded batch, so the other way is served too
        const ssize_t got = ::recv(fds_[i], frame.data(), frame.size(), MSG_DONTWAIT);
        if (got <= 0) break;
        const int out = 1 - i;
        if (ppm(rng) < loss_ppm_.load(std::memory_order_relaxed) ||
            held_bytes[out] + static_cast<std::size_t>(got) > kMaxHeldBytes) {
          ++dropped_;
          continue;
        }
        held[out].push_back({now + delay_us_.load(std::memory_order_relaxed),
                             std::vector<char>(frame.begin(), frame.begin() + got)});
        held_bytes[out] += static_cast<std::size_t>(got);
      }
    }
    for (int i = 0; i < 2; ++i) {
      while (!held[i].empty() && held[i].front().due_us <= now) {
        const auto& f = held[i].front().bytes;
        (void)::send(fds_[i], f.data(), f.size(), MSG_DONTWAIT);  // a full queue loses it
        held_bytes[i] -= f.size();
        held[i].pop_front();
      }
    }
  }
}

}  // namespace tierpool::testing
