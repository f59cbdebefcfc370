#include "store/server_config.h"

#include <algorithm>
#include <boost/program_options.hpp>
#include <charconv>
#include <filesystem>
#include <iostream>

#include "common/defaults.h"
#include "common/logging.h"
#include "common/option_errors.h"
#include "common/posix.h"
#include "common/units.h"
#include "store/config_file.h"
#include "transport/ucx_worker.h"

namespace tierpool {

namespace po = boost::program_options;

Status ServerConfig::validate() const {
  TIERPOOL_RETURN_IF_ERROR(transport.validate());
  TIERPOOL_RETURN_IF_ERROR(store.validate());
  TIERPOOL_RETURN_IF_ERROR(dram.validate());
  TIERPOOL_RETURN_IF_ERROR(hbm.validate());
  TIERPOOL_RETURN_IF_ERROR(dram_watermarks.validate("dram"));
  TIERPOOL_RETURN_IF_ERROR(hbm_watermarks.validate("hbm"));
  if (hbm_device < -1) return Status::InvalidArgument("--hbm-device must be -1 or a device");
  if (hbm_check != "device" && hbm_check != "host") {
    return Status::InvalidArgument("--hbm-check is device or host");
  }
  if (hbm_checksum_threads < 0 || hbm_checksum_threads > 256) {
    return Status::InvalidArgument("--hbm-checksum-threads must be in [0, 256]");
  }
  if (hbm_completion_group_bytes > (1ull << 30)) {
    return Status::InvalidArgument("--hbm-completion-group must be at most 1G");
  }
  if (service.max_frame_bytes != transport.max_frame_bytes) {
    return Status::Internal("service and transport frame limits differ");
  }
  TIERPOOL_RETURN_IF_ERROR(service.validate());
  TIERPOOL_RETURN_IF_ERROR(metrics.validate());
  if (nvme.capacity > 0) TIERPOOL_RETURN_IF_ERROR(nvme.validate());
  return cluster.validate();
}

Result<std::vector<TierKind>> ParseSpillOrder(const std::string& text) {
  std::vector<TierKind> order;
  std::size_t at = 0;
  while (at <= text.size()) {
    const std::size_t comma = std::min(text.find(',', at), text.size());
    const std::string name = text.substr(at, comma - at);
    if (name == "remote") {
      order.push_back(TierKind::kRemote);
    } else if (name == "nvme") {
      order.push_back(TierKind::kNvme);
    } else {
      return Status::InvalidArgument("--spill-order lists remote and nvme, comma-separated; not '" +
                                     name + "'");
    }
    at = comma + 1;
  }
  StoreConfig check;
  check.spill_order = order;
  if (Status s = check.validate(); !s.ok())
    return Status::InvalidArgument("--spill-order: " + s.message());
  return order;
}

int AutoIoThreads(int cpus) { return std::clamp(cpus / 4, 1, 4); }

Result<int> ParseIoThreads(const std::string& value) {
  if (value == "auto") return AutoIoThreads(UsableCores());
  int n = 0;
  const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), n);
  if (ec != std::errc() || end != value.data() + value.size() || n < 1 || n > 64) {
    return Status::InvalidArgument("--io-threads must be auto or a number from 1 to 64, not '" +
                                   value + "'");
  }
  return n;
}

