#include "store/metrics.h"

#include <nlohmann/json.hpp>

#include <charconv>
#include <cstdint>
#include <map>
#include <set>
#include <sstream>
#include <string_view>

#include "tierpool/types.h"

namespace tierpool {

namespace {

// Server counters that are levels, not counts since start.
const std::set<std::string_view> kGauges = {
    "objects",
    "reservations_open",
    "leases_open",
    "connections_active",
    "frame_bytes_buffered",
    "request_rings_open",
    "remote_objects_under_replicated",
    // The cluster's levels (store/cluster.cc): members, peers, what is lent now.
    "cluster_members",
    "remote_peers",
    "remote_peers_responsive",
    "remote_peers_ucx",
    "lend_capacity_bytes",
    "lent_bytes",
    "lent_regions",
    "lent_borrowers",
    "lend_borrowing_members",
};
// Counter names whose unit is not at an end of the name.
const std::map<std::string_view, std::string_view> kRenamed = {
    {"frame_bytes_buffered", "frame_buffered_bytes"},
};
// Job counters that are levels.
const std::set<std::string_view> kJobGauges = {"budget_peak_bytes", "hbm_peak_bytes",
                                               "outside_peak_bytes", "last_hbm_peak_bytes",
                                               "last_outside_peak_bytes"};
// Link counters that are levels.
const std::set<std::string_view> kLinkGauges = {"queued", "inflight_bytes"};

const std::map<std::string_view, std::string_view> kHelp = {
    {"tierpool_build_info", "the server's version, as a label"},
    {"tierpool_uptime_seconds", "seconds since the server started"},
    {"tierpool_tier_capacity_bytes", "bytes the tier may hold"},
    {"tierpool_tier_used_bytes", "bytes of the tier in use (objects and reservations)"},
    {"tierpool_tier_peak_used_bytes", "highest used bytes since start"},
    {"tierpool_tier_objects", "objects with a copy in the tier"},
    {"tierpool_tier_free_extents", "free extents of the tier's allocator"},
    {"tierpool_tier_largest_free_extent_bytes", "the largest allocation that can succeed now"},
    {"tierpool_tier_fragmentation_ratio", "1 - largest free extent / free bytes"},
    {"tierpool_tier_high_watermark_ratio", "used fraction above which the tier is drained"},
    {"tierpool_tier_low_watermark_ratio", "used fraction at which draining stops"},
    {"tierpool_tier_pages_locked", "1 when the tier's memory is page-locked"},
    {"tierpool_tier_state", "1 for the tier's current state (ok, full, degraded)"},
    {"tierpool_tier_failed_allocations_total", "allocations the tier refused"},
    {"tierpool_tier_read_errors_total", "failed reads from the tier's device"},
    {"tierpool_tier_write_errors_total", "failed writes to the tier's device"},
    {"tierpool_tier_checksum_failures_total", "bytes read back that failed their checksum"},
    {"tierpool_job_hbm_budget_bytes", "the registered plan's hbm budget"},
    {"tierpool_job_iteration", "the iteration the job last reported"},
    {"tierpool_job_step", "the step the job last reported"},
    {"tierpool_job_pending_prefetches", "prefetches waiting for room in the budget"},
    {"tierpool_request_duration_seconds",
     "server time per request by operation and size class (a batch once, by its total bytes)"},
    {"tierpool_move_duration_seconds", "time per move between tiers, from start to end"},
};

std::string EscapeLabel(std::string_view v) {
  std::string out;
  out.reserve(v.size());
  for (char c : v) {
    if (c == '\\' || c == '"') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

// A metric name from a counter name: letters, digits and underscores only.
std::string Sanitize(std::string_view v) {
  std::string out;
  for (char c : v) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
    out += ok ? c : '_';
  }
  return out;
}

using Labels = std::vector<std::pair<std::string, std::string>>;

// Families in order of first appearance, their samples together as the format requires.
class Exposition {
 public:
  void Add(const std::string& family, const char* type, const Labels& labels, double value) {
    AddSample(family, type, family, labels, value);
  }

  // A sample whose name differs from its family's (a histogram's _bucket, _sum, _count).
  void AddSample(const std::string& family, const char* type, const std::string& sample,
                 const Labels& labels, double value) {
    auto [it, fresh] = index_.try_emplace(family, families_.size());
    if (fresh) families_.push_back({family, type, {}});
    std::ostringstream line;
    line << sample;
    if (!labels.empty()) {
      line << '{';
      for (std::size_t i = 0; i < labels.size(); ++i) {
        line << (i ? "," : "") << labels[i].first << "=\"" << EscapeLabel(labels[i].second) << '"';
      }
      line << '}';
    }
    char num[32];
    auto [end, ec] = std::to_chars(num, num + sizeof(num), value);  // shortest exact form
    line << ' ' << std::string_view(num, static_cast<std::size_t>(end - num)) << '\n';
    families_[it->second].samples += line.str();
  }

  // A counter of the server's own: _total for counts, units moved to the end of the name.
  void AddCounter(std::string prefix, std::string_view name, bool gauge, const Labels& labels,
                  std::uint64_t value) {
    auto renamed = kRenamed.find(name);
    std::string n = Sanitize(renamed != kRenamed.end() ? renamed->second : name);
    double v = static_cast<double>(value);
    std::string unit;
    if (n.size() > 3 && n.compare(n.size() - 3, 3, "_us") == 0) {
      n.resize(n.size() - 3);
      unit = "_seconds";
      v /= 1e6;
    } else if (n.rfind("bytes_", 0) == 0) {
      n = n.substr(6);
      unit = "_bytes";
    } else if (n.size() > 6 && n.compare(n.size() - 6, 6, "_bytes") == 0) {
      n.resize(n.size() - 6);
      unit = "_bytes";
    }
    Add(prefix + n + unit + (gauge ? "" : "_total"), gauge ? "gauge" : "counter", labels, v);
  }

  std::string Text() const {
    std::string out;
    for (const auto& f : families_) {
      auto help = kHelp.find(f.name);
      out += "# HELP " + f.name + " " +
             (help != kHelp.end() ? std::string(help->second)
                                  : "see docs/operations.md (tierpool stat shows it too)") +
             "\n";
      out += "# TYPE " + f.name + " " + f.type + "\n";
      out += f.samples;
    }
    return out;
  }

 private:
  struct Family {
    std::string name;
    const char* type;
    std::string samples;
  };
  std::vector<Family> families_;
  std::map<std::string, std::size_t> index_;
};

std::string FormatDouble(double v) {
  char num[32];
  auto [end, ec] = std::to_chars(num, num + sizeof(num), v);
  return std::string(num, static_cast<std::size_t>(end - num));
}

void AddHistogram(Exposition& e, const wire::LatencyHistogram& h) {
  const bool move = h.op() == "move";
  const std::string family =
      move ? "tierpool_move_duration_seconds" : "tierpool_request_duration_seconds";
  Labels labels =
      move ? Labels{{"from", h.from_tier()}, {"to", h.to_tier()}}
           : Labels{{"op", h.op()},
                    {"size_le_bytes", h.size_le_bytes() == 0 ? std::string("+Inf")
                                                             : std::to_string(h.size_le_bytes())}};
  std::uint64_t cumulative = 0;
  for (int i = 0; i < h.counts_size(); ++i) {
    cumulative += h.counts(i);
    Labels with_le = labels;
    with_le.emplace_back("le", i < h.bounds_us_size()
                                   ? FormatDouble(static_cast<double>(h.bounds_us(i)) / 1e6)
                                   : std::string("+Inf"));
    e.AddSample(family, "histogram", family + "_bucket", with_le, static_cast<double>(cumulative));
  }
  e.AddSample(family, "histogram", family + "_sum", labels, static_cast<double>(h.sum_us()) / 1e6);
  e.AddSample(family, "histogram", family + "_count", labels, static_cast<double>(h.count()));
}

std::string TierLabel(wire::Tier t) { return std::string(TierName(static_cast<TierKind>(t))); }

// "link_<from>_<to>_<what>", "ns_<namespace>_<what>": counters whose names carry a label.
bool AddLinkCounter(Exposition& e, const std::string& name, std::uint64_t v) {
  if (name.rfind("link_", 0) != 0) return false;
  for (int f = 0; f < kTierKindCount; ++f) {
    for (int t = 0; t < kTierKindCount; ++t) {
      const std::string from(TierName(static_cast<TierKind>(f)));
      const std::string to(TierName(static_cast<TierKind>(t)));
      const std::string p = "link_" + from + "_" + to + "_";
      if (name.rfind(p, 0) != 0) continue;
      const std::string what = name.substr(p.size());
      e.AddCounter("tierpool_link_", what, kLinkGauges.count(what) != 0,
                   {{"from", from}, {"to", to}}, v);
      return true;
    }
  }
  return false;
}

bool AddNamespaceCounter(Exposition& e, const std::string& name, std::uint64_t v) {
  if (name.rfind("ns_", 0) != 0) return false;
  for (const char* what : {"_quota_bytes", "_quota_objects", "_bytes", "_objects"}) {
    const std::string w = what;
    if (name.size() <= 3 + w.size() || name.compare(name.size() - w.size(), w.size(), w) != 0) {
      continue;
    }
    const std::string ns = name.substr(3, name.size() - 3 - w.size());
    e.Add("tierpool_namespace" + w, "gauge", {{"namespace", ns}}, static_cast<double>(v));
    return true;
  }
  return false;
}

}  // namespace

std::string PrometheusText(const wire::StatReply& stat) {
  Exposition e;
  e.Add("tierpool_build_info", "gauge", {{"version", stat.server_version()}}, 1);
  e.Add("tierpool_uptime_seconds", "gauge", {}, static_cast<double>(stat.uptime_ms()) / 1e3);
  for (const auto& t : stat.tiers()) {
    const Labels l = {{"tier", TierLabel(t.tier())}};
    auto gauge = [&](const char* n, double v) { e.Add(n, "gauge", l, v); };
    auto counter = [&](const char* n, double v) { e.Add(n, "counter", l, v); };
    gauge("tierpool_tier_capacity_bytes", static_cast<double>(t.capacity()));
    gauge("tierpool_tier_used_bytes", static_cast<double>(t.used_bytes()));
    gauge("tierpool_tier_peak_used_bytes", static_cast<double>(t.peak_used_bytes()));
    gauge("tierpool_tier_objects", static_cast<double>(t.object_count()));
    gauge("tierpool_tier_free_extents", static_cast<double>(t.free_extents()));
    gauge("tierpool_tier_largest_free_extent_bytes", static_cast<double>(t.largest_free_extent()));
    gauge("tierpool_tier_fragmentation_ratio", t.fragmentation());
    gauge("tierpool_tier_high_watermark_ratio", t.high_watermark());
    gauge("tierpool_tier_low_watermark_ratio", t.low_watermark());
    gauge("tierpool_tier_pages_locked", t.pages_locked() ? 1 : 0);
    e.Add("tierpool_tier_state", "gauge",
          {{"tier", TierLabel(t.tier())}, {"state", t.state().empty() ? "ok" : t.state()}}, 1);
    counter("tierpool_tier_failed_allocations_total", static_cast<double>(t.failed_allocations()));
    counter("tierpool_tier_read_errors_total", static_cast<double>(t.read_errors()));
    counter("tierpool_tier_write_errors_total", static_cast<double>(t.write_errors()));
    counter("tierpool_tier_checksum_failures_total", static_cast<double>(t.checksum_failures()));
  }
  for (const auto& c : stat.counters()) {
    if (AddLinkCounter(e, c.name(), c.value()) || AddNamespaceCounter(e, c.name(), c.value())) {
      continue;
    }
    e.AddCounter("tierpool_", c.name(), kGauges.count(c.name()) != 0, {}, c.value());
  }
  for (const auto& h : stat.latencies()) AddHistogram(e, h);
  for (const auto& j : stat.jobs()) {
    const Labels l = {{"job", j.name()}, {"namespace", j.ns()}, {"id", std::to_string(j.id())}};
    e.Add("tierpool_job_hbm_budget_bytes", "gauge", l, static_cast<double>(j.hbm_budget_bytes()));
    e.Add("tierpool_job_iteration", "gauge", l, static_cast<double>(j.iteration()));
    e.Add("tierpool_job_step", "gauge", l, static_cast<double>(j.step()));
    e.Add("tierpool_job_pending_prefetches", "gauge", l,
          static_cast<double>(j.pending_prefetches()));
    for (const auto& c : j.counters()) {
      e.AddCounter("tierpool_job_", c.name(), kJobGauges.count(c.name()) != 0, l, c.value());
    }
  }
  return e.Text();
}

Health CheckHealth(const wire::StatReply& stat, bool shutting_down) {
  Health h;
  if (shutting_down) h.reasons.push_back("the server is shutting down");
  for (const auto& t : stat.tiers()) {
    if (t.state() == "degraded") {
      h.reasons.push_back(TierLabel(t.tier()) +
                          " is degraded: " + (t.state_why().empty() ? "" : t.state_why() + "; ") +
                          std::to_string(t.read_errors()) + " read errors, " +
                          std::to_string(t.write_errors()) + " write errors, " +
                          std::to_string(t.checksum_failures()) + " checksum failures");
    }
  }
  h.ok = h.reasons.empty();
  h.status = shutting_down ? "shutting_down" : h.ok ? "ok" : "degraded";
  return h;
}

std::string Health::ToJson() const {
  return nlohmann::json{{"status", status}, {"reasons", reasons}}.dump();
}

}  // namespace tierpool
