#include "client/stats_json.h"

#include <cstdio>

namespace tierpool {

using nlohmann::json;

nlohmann::json MetaJson(const ObjectMeta& m) {
  char sum[17];
  std::snprintf(sum, sizeof(sum), "%016llx", static_cast<unsigned long long>(m.checksum));
  return {{"namespace", m.ns},
          {"key", m.key},
          {"size", m.size},
          {"dtype", m.dtype},
          {"shape", m.shape},
          {"kind", ObjectKindName(m.kind)},
          {"durability", DurabilityName(m.durability)},
          {"checksum_xxh3", sum},
          {"tier", TierName(m.tier)},
          {"created_unix_ms", m.created_unix_ms},
          {"pins", m.pins}};
}

nlohmann::json StatsJson(const ServerStats& s) {
  json tiers = json::array();
  for (const auto& t : s.tiers) {
    tiers.push_back({{"tier", TierName(t.tier)},
                     {"capacity", t.capacity},
                     {"used_bytes", t.used_bytes},
                     {"object_count", t.object_count},
                     {"free_extents", t.free_extents},
                     {"largest_free_extent", t.largest_free_extent},
                     {"fragmentation", t.fragmentation},
                     {"high_watermark", t.high_watermark},
                     {"low_watermark", t.low_watermark},
                     {"pages_locked", t.pages_locked},
                     {"backend", t.backend},
                     {"failed_allocations", t.failed_allocations},
                     {"state", t.state},
                     {"read_errors", t.read_errors},
                     {"write_errors", t.write_errors},
                     {"checksum_failures", t.checksum_failures},
                     {"peak_used_bytes", t.peak_used_bytes}});
  }
  json counters = json::object();
  for (const auto& [n, v] : s.counters) counters[n] = v;
  json jobs = json::array();
  for (const auto& j : s.jobs) {
    json c = json::object();
    for (const auto& [n, v] : j.counters) c[n] = v;
    jobs.push_back({{"id", j.id},
                    {"namespace", j.ns},
                    {"name", j.name},
                    {"hbm_budget_bytes", j.hbm_budget_bytes},
                    {"iteration", j.iteration},
                    {"step", j.step},
                    {"pending_prefetches", j.pending_prefetches},
                    {"counters", c}});
  }
  json members = json::array();
  for (const auto& m : s.members) {
    members.push_back({{"node_id", m.node_id},
                       {"incarnation", m.incarnation},
                       {"peer_address", m.peer_address},
                       {"lend_bytes", m.lend_bytes},
                       {"lend_free", m.lend_free},
                       {"granted_to_us", m.granted_to_us},
                       {"used_by_us", m.used_by_us},
                       {"responsive", m.responsive},
                       {"failures", m.failures},
                       {"self", m.self},
                       {"transport", m.transport}});
  }
  return {{"server_version", s.server_version},
          {"uptime_ms", s.uptime_ms},
          {"tiers", tiers},
          {"counters", counters},
          {"jobs", jobs},
          {"members", members}};
}

}  // namespace tierpool