Result<ServerConfig> ParseServerFlags(int argc, const char* const* argv, bool* exit_now) {
  *exit_now = false;
  ServerConfig c;
  std::string socket_mode = "0600", dram = "1G", hbm = "256M", max_frame = "16M",
              inline_threshold = "8K", config_file, nvme_bytes = "0", nvme_block = "1M",
              cache_policy = "spill", link_rate = "0", mover_inflight = "256M", lend = "0",
              repair_rate = "256M", hbm_group = "16M", spill_order = "remote,nvme",
              io_threads = "auto", journal_bytes = "64M", peer_transport = "tcp";
  po::options_description opts("tierpoold options");
  // clang-format off
  opts.add_options()
    ("help,h", "print this help")
    ("version", "print the version")
    ("config", po::value(&config_file),
     "read options from this TOML file: one key per flag, without the dashes (flags win)")
    ("print-config", "print the effective configuration (defaults, file and flags) as TOML and exit")
    ("socket", po::value(&c.transport.socket_path)->default_value(DefaultSocketPath()),
     "Unix socket to listen on")
    ("socket-mode", po::value(&socket_mode)->default_value("0600"), "permissions of the socket (octal)")
    ("dram", po::value(&dram)->default_value("1G"), "dram tier capacity (K/M/G suffixes)")
    ("hbm", po::value(&hbm)->default_value("256M"), "hbm tier capacity (0 turns it off)")
    ("hbm-device", po::value(&c.hbm_device)->default_value(-1),
     "CUDA device whose memory is the hbm tier (-1: a page-locked host arena stands in)")
    ("hbm-checksum-threads", po::value(&c.hbm_checksum_threads)->default_value(0),
     "with --hbm-device: threads checking the bytes of copies to and from the device (0: 3/4 "
     "of the cores, at most 12)")
    ("hbm-check", po::value(&c.hbm_check)->default_value("device"),
     "with --hbm-device: check the bytes of copies to and from the device on the GPU (device) "
     "or on the host (host)")
    ("hbm-completion-group", po::value(&hbm_group)->default_value("16M"),
     "with --hbm-device: copies queued back to back share one completion event until they hold "
     "this many bytes (0: an event per copy)")
    ("mover-inflight", po::value(&mover_inflight)->default_value("256M"),
     "bytes each tier link may have in flight (more keeps a GPU's copy engines busy while "
     "their bytes are checked)")
    ("hbm-high-watermark", po::value(&c.hbm_watermarks.high)->default_value(0.90, "0.90"),
     "demote from hbm above this fraction")
    ("hbm-low-watermark", po::value(&c.hbm_watermarks.low)->default_value(0.75, "0.75"),
     "stop demoting below this fraction")
    ("dram-high-watermark", po::value(&c.dram_watermarks.high)->default_value(0.90, "0.90"), "dram high watermark")
    ("dram-low-watermark", po::value(&c.dram_watermarks.low)->default_value(0.75, "0.75"), "dram low watermark")
    ("reservation-ttl-ms", po::value(&c.store.reservation_ttl_ms)->default_value(0),
     "a connection holding a reservation open longer is refused until it reconnects (0: no limit)")
    ("lease-ttl-ms", po::value(&c.store.lease_ttl_ms)->default_value(0),
     "a connection holding a pin longer is refused until it reconnects (0: no limit)")
    ("max-reservations-per-client", po::value(&c.store.max_reservations_per_client)->default_value(65536),
     "open reservations one connection may hold (0: no limit)")
    ("max-pins-per-client", po::value(&c.store.max_leases_per_client)->default_value(262144),
     "pins one connection may hold (0: no limit)")
    ("max-reserved-fraction-per-client",
     po::value(&c.store.max_reserved_fraction_per_client)->default_value(0.5, "0.5"),
     "fraction of hbm+dram one connection may hold in open reservations")
    ("max-reserved-fraction-per-process",
     po::value(&c.store.max_reserved_fraction_per_process)->default_value(0.5, "0.5"),
     "fraction of hbm+dram the connections of one process may hold in open reservations (0: no limit)")
    ("max-reserved-fraction-per-user",
     po::value(&c.store.max_reserved_fraction_per_user)->default_value(0.75, "0.75"),
     "fraction of hbm+dram the connections of one user may hold in open reservations (0: no limit)")
    ("max-key-bytes", po::value(&c.store.max_key_bytes)->default_value(1024), "longest key")
    ("max-objects", po::value(&c.store.max_objects)->default_value(4ull << 20),
     "objects the server holds in all, reservations included (0: no limit)")
    ("max-objects-per-namespace",
     po::value(&c.store.max_objects_per_namespace)->default_value(1ull << 20),
     "objects one namespace holds (0: no limit; a policy quota may set less)")
    ("max-frame", po::value(&max_frame)->default_value("16M"), "largest frame accepted or sent")
    ("inline-threshold", po::value(&inline_threshold)->default_value("8K"),
     "puts and gets of objects up to this size carry the bytes in the frame")
    ("io-threads", po::value(&io_threads)->default_value("auto"),
     "I/O threads, each serving the connections given to it; auto: one per 4 CPUs this "
     "process may run on, 1 to 4")
    ("busy-poll-us", po::value(&c.transport.busy_poll_us)->default_value(50),
     "poll at least this long after each request before sleeping (0: never spin)")
    ("busy-poll-max-us", po::value(&c.transport.busy_poll_max_us)->default_value(500),
     "poll up to this long when clients' requests have come further apart (a large put's "
     "copy between its reserve and its commit); at or below --busy-poll-us: a fixed window")
    ("max-request-rings", po::value(&c.transport.max_request_rings)->default_value(256),
     "connections that may have a shared-memory request ring (132 KiB each), through which "
     "requests go without a syscall while both ends poll (0: off)")
    ("max-connections", po::value(&c.transport.max_connections)->default_value(1024),
     "connections served at once")
    ("max-connections-per-process", po::value(&c.transport.max_connections_per_process)->default_value(256),
     "connections one client process may hold (0: no limit)")
    ("max-connections-per-user", po::value(&c.transport.max_connections_per_user)->default_value(0),
     "connections one user id may hold (0: no limit)")
    ("handshake-timeout-ms", po::value(&c.transport.handshake_timeout_ms)->default_value(5000),
     "close a connection whose first request has not arrived by then (0: never)")
    ("idle-timeout-ms", po::value(&c.transport.idle_timeout_ms)->default_value(300000),
     "close a connection idle this long that holds no reservation or pin (0: never)")
    ("frame-timeout-ms", po::value(&c.transport.frame_timeout_ms)->default_value(30000),
     "close a connection whose request or reply takes longer than this to cross (0: never)")
    ("worker-threads", po::value(&c.transport.worker_threads)->default_value(4),
     "threads for requests that may wait (for a move or for room)")
    ("no-populate", "do not pre-fault the dram arenas at start")
    ("huge-pages", "back the dram arenas with 2 MiB huge pages from the kernel's pool "
     "(vm.nr_hugepages, which must hold them: start fails otherwise); arena sizes round down "
     "to 2 MiB")
    ("nvme-path", po::value(&c.nvme.path), "nvme tier: a directory for its files, or a block device")
    ("nvme-bytes", po::value(&nvme_bytes)->default_value("0"),
     "nvme tier capacity (0 turns it off; needs --nvme-path)")
    ("nvme-files", po::value(&c.nvme.files)->default_value(1), "nvme tier: files to spread over")
    ("nvme-queue-depth", po::value(&c.nvme.queue_depth)->default_value(16), "nvme I/Os in flight")
    ("nvme-block-size", po::value(&nvme_block)->default_value("1M"),
     "largest single nvme I/O; records are split into these")
    ("nvme-backend", po::value(&c.nvme.backend)->default_value("io_uring"),
     "io_uring, posix (pread/pwrite) or memory (testing)")
    ("verify-commits", po::value(&c.store.verify_commits)->default_value(false),
     "check each zero-copy commit's bytes against the checksum sent (one read pass per put)")
    ("nvme-verify-writes", po::value(&c.nvme.verify_writes)->default_value(true),
     "read each spilled record back and check it before freeing its dram copy")
    ("link-rate", po::value(&link_rate)->default_value("0"),
     "cap each tier link at this many bytes per second (K/M/G suffixes; 0: no cap)")
    ("namespace-policy", po::value(&c.namespace_policy),
     "JSON file: which users and groups may use which namespaces, and quotas (default: the "
     "server's own user may use every namespace, nobody else any)")
    ("persist", po::value(&c.persist_dir),
     "directory: a clean shutdown writes every retained object there, the next start reads "
     "them back (without it, a restart loses everything)")
    ("persist-journal-bytes", po::value(&journal_bytes)->default_value("64M"),
     "--persist's journal is rewritten with what still matters once it passes this size")
    ("spill-order", po::value(&spill_order)->default_value("remote,nvme"),
     "where dram spills, nearest first: remote,nvme or nvme,remote (a node with fast flash and "
     "a slow network)")
    ("cache-policy", po::value(&cache_policy)->default_value("spill"),
     "cache objects under dram pressure: spill (to nvme) or drop")
    ("metrics-listen", po::value(&c.metrics.listen)->default_value("127.0.0.1:9464"),
     "HTTP address for /metrics (Prometheus) and /health: host:port, [v6]:port, or off")
    ("etcd", po::value(&c.cluster.etcd),
     "join a cluster whose membership is in this etcd (http://host:port): lend and borrow memory")
    ("cluster", po::value(&c.cluster.cluster)->default_value("default"), "the cluster's name in etcd")
    ("node-id", po::value(&c.cluster.node_id), "this node's name in the cluster (default: host name)")
    ("peer-listen", po::value(&c.cluster.peer_listen), "host:port for peer sidecars (port 0: any free)")
    ("peer-advertise", po::value(&c.cluster.peer_advertise),
     "host:port peers connect to (default: --peer-listen)")
    ("peer-auth", po::value(&c.cluster.peer_auth),
     "file with the cluster's shared secret (mode 0600); peers without it get nothing")
    ("lend", po::value(&lend)->default_value("0"),
     "memory lent to peers, beside --dram (K/M/G; 0: lend nothing)")
    ("remote-replicas", po::value(&c.cluster.remote.replicas)->default_value(2),
     "copies of each object placed in the remote tier, on different peers (0: borrow nothing)")
    ("member-ttl", po::value(&c.cluster.member_ttl_s)->default_value(5),
     "seconds of the cluster lease: a silent node counts as dead after this long")
    ("lend-grace-ms", po::value(&c.cluster.lender.borrower_grace_ms)->default_value(30000),
     "memory lent to a node is freed once it has been out of the membership and silent on the "
     "peer link this long")
    ("lend-share-probation-ms",
     po::value(&c.cluster.lender.share_probation_ms)->default_value(10000),
     "a member's part of --lend is kept for it this long after it joins, then only once it has "
     "proved on the peer link that it holds the cluster's secret")
    ("remote-repair-rate", po::value(&repair_rate)->default_value("256M"),
     "bytes a second (K/M/G) at most that rebuilding copies lost with a peer starts, so clients' "
     "transfers come first (0: no bound)")
    ("peer-transport", po::value(&peer_transport)->default_value("tcp"),
     "how replicas' bytes move between nodes: tcp (tierpool's frames), ucx (UCX: RDMA verbs "
     "or TCP, as UCX_TLS allows), or auto (ucx where UCX finds an RDMA device)")
    ("remote-peer-lost-ms", po::value(&c.cluster.remote.peer_lost_ms)->default_value(30000),
     "a peer silent this long counts as gone: its copies are rebuilt on the others")
    ("lend-reserved-share", po::value(&c.cluster.lender.reserved_share)->default_value(0.5, "0.5"),
     "part of --lend split evenly among the cluster's other nodes and kept for each until it "
     "takes it (0: first come, first served)")
    ("log-level", po::value(&c.log_level)->default_value("info"),
     "trace, debug, info, warn, error, critical, off");
  // clang-format on
  po::variables_map vm;
  try {
    po::store(po::parse_command_line(argc, argv, opts), vm);
  } catch (const po::error& e) {
    return Status::InvalidArgument(OptionErrorMessage(e) + " (see tierpoold --help)");
  }
  if (vm.count("config")) {
    const std::string file = vm["config"].as<std::string>();
    auto args = ConfigFileArgs(file, opts);
    if (!args.ok()) return args.status();
    try {
      // Stored after the command line: a flag given there wins.
      po::store(po::command_line_parser(*args).options(opts).run(), vm);
    } catch (const po::error& e) {
      return Status::InvalidArgument("config file " + file + ": " + OptionErrorMessage(e));
    }
  }
  try {
    po::notify(vm);
  } catch (const po::error& e) {
    return Status::InvalidArgument(OptionErrorMessage(e) + " (see tierpoold --help)");
  }
  if (vm.count("help")) {
    std::cout << "tierpoold: keeps tensors in hbm, dram and nvme tiers for local clients.\n\n"
              << opts << "\n";
    *exit_now = true;
    return c;
  }
  if (vm.count("version")) {
    std::cout << "tierpoold " << TIERPOOL_VERSION << "\n";
    *exit_now = true;
    return c;
  }
  try {
    std::size_t used = 0;
    unsigned long mode = std::stoul(socket_mode, &used, 8);
    if (used != socket_mode.size()) throw std::invalid_argument("trailing characters");
    // Permission bits only (the transport's check says so too), and checked before the cast:
    // a number past 32 bits was cut, to 0 for 0100000000000.
    if (mode > 0777) throw std::out_of_range("beyond 0777");
    c.transport.socket_mode = static_cast<std::uint32_t>(mode);
  } catch (const std::exception&) {
    return Status::InvalidArgument(
        "--socket-mode must be octal permissions, 0000 to 0777, like 0600");
  }
  auto parse = [](const std::string& flag, const std::string& v) -> Result<std::uint64_t> {
    auto r = ParseByteSize(v);
    if (!r.ok()) return Status::InvalidArgument("--" + flag + ": " + r.status().message());
    return r;
  };
  auto d = parse("dram", dram);
  if (!d.ok()) return d.status();
  auto h = parse("hbm", hbm);
  if (!h.ok()) return h.status();
  auto f = parse("max-frame", max_frame);
  if (!f.ok()) return f.status();
  auto it = parse("inline-threshold", inline_threshold);
  if (!it.ok()) return it.status();
  if (*f > (1ull << 30)) return Status::InvalidArgument("--max-frame must be at most 1G");
  auto jb = parse("persist-journal-bytes", journal_bytes);
  if (!jb.ok()) return jb.status();
  c.persist_journal_bytes = *jb;
  auto nb = parse("nvme-bytes", nvme_bytes);
  if (!nb.ok()) return nb.status();
  auto nbs = parse("nvme-block-size", nvme_block);
  if (!nbs.ok()) return nbs.status();
  auto mi = parse("mover-inflight", mover_inflight);
  if (!mi.ok()) return mi.status();
  c.store.mover.max_inflight_bytes_per_link = *mi;
  auto hg = parse("hbm-completion-group", hbm_group);
  if (!hg.ok()) return hg.status();
  c.hbm_completion_group_bytes = *hg;
  auto lr = parse("link-rate", link_rate);
  if (!lr.ok()) return lr.status();
  c.store.mover.max_link_bytes_per_sec = *lr;
  auto lb = parse("lend", lend);
  if (!lb.ok()) return lb.status();
  c.cluster.lend_bytes = *lb;
  auto rr = parse("remote-repair-rate", repair_rate);
  if (!rr.ok()) return rr.status();
  c.cluster.remote.repair_bytes_per_sec = *rr;
  if (peer_transport != "tcp" && peer_transport != "ucx" && peer_transport != "auto") {
    return Status::InvalidArgument("--peer-transport " + peer_transport +
                                   ": expected tcp, ucx or auto");
  }
  // Both sides follow it: a lender offers UCX (Info.ucx_open) and a borrower asks for it.
  const bool ucx = peer_transport == "ucx" ||
                   (peer_transport == "auto" && !transport::UcxRdmaTransports().empty());
  c.cluster.peer_server.ucx = ucx;
  c.cluster.remote.ucx = ucx;
  c.cluster.lender.populate = vm.count("no-populate") == 0;
  c.nvme.capacity = *nb;
  c.nvme.io_size = *nbs;
  if (c.nvme.capacity > 0 && c.nvme.path.empty() && c.nvme.backend != "memory") {
    return Status::InvalidArgument("--nvme-bytes needs --nvme-path");
  }
  // With --persist, a directory's nvme files are kept and journaled: the retained objects spilled
  // there come back after a crash (store/persist_recovery.h). A block device is not.
  c.nvme.keep_files = !c.persist_dir.empty() && c.nvme.capacity > 0 && c.nvme.backend != "memory" &&
                      std::filesystem::is_directory(c.nvme.path);
  auto io = ParseIoThreads(io_threads);
  if (!io.ok()) return io.status();
  c.transport.io_threads = *io;
  auto order = ParseSpillOrder(spill_order);
  if (!order.ok()) return order.status();
  c.store.spill_order = std::move(order).value();
  if (cache_policy == "drop") {
    c.store.cache_policy = StoreConfig::CachePolicy::kDrop;
  } else if (cache_policy != "spill") {
    return Status::InvalidArgument("--cache-policy must be spill or drop");
  }
  c.metrics_required =
      vm.count("metrics-listen") != 0 && !vm["metrics-listen"].defaulted() && c.metrics.enabled();
  c.dram.capacity = *d;
  c.dram.populate = vm.count("no-populate") == 0;
  c.dram.huge_pages = vm.count("huge-pages") != 0;
  c.hbm.capacity = *h;
  c.transport.max_frame_bytes = static_cast<std::uint32_t>(*f);
  c.service.max_frame_bytes = c.transport.max_frame_bytes;
  c.service.inline_threshold_bytes = *it;
  TIERPOOL_RETURN_IF_ERROR(c.validate());
  if (vm.count("print-config")) {
    std::cout << ConfigAsToml(opts, vm, {"help", "version", "config", "print-config"});
    *exit_now = true;
  }
  return c;
}

