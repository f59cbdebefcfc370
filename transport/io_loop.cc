#include "transport/io_loop.h"

#include <chrono>
#include <optional>

#include "transport/poll_window.h"
#include "transport/spin_yield.h"

namespace tierpool::transport {

namespace {

// How long an idle polling thread looks at the rings alone between two looks at the sockets.
constexpr std::chrono::microseconds kRingsOnly{2};

}  // namespace

IoLoop::IoLoop(const UnixServerConfig& config, std::atomic<std::uint64_t>* wakeups,
               std::atomic<std::uint32_t>* rings_open)
    : config_(config), wakeups_(wakeups) {
  if (config.max_request_rings > 0 && config.busy_poll_us > 0) {
    rings_ = std::make_unique<RingRegistry>(config.max_request_rings, rings_open);
  }
}

IoLoop::~IoLoop() { Stop(); }

void IoLoop::Start() {
  thread_ = std::thread([this] { Run(); });
}

void IoLoop::Stop() {
  io_.stop();
  if (thread_.joinable()) thread_.join();
}

void IoLoop::Run() {
  // A loop with no session yet has nothing to run: it waits for one instead of returning.
  auto work = boost::asio::make_work_guard(io_);
  if (config_.busy_poll_us == 0) {
    io_.run();
    return;
  }
  RingRegistry* rings = rings_.get();
  if (rings) rings->Wake();
  using Clock = std::chrono::steady_clock;
  PollWindow poll(std::chrono::microseconds(config_.busy_poll_us),
                  std::chrono::microseconds(config_.busy_poll_max_us));
  // When the first poll after some work came up empty: the end of that burst.
  std::optional<Clock::time_point> idle_since;
  while (!io_.stopped()) {
    const auto now = Clock::now();
    bool handed = rings && rings->Poll();  // served inline
    if (io_.poll_one() > 0) handed = true;
    if (!handed && rings && rings->size() > 0) {
      // Nothing anywhere: the rings alone for a while before the next look at the sockets.
      // That look is an epoll_wait (about 1 us on a virtual machine), and a ring request
      // that came during it waited for it to end, where a ring's memory is read in tens of
      // ns. Socket requests wait at most kRingsOnly longer.
      const auto until = now + kRingsOnly;
      while (!(handed = rings->Poll()) && Clock::now() < until) {
      }
    }
    if (handed) {
      if (idle_since) poll.OnWorkAfter(now - *idle_since);
      idle_since.reset();
      continue;
    }
    if (!idle_since) idle_since = now;
    if (now - *idle_since < poll.window()) {
      GiveWayAfter(now - *idle_since);
      continue;
    }
    if (rings && rings->Sleep()) {
      rings->Wake();  // a request came as this thread stopped polling
      continue;
    }
    if (io_.run_one() == 0) return;
    if (rings) rings->Wake();
    ++*wakeups_;
    poll.OnWorkAfter(Clock::now() - *idle_since);
    idle_since.reset();
  }
}

}  // namespace tierpool::transport
