// server_ab: two running tierpoolds (say, the build before a change and the one after) side by
// side, each case in turns against one and then the other (client/tool/measure.h), so that the
// drift of a shared machine falls on both alike. Prints each case's rate and latency on A and
// on B, and B's rate over A's.
//
//   server_ab --a /tmp/a.sock --b /tmp/b.sock [--seconds 2] [--json] [--no-ring]
//
// Both servers should have the same flags and at least 512 MiB of dram.
#include <boost/program_options.hpp>
#include <cstdio>
#include <cstring>
#include <functional>
#include <iostream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "client/tool/measure.h"
#include "tierpool/client.h"

namespace po = boost::program_options;
using namespace tierpool;
using tierpool::tool::Sample;

namespace {

constexpr std::uint64_t kSmall = 4096;
constexpr std::uint64_t kLarge = 256 << 10;
constexpr std::uint64_t kLargeKeys = 1024;  // 256 MiB of 256 KiB objects: out of most caches
constexpr int kBatch = 64;
// Puts of sizes that vary, one tensor after another as activations come (96 KiB to 1 MiB),
// round 64 keys of their own.
constexpr std::uint64_t kMixedSizes[] = {96 << 10,  384 << 10, 1 << 20,
                                         160 << 10, 768 << 10, 256 << 10};
constexpr std::uint64_t kMixedKeys = 64;

// What one server is asked: its client, the keys it goes round and where the bytes come from.
struct Side {
  std::unique_ptr<Client> client;
  std::vector<std::string> keys;
  std::uint64_t next = 0;
  std::vector<PutItem> puts;
  std::vector<GetItem> gets;
  std::vector<std::string> mixed_keys;
  std::uint64_t next_mixed = 0;
  const std::string& NextKey() { return keys[next++ % keys.size()]; }
};

struct Case {
  const char* name;
  std::uint64_t bytes_per_op;
  std::function<Status(Side&)> op;
};

}  // namespace

