// What etcd's JSON gateway answers (store/etcd_wire.h): lease, put and range bodies, and the
// watch's stream of lines, which must give the same events however its pieces are cut.
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "store/etcd_wire.h"
#include "tests/fuzz/fuzz_target.h"

namespace {

using namespace tierpool;

struct Watched {
  std::vector<std::string> events;
  StatusCode end = StatusCode::kOk;
  bool stopped = false;
};

// Feeds body in pieces of at most max_piece bytes (sizes from a small generator seeded by
// `seed`); the callback stops the watch at event number `stop_at`.
Watched Watch(std::string_view body, std::size_t max_piece, std::uint32_t seed,
              std::size_t stop_at) {
  etcd_wire::WatchLines lines;
  Watched w;
  for (std::size_t at = 0; at < body.size();) {
    seed = seed * 1664525u + 1013904223u;
    const std::size_t n = std::min(body.size() - at, 1 + (seed >> 8) % max_piece);
    const Status s = lines.Feed(
        body.substr(at, n),
        [&](const EtcdEvent& e) {
          w.events.push_back((e.deleted ? "-" : "+") + e.kv.key + "\n" + e.kv.value + "\n" +
                             std::to_string(e.kv.mod_revision));
          return w.events.size() < stop_at;
        },
        &w.stopped);
    at += n;
    if (!s.ok() || w.stopped) {
      w.end = s.code();
      break;
    }
  }
  return w;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::string body(reinterpret_cast<const char*>(data) + 1, size - 1);
  if (auto bytes = etcd_wire::Unbase64(body); bytes.ok()) {
    auto again = etcd_wire::Unbase64(etcd_wire::Base64(*bytes));
    if (!again.ok() || *again != *bytes) std::abort();  // base64 that does not round-trip
  }
  switch (data[0] % 5) {
    case 0:
      if (auto id = etcd_wire::LeaseGranted(body); id.ok() && *id == 0) std::abort();
      break;
    case 1:
      (void)etcd_wire::LeaseTtl(body);
      break;
    case 2:
      (void)etcd_wire::PutAnswered(body);
      break;
    case 3: {
      std::int64_t revision = 0;
      (void)etcd_wire::RangeAnswered(body, &revision);
      break;
    }
    default: {
      // The same events and the same end whether the body comes whole or in small pieces.
      const std::size_t stop_at = 1 + data[0] / 5;
      const Watched whole = Watch(body, body.size() + 1, 0, stop_at);
      const Watched cut = Watch(body, 1 + data[0] % 13, data[0], stop_at);
      if (whole.events != cut.events || whole.end != cut.end || whole.stopped != cut.stopped) {
        std::abort();
      }
    }
  }
  return 0;
}
