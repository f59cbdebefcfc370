// tierpool-nvme-bench (run as `tierpool bench nvme`): the nvme tier's spill write and promote
// read against fio on the same file system, block size and queue depth, in one run.
#include <sys/mman.h>
#include <unistd.h>

#include <boost/program_options.hpp>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>

#include "common/checksum.h"
#include "common/logging.h"
#include "common/option_errors.h"
#include "common/units.h"
#include "tiers/nvme_tier.h"

namespace po = boost::program_options;
using nlohmann::json;
using namespace tierpool;

namespace {

// Runs fio with the io_uring engine and O_DIRECT; returns bytes/s, or nullopt without fio.
std::optional<double> Fio(const std::string& dir, const std::string& rw, std::uint64_t size,
                          std::uint64_t bs, std::uint32_t qd, std::string* error) {
  std::string file = dir + "/tierpool-fio-" + std::to_string(::getpid()) + ".dat";
  std::string cmd = "fio --name=tp --filename=" + file + " --rw=" + rw +
                    " --bs=" + std::to_string(bs) + " --iodepth=" + std::to_string(qd) +
                    " --ioengine=io_uring --direct=1 --size=" + std::to_string(size) +
                    " --output-format=json 2>&1";
  FILE* p = ::popen(cmd.c_str(), "r");
  if (p == nullptr) return std::nullopt;
  std::string out;
  char buf[4096];
  std::size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
  int rc = ::pclose(p);
  if (rw == "read") std::filesystem::remove(file);
  if (rc != 0) {
    *error = "fio failed: " + out.substr(0, 300);
    return std::nullopt;
  }
  try {
    auto j = json::parse(out.substr(out.find('{')));
    return j["jobs"][0][rw == "write" ? "write" : "read"]["bw_bytes"].get<double>();
  } catch (const std::exception& e) {
    *error = std::string("cannot read fio's output: ") + e.what();
    return std::nullopt;
  }
}

}  // namespace

int main(int argc, char** argv) {
  LogToStderr();
  spdlog::set_level(spdlog::level::warn);
  std::string dir = "/tmp", size_s = "1G", block_s = "1M", object_s = "64M";
  std::uint32_t qd = 16;
  bool as_json = false;
  po::options_description opts("tierpool bench nvme");
  opts.add_options()("help,h", "help")("path", po::value(&dir)->default_value("/tmp"),
                                       "directory on the file system to measure")(
      "size", po::value(&size_s)->default_value("1G"), "volume written then read")(
      "block-size", po::value(&block_s)->default_value("1M"), "I/O size")(
      "queue-depth", po::value(&qd)->default_value(16), "I/Os in flight")(
      "object-size", po::value(&object_s)->default_value("64M"), "tierpool record size")(
      "json", po::bool_switch(&as_json), "print JSON");
  po::variables_map vm;
  if (auto done = ParseToolOptions(argc, argv, opts, "tierpool bench nvme", &vm)) return *done;
  auto size = ParseByteSize(size_s), block = ParseByteSize(block_s),
       object = ParseByteSize(object_s);
  if (!size.ok() || !block.ok() || !object.ok() || *object == 0 || *size < *object) {
    std::cerr << "tierpool bench nvme: bad --size, --block-size or --object-size\n";
    return 2;
  }
  json rows = json::array();
  std::string fio_error;
  auto fio_w = Fio(dir, "write", *size, *block, qd, &fio_error);
  auto fio_r = fio_w ? Fio(dir, "read", *size, *block, qd, &fio_error) : std::nullopt;
  if (fio_w) rows.push_back({{"engine", "fio"}, {"op", "write"}, {"gbps", *fio_w / 1e9}});
  if (fio_r) rows.push_back({{"engine", "fio"}, {"op", "read"}, {"gbps", *fio_r / 1e9}});

  NvmeTierConfig c;
  c.path = dir;
  c.capacity = *size + *size / 8 + (64 << 20);
  c.io_size = *block;
  c.queue_depth = qd;
  c.backend = "io_uring";
  // The source: a page-aligned, pinned buffer like a dram arena, registered as one.
  std::uint64_t span = AlignUp(*object, 4096);
  void* mem = ::mmap(nullptr, span, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
  auto* src = static_cast<std::byte*>(mem);
  for (std::uint64_t i = 0; i < span; i += 8) {
    std::uint64_t v = i * 0x9e3779b97f4a7c15ull;
    std::memcpy(src + i, &v, 8);
  }
  std::uint64_t sum = Xxh3(src, *object);
  std::uint64_t records = *size / *object;
  json tp_rows = json::array();
  for (bool verify : {false, true}) {
    c.verify_writes = verify;
    auto tier = NvmeTier::Create(c, nullptr, {{src, span}});
    if (!tier.ok()) {
      std::cerr << "tierpool bench nvme: " << tier.status().ToString() << "\n";
      return 1;
    }
    std::vector<Extent> extents;
    auto t0 = std::chrono::steady_clock::now();
    for (std::uint64_t i = 0; i < records; ++i) {
      auto e = (*tier)->Allocate(*object, {});
      if (!e.ok()) return 1;
      Status s = (*tier)->WriteRecord(*e, {i, i, *object, sum}, src);
      if (!s.ok()) {
        std::cerr << "spill write: " << s.ToString() << "\n";
        return 1;
      }
      extents.push_back(*e);
    }
    double wsec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    double wbps = static_cast<double>(records * *object) / wsec;
    json w = {{"engine", "tierpool"},
              {"op", verify ? "spill_write_verified" : "spill_write"},
              {"gbps", wbps / 1e9}};
    if (fio_w) w["ratio_to_fio"] = wbps / *fio_w;
    rows.push_back(w);
    if (verify) break;
    t0 = std::chrono::steady_clock::now();
    for (std::uint64_t i = 0; i < records; ++i) {
      Status s = (*tier)->ReadRecord(extents[i], {i, i, *object, sum}, src);
      if (!s.ok()) {
        std::cerr << "promote read: " << s.ToString() << "\n";
        return 1;
      }
    }
    double rsec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    double rbps = static_cast<double>(records * *object) / rsec;
    json r = {{"engine", "tierpool"}, {"op", "promote_read"}, {"gbps", rbps / 1e9}};
    if (fio_r) r["ratio_to_fio"] = rbps / *fio_r;
    rows.push_back(r);
  }
  ::munmap(mem, span);
  json out = {{"path", dir},
              {"volume_bytes", records * *object},
              {"block_size", *block},
              {"queue_depth", qd},
              {"object_size", *object},
              {"rows", rows}};
  if (!fio_w) out["fio"] = fio_error.empty() ? "fio not installed" : fio_error;
  if (as_json) {
    std::cout << out.dump(2) << "\n";
    return 0;
  }
  std::printf("nvme bench: %s, %s written then read, %s I/O at queue depth %u\n", dir.c_str(),
              FormatBytes(records * *object).c_str(), FormatBytes(*block).c_str(), qd);
  for (const auto& r : rows) {
    std::printf(
        "  %-9s %-22s %7.2f GB/s %s\n", r["engine"].get<std::string>().c_str(),
        r["op"].get<std::string>().c_str(), r["gbps"].get<double>(),
        r.contains("ratio_to_fio")
            ? ("(" + std::to_string(r["ratio_to_fio"].get<double>()).substr(0, 4) + "x fio)")
                  .c_str()
            : "");
  }
  if (!fio_w) std::printf("  fio: %s\n", out["fio"].get<std::string>().c_str());
  return 0;
}
