// tierpool-hbm-bench (run as `tierpool bench hbm`; built with -DTIERPOOL_CUDA=ON): moves between
// dram and the hbm tier in a GPU's memory, through the mover as the store issues them (every
// byte checked against its XXH3 on the host side), against cudaMemcpyAsync of the same bytes
// between the same page-locked dram and the device, one stream, in the same run. With --direct,
// also through the tier's Write and Read from one thread with no mover, timing that thread's
// calls: where a move's time goes.
#include <cuda_runtime_api.h>

#include <boost/program_options.hpp>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <iostream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>

#include "common/checksum.h"
#include "common/logging.h"
#include "common/option_errors.h"
#include "common/units.h"
#include "store/mover.h"
#include "tiers/dram_tier.h"
#include "tiers/hbm_tier.h"

namespace po = boost::program_options;
using nlohmann::json;
using namespace tierpool;

namespace {

using Steady = std::chrono::steady_clock;

double Seconds(Steady::time_point since) {
  return std::chrono::duration<double>(Steady::now() - since).count();
}

void Check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::cerr << "tierpool bench hbm: " << what << ": " << cudaGetErrorString(e) << "\n";
    std::exit(1);
  }
}

// cudaMemcpyAsync of every object, back to back on one stream: the copy engine's rate for
// these sizes from this memory.
double ReferenceRate(bool up, const std::vector<std::byte*>& host, std::byte* device,
                     std::uint64_t size, cudaStream_t stream) {
  const auto start = Steady::now();
  for (std::size_t i = 0; i < host.size(); ++i) {
    std::byte* dev = device + i * size;
    Check(up ? cudaMemcpyAsync(dev, host[i], size, cudaMemcpyHostToDevice, stream)
             : cudaMemcpyAsync(host[i], dev, size, cudaMemcpyDeviceToHost, stream),
          "cudaMemcpyAsync");
  }
  Check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  return static_cast<double>(host.size() * size) / Seconds(start);
}

// Every object moved by the hbm tier's Write (up) or Read (down) called from this thread, at
// most `inflight` bytes in flight, no mover: the rate, and this thread's time in the calls per
// move (what the issuing side costs).
struct DirectResult {
  double rate = 0;
  double call_us = 0;
  std::uint64_t failed = 0;
};
DirectResult DirectRate(bool up, Tier& hbm, const std::vector<Extent>& dev,
                        const std::vector<std::byte*>& src, const std::vector<std::byte*>& back,
                        const std::vector<RecordInfo>& info, std::uint64_t inflight) {
  std::mutex mu;
  std::condition_variable cv;
  std::uint64_t in_flight = 0, failed = 0;
  std::chrono::nanoseconds in_calls{0};
  const auto start = Steady::now();
  for (std::size_t i = 0; i < dev.size(); ++i) {
    const std::uint64_t size = info[i].size;
    {
      std::unique_lock lock(mu);
      cv.wait(lock, [&] { return in_flight == 0 || in_flight + size <= inflight; });
      in_flight += size;
    }
    auto done = [&, size](Status s) {
      std::lock_guard lock(mu);
      in_flight -= size;
      failed += s.ok() ? 0 : 1;
      cv.notify_one();
    };
    const auto call = Steady::now();
    if (up) {
      hbm.Write(dev[i], info[i], src[i], std::move(done));
    } else {
      hbm.Read(dev[i], info[i], back[i], std::move(done));
    }
    in_calls += Steady::now() - call;
  }
  std::unique_lock lock(mu);
  cv.wait(lock, [&] { return in_flight == 0; });
  const double seconds = Seconds(start);
  return {
      static_cast<double>(dev.size() * info[0].size) / seconds,
      std::chrono::duration<double, std::micro>(in_calls).count() / static_cast<double>(dev.size()),
      failed};
}

}  // namespace