namespace {

// The hbm tier in the device's memory when one is asked for and answers, else the stand-in.
// dram's arenas are registered with the device, so moves run on its copy engines from them.
Result<std::unique_ptr<HbmTier>> BuildHbmTier(const HbmTierConfig& config,
                                              const ServerConfig& server, Tier& dram) {
  const int device = server.hbm_device;
  if (device >= 0) {
    auto backend =
        MakeCudaHbmBackend(device, {.checksum_threads = server.hbm_checksum_threads,
                                    .device_checks = server.hbm_check == "device",
                                    .completion_group_bytes = server.hbm_completion_group_bytes});
    if (backend.ok()) {
      auto hbm = HbmTier::Create(config, std::move(backend).value());
      if (!hbm.ok()) return hbm.status();
      for (const auto& a : dram.Arenas()) {
        void* base = dram.HostAddress({a.id, 0, a.size});
        if (Status s = (*hbm)->RegisterHostMemory(base, a.size); !s.ok()) {
          spdlog::warn(
              "dram arena {} is not registered with cuda:{} ({}): moves to and from "
              "it are staged by the driver",
              a.id, device, s.message());
        }
      }
      spdlog::info("hbm: {} of device memory on cuda:{}", FormatBytes(config.capacity), device);
      return hbm;
    }
    spdlog::warn("hbm: cuda:{} unavailable ({}); a page-locked host arena stands in", device,
                 backend.status().message());
  }
  return HbmTier::Create(config, std::make_unique<HostPinnedHbmBackend>());
}

}  // namespace

