// tierpoold's flags, and the TOML file that sets the same keys (--config), read into a
// ServerConfig: one group of flags per part of the configuration (the server, connections, tiers,
// limits, the cluster), each added to the options by its own function and, where a flag's text
// needs checking, applied by its own.
#include <boost/program_options.hpp>

#include <algorithm>
#include <charconv>
#include <filesystem>
#include <iostream>

#include "common/defaults.h"
#include "common/option_errors.h"
#include "common/posix.h"
#include "common/units.h"
#include "store/config_file.h"
#include "store/server_config.h"
#include "transport/ucx_worker.h"

namespace tierpool {

namespace po = boost::program_options;

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

namespace {

// Flags given as text (sizes with K/M/G suffixes, lists, names), checked once parsed.
struct FlagText {
  std::string config_file;
  std::string journal_bytes = "64M";
  std::string socket_mode = "0600", max_frame = "16M", inline_threshold = "8K", io_threads = "auto";
  std::string dram = "1G", hbm = "256M", hbm_group = "16M", mover_inflight = "256M",
              nvme_bytes = "0", nvme_block = "1M", link_rate = "0", spill_order = "remote,nvme",
              cache_policy = "spill";
  std::string lend = "0", repair_rate = "256M", peer_transport = "tcp";
};

po::options_description ServerFlags(ServerConfig& c, FlagText& t) {
  po::options_description o("the server");
  // clang-format off
  o.add_options()
    ("help,h", "print this help")
    ("version", "print the version")
    ("config", po::value(&t.config_file),
     "read options from this TOML file: one key per flag, without the dashes (flags win)")
    ("print-config", "print the effective configuration (defaults, file and flags) as TOML and exit")
    ("namespace-policy", po::value(&c.namespace_policy),
     "JSON file: which users and groups may use which namespaces, and quotas (default: the "
     "server's own user may use every namespace, nobody else any)")
    ("persist", po::value(&c.persist_dir),
     "directory: a clean shutdown writes every retained object there, the next start reads "
     "them back (without it, a restart loses everything)")
    ("persist-journal-bytes", po::value(&t.journal_bytes)->default_value("64M"),
     "--persist's journal is rewritten with what still matters once it passes this size")
    ("metrics-listen", po::value(&c.metrics.listen)->default_value("127.0.0.1:9464"),
     "HTTP address for /metrics (Prometheus) and /health: host:port, [v6]:port, or off")
    ("log-level", po::value(&c.log_level)->default_value("info"),
     "trace, debug, info, warn, error, critical, off");
  // clang-format on
  return o;
}

po::options_description ConnectionFlags(ServerConfig& c, FlagText& t) {
  po::options_description o("connections (the Unix socket, its I/O threads and limits)");
  // clang-format off
  o.add_options()
    ("socket", po::value(&c.transport.socket_path)->default_value(DefaultSocketPath()),
     "Unix socket to listen on")
    ("socket-mode", po::value(&t.socket_mode)->default_value("0600"), "permissions of the socket (octal)")
    ("max-frame", po::value(&t.max_frame)->default_value("16M"), "largest frame accepted or sent")
    ("inline-threshold", po::value(&t.inline_threshold)->default_value("8K"),
     "puts and gets of objects up to this size carry the bytes in the frame")
    ("io-threads", po::value(&t.io_threads)->default_value("auto"),
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
     "threads for requests that may wait (for a move or for room)");
  // clang-format on
  return o;
}

po::options_description TierFlags(ServerConfig& c, FlagText& t) {
  po::options_description o("tiers (hbm, dram, nvme) and moves between them");
  // clang-format off
  o.add_options()
    ("dram", po::value(&t.dram)->default_value("1G"), "dram tier capacity (K/M/G suffixes)")
    ("hbm", po::value(&t.hbm)->default_value("256M"), "hbm tier capacity (0 turns it off)")
    ("hbm-device", po::value(&c.hbm_device)->default_value(-1),
     "CUDA device whose memory is the hbm tier (-1: a page-locked host arena stands in)")
    ("hbm-checksum-threads", po::value(&c.hbm_checksum_threads)->default_value(0),
     "with --hbm-device: threads checking the bytes of copies to and from the device (0: 3/4 "
     "of the cores, at most 12)")
    ("hbm-check", po::value(&c.hbm_check)->default_value("device"),
     "with --hbm-device: check the bytes of copies to and from the device on the GPU (device) "
     "or on the host (host)")
    ("hbm-completion-group", po::value(&t.hbm_group)->default_value("16M"),
     "with --hbm-device: copies queued back to back share one completion event until they hold "
     "this many bytes (0: an event per copy)")
    ("mover-inflight", po::value(&t.mover_inflight)->default_value("256M"),
     "bytes each tier link may have in flight (more keeps a GPU's copy engines busy while "
     "their bytes are checked)")
    ("hbm-high-watermark", po::value(&c.hbm_watermarks.high)->default_value(0.90, "0.90"),
     "demote from hbm above this fraction")
    ("hbm-low-watermark", po::value(&c.hbm_watermarks.low)->default_value(0.75, "0.75"),
     "stop demoting below this fraction")
    ("dram-high-watermark", po::value(&c.dram_watermarks.high)->default_value(0.90, "0.90"), "dram high watermark")
    ("dram-low-watermark", po::value(&c.dram_watermarks.low)->default_value(0.75, "0.75"), "dram low watermark")
    ("no-populate", "do not pre-fault the dram arenas at start")
    ("huge-pages", "back the dram arenas with 2 MiB huge pages from the kernel's pool "
     "(vm.nr_hugepages, which must hold them: start fails otherwise); arena sizes round down "
     "to 2 MiB")
    ("nvme-path", po::value(&c.nvme.path), "nvme tier: a directory for its files, or a block device")
    ("nvme-bytes", po::value(&t.nvme_bytes)->default_value("0"),
     "nvme tier capacity (0 turns it off; needs --nvme-path)")
    ("nvme-files", po::value(&c.nvme.files)->default_value(1), "nvme tier: files to spread over")
    ("nvme-queue-depth", po::value(&c.nvme.queue_depth)->default_value(16), "nvme I/Os in flight")
    ("nvme-block-size", po::value(&t.nvme_block)->default_value("1M"),
     "largest single nvme I/O; records are split into these")
    ("nvme-backend", po::value(&c.nvme.backend)->default_value("io_uring"),
     "io_uring, posix (pread/pwrite) or memory (testing)")
    ("verify-commits", po::value(&c.store.verify_commits)->default_value(false),
     "check each zero-copy commit's bytes against the checksum sent (one read pass per put)")
    ("nvme-verify-writes", po::value(&c.nvme.verify_writes)->default_value(true),
     "read each spilled record back and check it before freeing its dram copy")
    ("link-rate", po::value(&t.link_rate)->default_value("0"),
     "cap each tier link at this many bytes per second (K/M/G suffixes; 0: no cap)")
    ("spill-order", po::value(&t.spill_order)->default_value("remote,nvme"),
     "where dram spills, nearest first: remote,nvme or nvme,remote (a node with fast flash and "
     "a slow network)")
    ("cache-policy", po::value(&t.cache_policy)->default_value("spill"),
     "cache objects under dram pressure: spill (to nvme) or drop");
  // clang-format on
  return o;
}

po::options_description LimitFlags(ServerConfig& c) {
  po::options_description o("limits per connection, process, user and namespace");
  // clang-format off
  o.add_options()
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
     "objects one namespace holds (0: no limit; a policy quota may set less)");
  // clang-format on
  return o;
}

po::options_description ClusterFlags(ServerConfig& c, FlagText& t) {
  po::options_description o("the cluster: memory lent to and borrowed from peers");
  // clang-format off
  o.add_options()
    ("etcd", po::value(&c.cluster.etcd),
     "join a cluster whose membership is in this etcd (http://host:port): lend and borrow memory")
    ("cluster", po::value(&c.cluster.cluster)->default_value("default"), "the cluster's name in etcd")
    ("node-id", po::value(&c.cluster.node_id), "this node's name in the cluster (default: host name)")
    ("peer-listen", po::value(&c.cluster.peer_listen), "host:port for peer sidecars (port 0: any free)")
    ("peer-advertise", po::value(&c.cluster.peer_advertise),
     "host:port peers connect to (default: --peer-listen)")
    ("peer-auth", po::value(&c.cluster.peer_auth),
     "file with the cluster's shared secret (mode 0600); peers without it get nothing")
    ("lend", po::value(&t.lend)->default_value("0"),
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
    ("remote-repair-rate", po::value(&t.repair_rate)->default_value("256M"),
     "bytes a second (K/M/G) at most that rebuilding copies lost with a peer starts, so clients' "
     "transfers come first (0: no bound)")
    ("peer-transport", po::value(&t.peer_transport)->default_value("tcp"),
     "how replicas' bytes move between nodes: tcp (tierpool's frames), ucx (UCX: RDMA verbs "
     "or TCP, as UCX_TLS allows), or auto (ucx where UCX finds an RDMA device)")
    ("remote-peer-lost-ms", po::value(&c.cluster.remote.peer_lost_ms)->default_value(30000),
     "a peer silent this long counts as gone: its copies are rebuilt on the others")
    ("lend-reserved-share", po::value(&c.cluster.lender.reserved_share)->default_value(0.5, "0.5"),
     "part of --lend split evenly among the cluster's other nodes and kept for each until it "
     "takes it (0: first come, first served)");
  // clang-format on
  return o;
}

// A size flag's text (K/M/G suffixes) into *out; the error names the flag.
Status ByteFlag(const std::string& flag, const std::string& value, std::uint64_t* out) {
  auto r = ParseByteSize(value);
  if (!r.ok()) return Status::InvalidArgument("--" + flag + ": " + r.status().message());
  *out = *r;
  return Status::Ok();
}

Status ApplyServerFlags(const FlagText& t, const po::variables_map& vm, ServerConfig* c) {
  TIERPOOL_RETURN_IF_ERROR(
      ByteFlag("persist-journal-bytes", t.journal_bytes, &c->persist_journal_bytes));
  c->metrics_required =
      vm.count("metrics-listen") != 0 && !vm["metrics-listen"].defaulted() && c->metrics.enabled();
  return Status::Ok();
}

Status ApplyConnectionFlags(const FlagText& t, ServerConfig* c) {
  try {
    std::size_t used = 0;
    unsigned long mode = std::stoul(t.socket_mode, &used, 8);
    if (used != t.socket_mode.size()) throw std::invalid_argument("trailing characters");
    // Permission bits only (the transport's check says so too), and checked before the cast:
    // a number past 32 bits was cut, to 0 for 0100000000000.
    if (mode > 0777) throw std::out_of_range("beyond 0777");
    c->transport.socket_mode = static_cast<std::uint32_t>(mode);
  } catch (const std::exception&) {
    return Status::InvalidArgument(
        "--socket-mode must be octal permissions, 0000 to 0777, like 0600");
  }
  std::uint64_t frame = 0;
  TIERPOOL_RETURN_IF_ERROR(ByteFlag("max-frame", t.max_frame, &frame));
  if (frame > (1ull << 30)) return Status::InvalidArgument("--max-frame must be at most 1G");
  TIERPOOL_RETURN_IF_ERROR(
      ByteFlag("inline-threshold", t.inline_threshold, &c->service.inline_threshold_bytes));
  auto io = ParseIoThreads(t.io_threads);
  if (!io.ok()) return io.status();
  c->transport.io_threads = *io;
  c->transport.max_frame_bytes = static_cast<std::uint32_t>(frame);
  c->service.max_frame_bytes = c->transport.max_frame_bytes;
  return Status::Ok();
}

Status ApplyTierFlags(const FlagText& t, const po::variables_map& vm, ServerConfig* c) {
  TIERPOOL_RETURN_IF_ERROR(ByteFlag("dram", t.dram, &c->dram.capacity));
  TIERPOOL_RETURN_IF_ERROR(ByteFlag("hbm", t.hbm, &c->hbm.capacity));
  TIERPOOL_RETURN_IF_ERROR(ByteFlag("nvme-bytes", t.nvme_bytes, &c->nvme.capacity));
  TIERPOOL_RETURN_IF_ERROR(ByteFlag("nvme-block-size", t.nvme_block, &c->nvme.io_size));
  TIERPOOL_RETURN_IF_ERROR(
      ByteFlag("mover-inflight", t.mover_inflight, &c->store.mover.max_inflight_bytes_per_link));
  TIERPOOL_RETURN_IF_ERROR(
      ByteFlag("hbm-completion-group", t.hbm_group, &c->hbm_completion_group_bytes));
  TIERPOOL_RETURN_IF_ERROR(
      ByteFlag("link-rate", t.link_rate, &c->store.mover.max_link_bytes_per_sec));
  if (c->nvme.capacity > 0 && c->nvme.path.empty() && c->nvme.backend != "memory") {
    return Status::InvalidArgument("--nvme-bytes needs --nvme-path");
  }
  // With --persist, a directory's nvme files are kept and journaled: the retained objects spilled
  // there come back after a crash (store/persist_recovery.h). A block device is not.
  c->nvme.keep_files = !c->persist_dir.empty() && c->nvme.capacity > 0 &&
                       c->nvme.backend != "memory" && std::filesystem::is_directory(c->nvme.path);
  auto order = ParseSpillOrder(t.spill_order);
  if (!order.ok()) return order.status();
  c->store.spill_order = std::move(order).value();
  if (t.cache_policy == "drop") {
    c->store.cache_policy = StoreConfig::CachePolicy::kDrop;
  } else if (t.cache_policy != "spill") {
    return Status::InvalidArgument("--cache-policy must be spill or drop");
  }
  c->dram.populate = vm.count("no-populate") == 0;
  c->dram.huge_pages = vm.count("huge-pages") != 0;
  return Status::Ok();
}

Status ApplyClusterFlags(const FlagText& t, const po::variables_map& vm, ServerConfig* c) {
  TIERPOOL_RETURN_IF_ERROR(ByteFlag("lend", t.lend, &c->cluster.lend_bytes));
  TIERPOOL_RETURN_IF_ERROR(
      ByteFlag("remote-repair-rate", t.repair_rate, &c->cluster.remote.repair_bytes_per_sec));
  if (t.peer_transport != "tcp" && t.peer_transport != "ucx" && t.peer_transport != "auto") {
    return Status::InvalidArgument("--peer-transport " + t.peer_transport +
                                   ": expected tcp, ucx or auto");
  }
  // Both sides follow it: a lender offers UCX (Info.ucx_open) and a borrower asks for it.
  const bool ucx = t.peer_transport == "ucx" ||
                   (t.peer_transport == "auto" && !transport::UcxRdmaTransports().empty());
  c->cluster.peer_server.ucx = ucx;
  c->cluster.remote.ucx = ucx;
  c->cluster.lender.populate = vm.count("no-populate") == 0;
  return Status::Ok();
}

// The command line, then the config file under it (a flag given on the command line wins).
Status ReadFlags(int argc, const char* const* argv, const po::options_description& opts,
                 po::variables_map* vm) {
  try {
    po::store(po::parse_command_line(argc, argv, opts), *vm);
  } catch (const po::error& e) {
    return Status::InvalidArgument(OptionErrorMessage(e) + " (see tierpoold --help)");
  }
  if (vm->count("config")) {
    const std::string file = (*vm)["config"].as<std::string>();
    auto args = ConfigFileArgs(file, opts);
    if (!args.ok()) return args.status();
    try {
      po::store(po::command_line_parser(*args).options(opts).run(), *vm);
    } catch (const po::error& e) {
      return Status::InvalidArgument("config file " + file + ": " + OptionErrorMessage(e));
    }
  }
  try {
    po::notify(*vm);
  } catch (const po::error& e) {
    return Status::InvalidArgument(OptionErrorMessage(e) + " (see tierpoold --help)");
  }
  return Status::Ok();
}

}  // namespace

Result<ServerConfig> ParseServerFlags(int argc, const char* const* argv, bool* exit_now) {
  *exit_now = false;
  ServerConfig c;
  FlagText t;
  po::options_description opts("tierpoold options");
  opts.add(ServerFlags(c, t)).add(ConnectionFlags(c, t)).add(TierFlags(c, t)).add(LimitFlags(c));
  opts.add(ClusterFlags(c, t));
  po::variables_map vm;
  TIERPOOL_RETURN_IF_ERROR(ReadFlags(argc, argv, opts, &vm));
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
  TIERPOOL_RETURN_IF_ERROR(ApplyConnectionFlags(t, &c));
  TIERPOOL_RETURN_IF_ERROR(ApplyServerFlags(t, vm, &c));
  TIERPOOL_RETURN_IF_ERROR(ApplyTierFlags(t, vm, &c));
  TIERPOOL_RETURN_IF_ERROR(ApplyClusterFlags(t, vm, &c));
  TIERPOOL_RETURN_IF_ERROR(c.validate());
  if (vm.count("print-config")) {
    std::cout << ConfigAsToml(opts, vm, {"help", "version", "config", "print-config"});
    *exit_now = true;
  }
  return c;
}

}  // namespace tierpool