int main(int argc, char** argv) {
  LogToStderr();
  spdlog::set_level(spdlog::level::warn);
  int device = 0, repeat = 3, checksum_threads = 0;
  std::string check_min_s = "16M", group_s = "16M";
  bool direct = false;
  std::string check = "device";
  std::string total_s = "1G", sizes_s = "256K,1M,4M,16M,64M", inflight_s = "256M";
  bool as_json = false;
  po::options_description opts("tierpool bench hbm");
  // clang-format off
  opts.add_options()
    ("help,h", "print this help")
    ("device", po::value(&device)->default_value(0), "CUDA device")
    ("total", po::value(&total_s)->default_value("1G"), "bytes moved each way per size")
    ("sizes", po::value(&sizes_s)->default_value("256K,1M,4M,16M,64M"), "object sizes")
    ("inflight", po::value(&inflight_s)->default_value("256M"), "the mover's bytes in flight per link")
    ("repeat", po::value(&repeat)->default_value(3), "runs of each (the best kept)")
    ("check", po::value(&check)->default_value("device"),
     "where moves are checked: device (on the GPU) or host")
    ("checksum-threads", po::value(&checksum_threads)->default_value(0),
     "threads checking bytes beside the copies (0: the server's default)")
    ("device-check-min", po::value(&check_min_s)->default_value("16M"),
     "objects checked on the device from this size (smaller ones on the host)")
    ("completion-group", po::value(&group_s)->default_value("16M"),
     "unchecked copies share a completion event up to this many bytes (0: one per copy)")
    ("direct", po::bool_switch(&direct),
     "also move through the tier with no mover, timing the calls that issue the moves")
    ("json", po::bool_switch(&as_json), "print JSON");
  // clang-format on
  po::variables_map vm;
  if (auto rc = ParseToolOptions(argc, argv, opts, "tierpool bench hbm", &vm)) return *rc;
  auto total = ParseByteSize(total_s);
  auto inflight = ParseByteSize(inflight_s);
  auto check_min = ParseByteSize(check_min_s);
  auto group = ParseByteSize(group_s);
  if (!total.ok() || !inflight.ok() || !check_min.ok() || !group.ok() || repeat < 1) {
    std::cerr << "tierpool bench hbm: bad --total, --inflight, --device-check-min, "
                 "--completion-group or --repeat\n";
    return 2;
  }
  std::vector<std::uint64_t> sizes;
  for (std::size_t at = 0; at <= sizes_s.size();) {
    const std::size_t comma = std::min(sizes_s.find(',', at), sizes_s.size());
    auto s = ParseByteSize(sizes_s.substr(at, comma - at));
    if (!s.ok() || *s == 0 || *s > *total) {
      std::cerr << "tierpool bench hbm: bad size in --sizes\n";
      return 2;
    }
    sizes.push_back(*s);
    at = comma + 1;
  }

  if (check != "device" && check != "host") {
    std::cerr << "tierpool bench hbm: --check is device or host\n";
    return 2;
  }
  auto backend = MakeCudaHbmBackend(device, {.checksum_threads = checksum_threads,
                                             .device_checks = check == "device",
                                             .device_check_min_bytes = *check_min,
                                             .completion_group_bytes = *group});
  if (!backend.ok()) {
    std::cerr << "tierpool bench hbm: " << backend.status().ToString() << "\n";
    return 1;
  }
  auto dram = DramTier::Create({.capacity = *total * 2 + (64 << 20)});
  auto hbm = HbmTier::Create({.capacity = *total + (64 << 20), .arena_id = 1u << 30},
                             std::move(backend).value());
  if (!dram.ok() || !hbm.ok()) {
    std::cerr << "tierpool bench hbm: " << (dram.ok() ? hbm.status() : dram.status()).ToString()
              << "\n";
    return 1;
  }
  for (const auto& a : (*dram)->Arenas()) {
    Status s = (*hbm)->RegisterHostMemory((*dram)->HostAddress({a.id, 0, a.size}), a.size);
    if (!s.ok()) std::cerr << "warning: " << s.ToString() << "\n";
  }
  cudaDeviceProp prop{};
  Check(cudaGetDeviceProperties(&prop, device), "cudaGetDeviceProperties");
  Check(cudaSetDevice(device), "cudaSetDevice");
  std::byte* ref_device = nullptr;
  Check(cudaMalloc(reinterpret_cast<void**>(&ref_device), *total), "cudaMalloc");
  cudaStream_t stream;
  Check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");

  json rows = json::array();
  for (std::uint64_t size : sizes) {
    const std::uint64_t n = *total / size;
    std::vector<Extent> src(n), back(n), dev(n);
    std::vector<std::byte*> host(n), host_back(n);
    std::vector<RecordInfo> info(n);
    std::mt19937_64 rng(size);
    for (std::uint64_t i = 0; i < n; ++i) {
      src[i] = *(*dram)->Allocate(size, {});
      back[i] = *(*dram)->Allocate(size, {});
      dev[i] = *(*hbm)->Allocate(size, {});
      host[i] = (*dram)->HostAddress(src[i]);
      host_back[i] = (*dram)->HostAddress(back[i]);
      auto* words = reinterpret_cast<std::uint64_t*>(host[i]);
      for (std::uint64_t w = 0; w < size / 8; ++w) words[w] = rng();
    }
    // One thread's XXH3 over the same memory, out of cache: what each check costs.
    const auto hash_start = Steady::now();
    for (std::uint64_t i = 0; i < n; ++i) info[i] = {i, i, size, Xxh3(host[i], size)};
    const double hash_rate = static_cast<double>(n * size) / Seconds(hash_start);
    double best[4] = {0, 0, 0, 0};  // reference up, down; tierpool up, down
    DirectResult best_direct[2];    // up, down
    std::uint64_t failures = 0;
    for (int r = 0; r < repeat; ++r) {
      best[0] = std::max(best[0], ReferenceRate(true, host, ref_device, size, stream));
      best[1] = std::max(best[1], ReferenceRate(false, host, ref_device, size, stream));
      for (int up = 1; up >= 0; --up) {
        Mover mover({.max_inflight_bytes_per_link = *inflight});
        std::atomic<std::uint64_t> failed{0};
        const auto start = Steady::now();
        for (std::uint64_t i = 0; i < n; ++i) {
          MoveRequest m;
          m.from = up ? static_cast<Tier*>(dram->get()) : hbm->get();
          m.src = up ? src[i] : dev[i];
          m.to = up ? static_cast<Tier*>(hbm->get()) : dram->get();
          m.dst = up ? dev[i] : back[i];
          m.info = info[i];
          m.done = [&failed](const MoveResult& res) {
            if (!res.status.ok()) failed.fetch_add(1);
          };
          mover.Submit(std::move(m));
        }
        mover.Drain();
        const double rate = static_cast<double>(n * size) / Seconds(start);
        best[up ? 2 : 3] = std::max(best[up ? 2 : 3], rate);
        failures += failed.load();
        mover.Stop();
      }
      for (int up = 1; direct && up >= 0; --up) {
        DirectResult d = DirectRate(up, **hbm, dev, host, host_back, info, *inflight);
        failures += d.failed;
        DirectResult& b = best_direct[up ? 0 : 1];
        if (d.rate > b.rate) b = d;
      }
    }
    std::uint64_t differ = 0;
    for (std::uint64_t i = 0; i < n; ++i) {
      differ += std::memcmp((*dram)->HostAddress(back[i]), host[i], size) != 0;
      (void)(*dram)->Free(src[i]);
      (void)(*dram)->Free(back[i]);
      (void)(*hbm)->Free(dev[i]);
    }
    json row = {{"size", size},
                {"objects", n},
                {"dram_to_hbm_gbps", best[2] / 1e9},
                {"cuda_h2d_gbps", best[0] / 1e9},
                {"dram_to_hbm_ratio", best[2] / best[0]},
                {"hbm_to_dram_gbps", best[3] / 1e9},
                {"cuda_d2h_gbps", best[1] / 1e9},
                {"hbm_to_dram_ratio", best[3] / best[1]},
                {"xxh3_one_thread_gbps", hash_rate / 1e9},
                {"failed_moves", failures},
                {"objects_differing", differ}};
    if (direct) {
      row["direct_dram_to_hbm_gbps"] = best_direct[0].rate / 1e9;
      row["direct_dram_to_hbm_ratio"] = best_direct[0].rate / best[0];
      row["direct_dram_to_hbm_call_us"] = best_direct[0].call_us;
      row["direct_hbm_to_dram_gbps"] = best_direct[1].rate / 1e9;
      row["direct_hbm_to_dram_ratio"] = best_direct[1].rate / best[1];
      row["direct_hbm_to_dram_call_us"] = best_direct[1].call_us;
    }
    rows.push_back(std::move(row));
  }
  (void)cudaFree(ref_device);
  (void)cudaStreamDestroy(stream);
  json out{{"device", prop.name},
           {"inflight_bytes", *inflight},
           {"total_bytes", *total},
           {"repeat", repeat},
           {"checksum_threads", checksum_threads},
           {"check", check},
           {"device_check_min_bytes", *check_min},
           {"completion_group_bytes", *group},
           {"rows", rows}};
  if (as_json) {
    std::cout << out.dump(2) << "\n";
  } else {
    std::printf(
        "%s; %s each way per size, best of %d, mover in flight %s per link, checked on the %s, "
        "checksum threads %s\n",
        prop.name, FormatBytes(*total).c_str(), repeat, FormatBytes(*inflight).c_str(),
        check.c_str(), checksum_threads > 0 ? std::to_string(checksum_threads).c_str() : "default");
    std::printf("%8s %7s | %9s %9s %6s | %9s %9s %6s | %9s | %s\n", "size", "objects", "dram>hbm",
                "cuda h2d", "ratio", "hbm>dram", "cuda d2h", "ratio", "xxh3 1thr", "checks");
    for (const auto& r : rows) {
      std::printf(
          "%8s %7llu | %7.1f GB/s %7.1f GB/s %5.2fx | %7.1f GB/s %7.1f GB/s %5.2fx | %7.1f GB/s | "
          "%s\n",
          FormatBytes(r["size"].get<std::uint64_t>()).c_str(),
          static_cast<unsigned long long>(r["objects"].get<std::uint64_t>()),
          r["dram_to_hbm_gbps"].get<double>(), r["cuda_h2d_gbps"].get<double>(),
          r["dram_to_hbm_ratio"].get<double>(), r["hbm_to_dram_gbps"].get<double>(),
          r["cuda_d2h_gbps"].get<double>(), r["hbm_to_dram_ratio"].get<double>(),
          r["xxh3_one_thread_gbps"].get<double>(),
          r["failed_moves"] == 0 && r["objects_differing"] == 0 ? "every byte ok" : "FAILED");
      if (r.contains("direct_dram_to_hbm_gbps")) {
        std::printf(
            "%8s %7s | %7.1f GB/s %12s %5.2fx | %7.1f GB/s %12s %5.2fx | no mover; "
            "issuing a move: %.2f us up, %.2f us down\n",
            "", "", r["direct_dram_to_hbm_gbps"].get<double>(), "",
            r["direct_dram_to_hbm_ratio"].get<double>(), r["direct_hbm_to_dram_gbps"].get<double>(),
            "", r["direct_hbm_to_dram_ratio"].get<double>(),
            r["direct_dram_to_hbm_call_us"].get<double>(),
            r["direct_hbm_to_dram_call_us"].get<double>());
      }
    }
  }
  for (const auto& r : rows) {
    if (r["failed_moves"] != 0 || r["objects_differing"] != 0) return 1;
  }
  return 0;
}
