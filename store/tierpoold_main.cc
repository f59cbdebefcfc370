// tierpoold: the per-node sidecar. Runs on built-in defaults; flags override them.
#include <malloc.h>
#include <unistd.h>

#include <csignal>
#include <iostream>

#include "common/logging.h"
#include "common/units.h"
#include "store/metrics_server.h"
#include "store/persist_journal.h"
#include "store/persist_recovery.h"
#include "store/server_config.h"
#include "store/snapshot.h"

namespace tierpool {
namespace {

// What --persist's directory holds, back in the store: the last snapshot, and after a crash the
// journal and the nvme files it names. Returns the journal the store writes to from now on.
Result<std::unique_ptr<PersistJournal>> Recover(ObjectStore& store, const ServerConfig& config,
                                                NvmeTier* kept_nvme) {
  const std::string& dir = config.persist_dir;
  auto recovered = RecoverPersisted(store, dir, kept_nvme);
  if (!recovered.ok()) {
    return Status(recovered.status().code(),
                  "cannot recover what " + dir + " holds: " + recovered.status().message());
  }
  const SnapshotStats& loaded = recovered->snapshot;
  spdlog::info(
      "recovered {} objects ({}) from {}; {} deleted since, {} records failed their checks, "
      "{} found no room{}",
      loaded.objects, FormatBytes(loaded.bytes), dir, loaded.deleted, loaded.skipped,
      loaded.not_restored, loaded.complete ? "" : "; the snapshot was incomplete");
  if (recovered->journal_records > 0) {
    spdlog::info(
        "after a crash: {} journal records; {} objects ({}) read back from nvme, {} failed their "
        "checks or found no room; {}",
        recovered->journal_records, recovered->from_nvme, FormatBytes(recovered->from_nvme_bytes),
        recovered->nvme_failed,
        recovered->checkpointed ? "a new snapshot holds them" : "no new snapshot");
  }
  std::unique_ptr<PersistJournal> journal = std::move(recovered->journal);
  journal->set_compact_bytes(config.persist_journal_bytes);
  store.set_persist_journal(journal.get());
  return journal;
}

// /metrics and /health; false when they cannot be served and the operator asked for them
// (--metrics-listen given): the daemon does not start then.
bool StartMetrics(MetricsServer& metrics, const ServerConfig& config) {
  if (Status s = metrics.Start(); !s.ok()) {
    if (config.metrics_required) {
      spdlog::critical("{}", s.ToString());
      return false;
    }
    spdlog::warn(
        "{}; serving without /metrics and /health (--metrics-listen chooses another "
        "address)",
        s.ToString());
  } else if (config.metrics.enabled()) {
    spdlog::info("metrics and health on http://{}/metrics and /health (port {})",
                 config.metrics.listen, metrics.port());
  }
  return true;
}

// Until SIGINT or SIGTERM (blocked in every thread); returns the signal. Once a minute, the heap
// pages glibc's malloc holds free go back to the system (it returns only the top of the heap by
// itself; after a burst of connections or objects the rest stays resident). The soak measured
// 4.9 MB of such pages after ten minutes. jemalloc, when linked, returns its free pages itself,
// after about ten seconds.
int WaitForStop(const sigset_t& stop_signals) {
  int sig = -1;
  const timespec minute{60, 0};
  while (sig < 0) {
    sig = sigtimedwait(&stop_signals, nullptr, &minute);
#ifndef TIERPOOL_MALLOC_NAME
    if (sig < 0) ::malloc_trim(0);
#endif
  }
  return sig;
}

// --persist at a clean shutdown: every retained object into a new snapshot. The exit status: 0,
// or 3 when the snapshot failed.
int SaveOnShutdown(ObjectStore& store, const std::string& dir, NvmeTier* kept_nvme) {
  auto saved = SaveSnapshot(store, dir);
  if (saved.ok()) {
    PersistJournal::Remove(dir);  // the new snapshot holds what it said
    if (kept_nvme != nullptr) RemoveNvmeFileSet(kept_nvme->path(), kept_nvme->file_set());
    spdlog::info("saved {} retained objects ({}) to {}; {} could not be read", saved->objects,
                 FormatBytes(saved->bytes), dir, saved->not_restored);
    return 0;
  }
  // Exit non-zero: a supervisor, and whoever reads the unit's state, must see the loss.
  spdlog::critical(
      "snapshot to {} failed: {}; the previous snapshot and its journal are kept (the next "
      "start brings back what they hold), the objects made since this start are lost",
      dir, saved.status().ToString());
  return 3;
}

}  // namespace
}  // namespace tierpool

