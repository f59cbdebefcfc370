// StoreService's stat reply: what `tierpool stat` shows and /metrics renders, gathered from the
// store, the transport, the cluster, the namespace policy, the plans and the request latency
// histograms. The class and its locking: store/service.h.
#include "store/cluster.h"
#include "store/service.h"
#include "transport/wire_meta.h"

namespace tierpool {

namespace {

// Appends a named counter to a stat reply or a job's entry in it.
template <typename Message>
void AddCounter(Message* m, const std::string& name, std::uint64_t value) {
  auto* c = m->add_counters();
  c->set_name(name);
  c->set_value(value);
}

}  // namespace

void StoreService::Stat(wire::StatReply* reply) {
  const StoreStats s = store_->Stats();
  const CounterSink add = [reply](const std::string& name, std::uint64_t v) {
    AddCounter(reply, name, v);
  };
  AddTierStats(s, reply);
  AddStoreCounters(s, add);
  AddTransportCounters(add);
  if (journal_ != nullptr) journal_->VisitCounters(add);
  if (const Cluster* cluster = cluster_.load()) {
    cluster->VisitCounters(add);
    cluster->FillMembers(reply);
  }
  AddLinkCounters(s, add);
  AddNamespaceCounters(add);
  AddJobs(add, reply);
  reply->set_uptime_ms(
      static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                     std::chrono::steady_clock::now() - started_)
                                     .count()));
  reply->set_server_version(TIERPOOL_VERSION);
  AddLatencies(s, reply);
}

void StoreService::AddTierStats(const StoreStats& s, wire::StatReply* reply) const {
  for (const auto& t : s.tiers) {
    auto* w = reply->add_tiers();
    w->set_tier(static_cast<wire::Tier>(t.tier.kind));
    w->set_capacity(t.tier.capacity);
    w->set_used_bytes(t.tier.used_bytes);
    w->set_object_count(t.object_count);
    w->set_free_extents(t.tier.free_extents);
    w->set_largest_free_extent(t.tier.largest_free_extent);
    w->set_fragmentation(t.tier.fragmentation);
    w->set_high_watermark(t.watermarks.high);
    w->set_low_watermark(t.watermarks.low);
    w->set_pages_locked(t.tier.pages_locked);
    w->set_backend(t.tier.backend);
    w->set_failed_allocations(t.tier.failed_allocations);
    w->set_state(t.tier.state);
    w->set_state_why(t.tier.state_why);
    w->set_read_errors(t.tier.read_errors);
    w->set_write_errors(t.tier.write_errors);
    w->set_checksum_failures(t.tier.checksum_failures);
    w->set_peak_used_bytes(t.tier.peak_used_bytes);
  }
}

void StoreService::AddStoreCounters(const StoreStats& s, const CounterSink& add) const {
  add("objects", s.objects);
  add("reservations_open", s.reservations_open);
  add("leases_open", s.leases_open);
  add("puts", s.puts);
  add("bytes_put", s.bytes_put);
  add("gets", s.gets);
  add("get_misses", s.get_misses);
  add("deletes", s.deletes);
  add("evictions", s.evictions);
  add("demotions", s.demotions);
  add("promotions", s.promotions);
  add("migrations_aborted", s.migrations_aborted);
  add("reservations_overdue", s.reservations_overdue);
  add("leases_overdue", s.leases_overdue);
  add("clients_overdue", s.clients_overdue);
  add("client_limit_refusals", s.client_limit_refusals);
  add("object_limit_refusals", s.object_limit_refusals);
  add("resource_exhausted", s.resource_exhausted);
  add("sessions_cleaned", s.sessions_cleaned);
  add("spills", s.spills);
  add("spill_failures", s.spill_failures);
  add("nvme_reads", s.nvme_reads);
  add("nvme_read_failures", s.nvme_read_failures);
  add("corrupt_in_memory", s.corrupt_in_memory);
  add("clean_drops", s.clean_drops);
  add("drops_after_unpin", s.drops_after_unpin);
  add("drops_cancelled", s.drops_cancelled);
  add("plan_room_timeouts", s.plan_room_timeouts);
  add("relocations", s.relocations);
  add("relocated_bytes", s.relocated_bytes);
  add("quarantined", s.quarantined);
  add("copies_lost_with_peers", s.copies_lost_with_peers);
  add("guard_copies", s.guard_copies);
  add("copies_lost_read_elsewhere", s.copies_lost_read_elsewhere);
  add("copies_reported_lost", s.copies_reported_lost);
  add("copies_replaced", s.copies_replaced);
  add("quota_refusals", s.quota_refusals);
  add("commits_rejected", s.commits_rejected);
  add("reservations_staged", s.reservations_staged);
  add("staged_commits", s.staged_commits);
}