int main(int argc, char** argv) {
  std::string socket_a, socket_b;
  double seconds = 2;
  bool no_ring = false;
  po::options_description opts("server_ab options");
  opts.add_options()("help", "this text")("a", po::value(&socket_a)->required(),
                                          "socket of server A (the baseline)")(
      "b", po::value(&socket_b)->required(), "socket of server B")(
      "seconds", po::value(&seconds)->default_value(2), "time on each server per case")(
      "json", "one JSON object per case instead of the table")(
      "no-ring", po::bool_switch(&no_ring),
      "calls through the socket only (ClientOptions::request_ring off)");
  po::variables_map vm;
  try {
    po::store(po::parse_command_line(argc, argv, opts), vm);
    if (vm.count("help")) {
      std::cout << opts << "\n";
      return 0;
    }
    po::notify(vm);
  } catch (const po::error& e) {
    std::cerr << "server_ab: " << e.what() << "\n" << opts << "\n";
    return 2;
  }

  std::vector<std::byte> large(kLarge, std::byte{5});
  std::vector<std::byte> mixed(1 << 20, std::byte{6});
  std::uint64_t mixed_mean = 0;
  for (std::uint64_t n : kMixedSizes) mixed_mean += n;
  mixed_mean /= std::size(kMixedSizes);
  std::vector<std::byte> batch_src(kBatch * kSmall, std::byte{3});
  // Destinations on a cache line, as PyTorch's allocator places tensors (see tool/bench.cc).
  auto* dst = static_cast<std::byte*>(std::aligned_alloc(64, kLarge));
  auto* batch_dst = static_cast<std::byte*>(std::aligned_alloc(64, kBatch * kSmall));
  PutOptions put_options;
  put_options.durability = Durability::kCache;
  PutOptions block_options = put_options;
  block_options.kind = ObjectKind::kKvBlock;

  Side sides[2];
  const std::string* sockets[2] = {&socket_a, &socket_b};
  for (int s = 0; s < 2; ++s) {
    ClientOptions co;
    co.socket_path = *sockets[s];
    co.request_ring = !no_ring;
    auto c = Client::Connect(co);
    if (!c.ok()) {
      std::cerr << "server_ab: " << *sockets[s] << ": " << c.status().ToString() << "\n";
      return 1;
    }
    Side& side = sides[s];
    side.client = std::move(c).value();
    for (std::uint64_t i = 0; i < kLargeKeys; ++i) {
      side.keys.push_back("ab-" + std::to_string(i));
      if (Status st = side.client->Put(side.keys.back(), large.data(), kLarge, put_options);
          !st.ok()) {
        std::cerr << "server_ab: filling " << *sockets[s] << ": " << st.ToString() << "\n";
        return 1;
      }
    }
    for (std::uint64_t i = 0; i < kMixedKeys; ++i) {
      side.mixed_keys.push_back("ab-mixed-" + std::to_string(i));
    }
    for (int i = 0; i < kBatch; ++i) {
      const std::string key = "ab-block-" + std::to_string(i);
      side.puts.push_back({key, batch_src.data() + i * kSmall, kSmall, block_options});
      side.gets.push_back({key, batch_dst + i * kSmall, kSmall});
    }
    for (const Status& st : side.client->PutBatch(side.puts)) {
      if (!st.ok()) {
        std::cerr << "server_ab: " << st.ToString() << "\n";
        return 1;
      }
    }
    if (Status st = side.client->Put("ab-small", large.data(), kSmall, put_options); !st.ok()) {
      std::cerr << "server_ab: " << st.ToString() << "\n";
      return 1;
    }
  }

  auto status_of = [](const auto& r) { return r.ok() ? Status::Ok() : r.status(); };
  auto first_error = [](const auto& results) {
    for (const auto& r : results) {
      if (!r.ok()) return Status(r.status());
    }
    return Status::Ok();
  };
  const std::vector<Case> cases = {
      {"get 4 KiB", kSmall,
       [&](Side& s) { return status_of(s.client->Get("ab-small", dst, kSmall)); }},
      {"get 256 KiB", kLarge,
       [&](Side& s) { return status_of(s.client->Get(s.NextKey(), dst, kLarge)); }},
      {"view 256 KiB", kLarge, [&](Side& s) { return status_of(s.client->GetView(s.NextKey())); }},
      {"put 256 KiB", kLarge,
       [&](Side& s) { return s.client->Put(s.NextKey(), large.data(), kLarge, put_options); }},
      {"put 64 x 4 KiB", kBatch * kSmall,
       [&](Side& s) {
         for (const Status& st : s.client->PutBatch(s.puts)) TIERPOOL_RETURN_IF_ERROR(st);
         return Status::Ok();
       }},
      {"get 64 x 4 KiB", kBatch * kSmall,
       [&](Side& s) { return first_error(s.client->GetBatch(s.gets)); }},
      {"put 96K-1M mixed", mixed_mean,
       [&](Side& s) {
         const std::uint64_t i = s.next_mixed++;
         return s.client->Put(s.mixed_keys[i % kMixedKeys], mixed.data(),
                              kMixedSizes[i % std::size(kMixedSizes)], put_options);
       }},
  };

  const bool as_json = vm.count("json") > 0;
  if (!as_json) {
    std::printf("%-16s %28s %28s %8s\n", "case", "A: GB/s  p50 us  p99 us",
                "B: GB/s  p50 us  p99 us", "B/A");
  }
  for (const Case& c : cases) {
    std::vector<tool::Turn> turns;
    for (Side& side : sides) {
      turns.push_back(
          [&c, &side](double s) { return tool::MeasureFor(s, [&] { return c.op(side); }); });
    }
    auto samples = tool::MeasureInTurns(seconds, 0.02, 50, turns);
    if (!samples.ok()) {
      std::cerr << "server_ab: " << c.name << ": " << samples.status().ToString() << "\n";
      return 1;
    }
    const Sample& a = (*samples)[0];
    const Sample& b = (*samples)[1];
    const double a_gbps = tool::Gbps(a, c.bytes_per_op), b_gbps = tool::Gbps(b, c.bytes_per_op);
    if (as_json) {
      nlohmann::json row = {{"case", c.name},
                            {"a_gbps", a_gbps},
                            {"b_gbps", b_gbps},
                            {"a_p50_us", tool::Percentile(a.micros, 0.5)},
                            {"b_p50_us", tool::Percentile(b.micros, 0.5)},
                            {"a_p99_us", tool::Percentile(a.micros, 0.99)},
                            {"b_p99_us", tool::Percentile(b.micros, 0.99)},
                            {"b_over_a", b_gbps / a_gbps}};
      std::cout << row.dump() << "\n";
    } else {
      std::printf("%-16s %10.2f %8.2f %8.2f %10.2f %8.2f %8.2f %8.3f\n", c.name, a_gbps,
                  tool::Percentile(a.micros, 0.5), tool::Percentile(a.micros, 0.99), b_gbps,
                  tool::Percentile(b.micros, 0.5), tool::Percentile(b.micros, 0.99),
                  b_gbps / a_gbps);
    }
  }
  for (Side& side : sides) {
    std::vector<std::string> keys = side.keys;
    for (const GetItem& g : side.gets) keys.push_back(g.key);
    keys.insert(keys.end(), side.mixed_keys.begin(), side.mixed_keys.end());
    keys.push_back("ab-small");
    (void)side.client->DeleteBatch(keys);
  }
  std::free(dst);
  std::free(batch_dst);
  return 0;
}