Result<std::unique_ptr<ObjectStore>> BuildStore(const ServerConfig& config,
                                                const std::vector<NamespacePool>& pools,
                                                std::unique_ptr<Tier> remote) {
  std::vector<std::unique_ptr<Tier>> tiers;
  DramTierConfig dram_config = config.dram;
  HbmTierConfig hbm_config = config.hbm;
  for (const NamespacePool& p : pools) {
    dram_config.pools.push_back(p.dram_bytes);
    hbm_config.pools.push_back(p.hbm_bytes);
  }
  auto dram = DramTier::Create(dram_config);
  if (!dram.ok()) return dram.status();
  (*dram)->set_watermarks(config.dram_watermarks);
  tiers.push_back(std::move(dram).value());
  if (config.hbm.capacity > 0) {
    auto hbm = BuildHbmTier(hbm_config, config, *tiers[0]);
    if (!hbm.ok()) return hbm.status();
    (*hbm)->set_watermarks(config.hbm_watermarks);
    tiers.push_back(std::move(hbm).value());
  }
  if (config.nvme.capacity > 0) {
    // The dram arenas are registered with the nvme backend for fixed-buffer I/O.
    std::vector<iovec> pinned;
    for (const auto& a : tiers[0]->Arenas()) {
      pinned.push_back({tiers[0]->HostAddress({a.id, 0, a.size}), a.size});
    }
    auto nvme = NvmeTier::Create(config.nvme, nullptr, pinned);
    if (!nvme.ok()) return nvme.status();
    tiers.push_back(std::move(nvme).value());
  }
  if (remote) tiers.push_back(std::move(remote));
  auto store = ObjectStore::Create(config.store, std::move(tiers));
  if (store.ok()) (*store)->SetPools(pools);
  return store;
}

}  // namespace tierpool