void StoreService::AddTransportCounters(const CounterSink& add) const {
  if (transport_ != nullptr) {
    auto t = transport_->stats();
    add("connections_accepted", t.connections_accepted);
    add("connections_active", t.connections_active);
    add("connections_refused", t.connections_refused);
    add("frames_received", t.frames_received);
    add("bad_frames", t.bad_frames);
    add("malformed_messages", t.malformed_messages);
    add("unknown_messages", t.unknown_messages);
    add("connections_refused_per_process", t.connections_refused_per_process);
    add("connections_refused_per_user", t.connections_refused_per_user);
    add("handshake_timeouts", t.handshake_timeouts);
    add("idle_timeouts", t.idle_timeouts);
    add("frame_timeouts", t.frame_timeouts);
    add("requests_on_workers", t.requests_on_workers);
    add("requests_moved_to_workers", t.requests_moved_to_workers);
    add("frame_bytes_buffered", t.frame_bytes_buffered);
    add("frame_buffer_waits", t.frame_buffer_waits);
    add("io_wakeups", t.io_wakeups);
    add("request_rings_open", t.request_rings_open);
    add("ring_requests", t.ring_requests);
    add("ring_doorbells", t.ring_doorbells);
  }
}

void StoreService::AddLinkCounters(const StoreStats& s, const CounterSink& add) const {
  // "link_<from>_<to>_<what>": /metrics reads the two tiers back out of the name as labels.
  for (const auto& l : s.links) {
    const std::string link =
        "link_" + std::string(TierName(l.from)) + "_" + std::string(TierName(l.to)) + "_";
    auto add_link = [&](const char* what, std::uint64_t v) { add(link + what, v); };
    add_link("bytes", l.bytes);
    add_link("completed", l.completed);
    add_link("failed", l.failed);
    add_link("cancelled", l.cancelled);
    add_link("deadline_misses", l.deadline_misses);
    add_link("busy_us", l.busy_us);
    add_link("queued", l.queued);
    add_link("inflight_bytes", l.inflight_bytes);
  }
}

void StoreService::AddNamespaceCounters(const CounterSink& add) const {
  // "ns_<namespace>_<what>", "pool_<pool>_<tier>_<what>": per namespace with a quota, per pool.
  if (policy_ != nullptr) {
    for (const auto& [ns, quota] : policy_->quotas()) {
      const NamespaceUsage u = store_->UsageOf(ns);
      add("ns_" + ns + "_bytes", u.bytes);
      add("ns_" + ns + "_objects", u.objects);
      add("ns_" + ns + "_quota_bytes", quota.max_bytes);
      add("ns_" + ns + "_quota_objects", quota.max_objects);
      for (TierKind k : {TierKind::kHbm, TierKind::kDram, TierKind::kNvme}) {
        const std::string tier(TierName(k));
        add("ns_" + ns + "_" + tier + "_bytes", u.tier_bytes[static_cast<int>(k)]);
        add("ns_" + ns + "_quota_" + tier + "_bytes", quota.max_tier_bytes[static_cast<int>(k)]);
      }
    }
    for (std::size_t i = 0; i < policy_->pools().size(); ++i) {
      const std::string& name = policy_->pools()[i].name;
      for (TierKind k : {TierKind::kHbm, TierKind::kDram}) {
        const PoolSpace room = store_->SpaceOf(k, static_cast<std::uint32_t>(i + 1));
        const std::string tier(TierName(k));
        add("pool_" + name + "_" + tier + "_capacity", room.capacity);
        add("pool_" + name + "_" + tier + "_used_bytes", room.used);
      }
    }
  }
}

void StoreService::AddJobs(const CounterSink& add, wire::StatReply* reply) const {
  if (plans_ != nullptr) {
    add("progress_reports_coalesced", plans_->reports_coalesced());
    for (const auto& j : plans_->Jobs()) {
      auto* w = reply->add_jobs();
      w->set_id(j.id);
      w->set_ns(j.ns);
      w->set_name(j.name);
      w->set_hbm_budget_bytes(j.hbm_budget);
      w->set_iteration(j.iteration);
      w->set_step(j.step);
      w->set_pending_prefetches(j.pending);
      VisitJobCounters(j.counters,
                       [w](const char* name, std::uint64_t v) { AddCounter(w, name, v); });
    }
  }
}

void StoreService::AddLatencies(const StoreStats& s, wire::StatReply* reply) const {
  auto add_histogram = [reply](const char* op, std::uint64_t size_le, const LatencySnapshot& snap) {
    auto* h = reply->add_latencies();
    h->set_op(op);
    h->set_size_le_bytes(size_le);
    for (auto b : kLatencyBoundsUs) h->add_bounds_us(b);
    for (auto c : snap.counts) h->add_counts(c);
    h->set_sum_us(snap.sum_us);
    h->set_count(snap.count);
    return h;
  };
  static constexpr const char* kOpNames[kLatencyOps] = {"put", "get", "reserve", "commit"};
  for (int op = 0; op < kLatencyOps; ++op) {
    for (std::size_t c = 0; c < kSizeClasses; ++c) {
      const LatencySnapshot snap = latency_[op][c].Read();
      if (snap.count == 0) continue;
      add_histogram(kOpNames[op], c < kSizeClassBounds.size() ? kSizeClassBounds[c] : 0, snap);
    }
  }
  for (const auto& l : s.links) {
    if (l.latency.count == 0) continue;
    auto* h = add_histogram("move", 0, l.latency);
    h->set_from_tier(std::string(TierName(l.from)));
    h->set_to_tier(std::string(TierName(l.to)));
  }
}

}  // namespace tierpool