int main(int argc, char** argv) {
  using namespace tierpool;
  LogToStderr();
  transport::RouteProtobufLogs();
  bool exit_now = false;
  auto config = ParseServerFlags(argc, argv, &exit_now);
  if (!config.ok()) {
    std::cerr << "tierpoold: " << config.status().ToString() << "\n";
    return 2;
  }
  if (exit_now) return 0;
  if (Status s = SetLogLevel(config->log_level); !s.ok()) {
    std::cerr << "tierpoold: " << s.ToString() << "\n";
    return 2;
  }
  // A --persist that cannot hold a snapshot is found now, not at shutdown with the objects lost.
  if (!config->persist_dir.empty()) {
    if (Status s = CheckPersistDir(config->persist_dir); !s.ok()) {
      spdlog::critical("{}", s.ToString());
      return 1;
    }
  }
  // Block the stop signals in every thread; the main thread waits for them below.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  std::signal(SIGPIPE, SIG_IGN);

  // Who may use which namespace: always decided here, from the peer's credentials. Its pools
  // are arenas of their own, so it comes before the tiers.
  auto policy = config->namespace_policy.empty()
                    ? Result<NamespacePolicy>(NamespacePolicy(::geteuid()))
                    : NamespacePolicy::Load(config->namespace_policy, ::geteuid());
  if (!policy.ok()) {
    spdlog::critical("{}", policy.status().ToString());
    return 1;
  }
  // A cluster member lends behind its peer listener and borrows through the remote tier.
  std::unique_ptr<Cluster> cluster;
  std::unique_ptr<Tier> remote;
  if (config->cluster.enabled()) {
    auto c = Cluster::Create(config->cluster);
    if (!c.ok()) {
      spdlog::critical("cannot set up the cluster: {}", c.status().ToString());
      return 1;
    }
    cluster = std::move(c).value();
    remote = cluster->TakeRemoteTier();
  }
  auto store = BuildStore(*config, policy->pools(), std::move(remote));
  if (!store.ok()) {
    spdlog::critical("cannot set up the tiers: {}", store.status().ToString());
    return 1;
  }
  std::uint64_t hbm_capacity = 0;
  for (const auto& t : (*store)->Stats().tiers) {
    if (t.tier.kind == TierKind::kHbm) hbm_capacity = t.tier.capacity;
  }
  std::unique_ptr<PersistJournal> journal;
  NvmeTier* kept_nvme = config->nvme.keep_files
                            ? dynamic_cast<NvmeTier*>((*store)->GetTier(TierKind::kNvme))
                            : nullptr;
  if (!config->persist_dir.empty()) {
    auto recovered = Recover(**store, *config, kept_nvme);
    if (!recovered.ok()) {
      spdlog::critical("{}", recovered.status().ToString());
      return 1;
    }
    journal = std::move(recovered).value();
  }
  PlanRegistry plans(store->get(), hbm_capacity);
  StoreService service(config->service, store->get());
  service.set_persist_journal(journal.get());
  service.set_plans(&plans);
  (*store)->SetQuotas(policy->quotas());
  service.set_policy(&*policy);
  transport::UnixServer server(config->transport, &service);
  service.set_transport(&server);
  if (Status s = server.Start(); !s.ok()) {
    spdlog::critical("cannot listen: {}", s.ToString());
    return 1;
  }
  (*store)->Start();
  plans.Start();
  if (cluster) {
    if (Status s = cluster->Start(); !s.ok()) {
      spdlog::critical("{}", s.ToString());
      server.Stop();
      plans.Stop();
      (*store)->Stop();
      return 1;
    }
    service.set_cluster(cluster.get());
  }
  MetricsServer metrics(config->metrics, [&service](wire::StatReply* r) { service.Stat(r); });
  if (!StartMetrics(metrics, *config)) {
    server.Stop();
    plans.Stop();
    (*store)->Stop();
    return 1;
  }
  spdlog::info("tierpoold {} listening on {} (dram {}, hbm {}, {} I/O thread{})", TIERPOOL_VERSION,
               config->transport.socket_path, FormatBytes(config->dram.capacity),
               FormatBytes(config->hbm.capacity), config->transport.io_threads,
               config->transport.io_threads == 1 ? "" : "s");
#ifdef TIERPOOL_MALLOC_NAME
  spdlog::info("memory allocator: {}", TIERPOOL_MALLOC_NAME);
#endif
  const int sig = WaitForStop(stop_signals);
  spdlog::info("signal {}: shutting down", sig);
  metrics.set_shutting_down();
  if (cluster) cluster->Stop();
  server.Stop();
  plans.Stop();
  int exit_code = 0;
  if (!config->persist_dir.empty()) {
    if (journal) journal->Close();
    exit_code = SaveOnShutdown(**store, config->persist_dir, kept_nvme);
  }
  metrics.Stop();
  (*store)->Stop();
  return exit_code;
}
