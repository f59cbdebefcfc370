#include "store/namespace_policy.h"

#include <nlohmann/json.hpp>

#include "common/posix.h"
#include "common/units.h"

namespace tierpool {

namespace {

Status CheckPattern(const nlohmann::json& ns) {
  if (!ns.is_string() || ns.get<std::string>().empty()) {
    return Status::InvalidArgument("namespace patterns are non-empty strings");
  }
  const std::string pattern = ns.get<std::string>();
  if (pattern.find('*') != std::string::npos && pattern.find('*') != pattern.size() - 1) {
    return Status::InvalidArgument("'*' may only end a pattern: " + pattern);
  }
  return Status::Ok();
}

// A size: a number of bytes or a string with a unit ("4G").
Result<std::uint64_t> ParseSize(const nlohmann::json& value, const std::string& what) {
  if (value.is_number_unsigned()) return value.get<std::uint64_t>();
  if (value.is_string()) {
    auto b = ParseByteSize(value.get<std::string>());
    if (!b.ok()) return Status::InvalidArgument(what + ": " + b.status().message());
    return *b;
  }
  return Status::InvalidArgument(what + " must be a size");
}

}  // namespace

Result<NamespacePolicy> NamespacePolicy::Load(const std::string& path, uid_t server_uid) {
  auto text = ReadFileUpTo(path, 1u << 20);
  if (!text.ok()) {
    return Status(text.status().code(), "namespace policy: " + text.status().message());
  }
  auto p = Parse(*text, server_uid);
  if (!p.ok()) return Status::InvalidArgument(path + ": " + p.status().message());
  return p;
}

Result<NamespacePolicy> NamespacePolicy::Parse(const std::string& text, uid_t server_uid) {
  using nlohmann::json;
  NamespacePolicy policy(server_uid);
  json doc = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded() || !doc.is_object()) {
    return Status::InvalidArgument("namespace policy is not a JSON object");
  }
  for (const auto& [field, value] : doc.items()) {
    if (field != "grants" && field != "quotas" && field != "pools") {
      return Status::InvalidArgument("unknown field '" + field + "' (grants, pools, quotas)");
    }
  }
  if (doc.contains("grants")) {
    if (!doc["grants"].is_array()) return Status::InvalidArgument("grants must be a list");
    for (const auto& g : doc["grants"]) {
      if (!g.is_object()) return Status::InvalidArgument("each grant must be an object");
      Grant grant;
      const bool uid = g.contains("uid"), gid = g.contains("gid");
      if (uid == gid) return Status::InvalidArgument("a grant names exactly one of uid and gid");
      const json& id = uid ? g["uid"] : g["gid"];
      if (!id.is_number_unsigned() || id.get<std::uint64_t>() > 0xffffffffu) {
        return Status::InvalidArgument("uid and gid must be unsigned 32-bit numbers");
      }
      grant.by_uid = uid;
      grant.id = id.get<std::uint32_t>();
      if (!g.contains("namespaces") || !g["namespaces"].is_array()) {
        return Status::InvalidArgument("a grant needs a list of namespaces");
      }
      for (const auto& ns : g["namespaces"]) {
        TIERPOOL_RETURN_IF_ERROR(CheckPattern(ns));
        grant.patterns.push_back(ns.get<std::string>());
      }
      policy.grants_.push_back(std::move(grant));
    }
  }
  if (doc.contains("quotas")) {
    if (!doc["quotas"].is_object()) return Status::InvalidArgument("quotas must be an object");
    for (const auto& [ns, q] : doc["quotas"].items()) {
      if (!q.is_object()) return Status::InvalidArgument("quota of " + ns + " must be an object");
      NamespaceQuota quota;
      for (const auto& [field, value] : q.items()) {
        const std::string what = "quota " + field + " of " + ns;
        if (field == "bytes") {
          auto b = ParseSize(value, what);
          if (!b.ok()) return b.status();
          quota.max_bytes = *b;
        } else if (field == "hbm" || field == "dram" || field == "nvme") {
          auto b = ParseSize(value, what);
          if (!b.ok()) return b.status();
          const TierKind t = field == "hbm"    ? TierKind::kHbm
                             : field == "dram" ? TierKind::kDram
                                               : TierKind::kNvme;
          quota.max_tier_bytes[static_cast<int>(t)] = *b;
        } else if (field == "objects") {
          if (!value.is_number_unsigned()) {
            return Status::InvalidArgument("quota objects of " + ns + " must be a count");
          }
          quota.max_objects = value.get<std::uint64_t>();
        } else {
          return Status::InvalidArgument("unknown quota field '" + field +
                                         "' (bytes, objects, hbm, dram, nvme)");
        }
      }
      policy.quotas_[ns] = quota;
    }
  }
  if (doc.contains("pools")) {
    if (!doc["pools"].is_object()) return Status::InvalidArgument("pools must be an object");
    for (const auto& [name, p] : doc["pools"].items()) {
      auto pool = ParsePool(name, p);
      if (!pool.ok()) return pool.status();
      // A namespace lives in one pool: no two pools may claim one.
      for (const NamespacePool& other : policy.pools_) {
        for (const auto& a : other.patterns) {
          for (const auto& b : pool->patterns) {
            if (Overlap(a, b)) {
              return Status::InvalidArgument("pools " + other.name + " and " + name +
                                             " overlap: '" + a + "' and '" + b + "'");
            }
          }
        }
      }
      policy.pools_.push_back(std::move(pool).value());
    }
  }
  return policy;
}

Result<NamespacePool> NamespacePolicy::ParsePool(const std::string& name, const nlohmann::json& p) {
  if (!p.is_object()) return Status::InvalidArgument("pool " + name + " must be an object");
  NamespacePool pool;
  pool.name = name;
  for (const auto& [field, value] : p.items()) {
    const std::string what = "pool " + name + ": " + field;
    if (field == "namespaces") {
      if (!value.is_array() || value.empty()) {
        return Status::InvalidArgument(what + " must be a non-empty list");
      }
      for (const auto& ns : value) {
        TIERPOOL_RETURN_IF_ERROR(CheckPattern(ns));
        pool.patterns.push_back(ns.get<std::string>());
      }
    } else if (field == "dram" || field == "hbm") {
      auto b = ParseSize(value, what);
      if (!b.ok()) return b.status();
      (field == "dram" ? pool.dram_bytes : pool.hbm_bytes) = *b;
    } else {
      return Status::InvalidArgument("unknown pool field '" + field + "' (namespaces, dram, hbm)");
    }
  }
  if (pool.patterns.empty()) return Status::InvalidArgument("pool " + name + " names no namespace");
  if (pool.dram_bytes == 0) return Status::InvalidArgument("pool " + name + " needs dram bytes");
  return pool;
}

std::uint32_t PoolOf(const std::vector<NamespacePool>& pools, const std::string& ns) {
  for (std::size_t i = 0; i < pools.size(); ++i) {
    for (const auto& p : pools[i].patterns) {
      if (NamespacePolicy::Matches(p, ns)) return static_cast<std::uint32_t>(i + 1);
    }
  }
  return kSharedPool;
}

bool NamespacePolicy::Covers(const std::string& grant, const std::string& pattern) {
  const bool grant_prefix = grant.back() == '*', pattern_prefix = pattern.back() == '*';
  if (!grant_prefix) return !pattern_prefix && grant == pattern;
  // Every namespace the pattern matches starts with the pattern's text (less its '*').
  return pattern.compare(0, grant.size() - 1, grant, 0, grant.size() - 1) == 0 &&
         pattern.size() >= grant.size() - (pattern_prefix ? 0 : 1);
}

bool NamespacePolicy::Overlap(const std::string& a, const std::string& b) {
  const bool ap = a.back() == '*', bp = b.back() == '*';
  if (!ap && !bp) return a == b;
  if (ap && bp) {
    const std::size_t n = std::min(a.size(), b.size()) - 1;
    return a.compare(0, n, b, 0, n) == 0;
  }
  return Matches(ap ? a : b, ap ? b : a);
}

bool NamespacePolicy::Unrestricted(const transport::PeerCredentials& peer) const {
  return peer.uid == server_uid_ || peer.uid == 0;
}

std::vector<const std::string*> NamespacePolicy::PatternsOf(
    const transport::PeerCredentials& peer) const {
  std::vector<const std::string*> out;
  for (const Grant& g : grants_) {
    if (g.by_uid ? peer.uid != g.id : !peer.InGroup(g.id)) continue;
    for (const auto& p : g.patterns) out.push_back(&p);
  }
  return out;
}

bool NamespacePolicy::MapsPool(const transport::PeerCredentials& peer, std::uint32_t pool) const {
  if (Unrestricted(peer)) return true;
  if (pool > pools_.size()) return false;
  const auto granted = PatternsOf(peer);
  auto covered = [&](const std::string& pattern) {
    for (const std::string* g : granted) {
      if (Covers(*g, pattern)) return true;
    }
    return false;
  };
  // The shared arenas hold every namespace in no pool: only a peer that may use them all.
  if (pool == kSharedPool) return covered("*");
  for (const auto& p : pools_[pool - 1].patterns) {
    if (!covered(p)) return false;
  }
  return true;
}

bool NamespacePolicy::Matches(const std::string& pattern, const std::string& ns) {
  if (!pattern.empty() && pattern.back() == '*') {
    return ns.compare(0, pattern.size() - 1, pattern, 0, pattern.size() - 1) == 0;
  }
  return pattern == ns;
}

bool NamespacePolicy::Allows(const transport::PeerCredentials& peer, const std::string& ns) const {
  if (Unrestricted(peer)) return true;
  for (const std::string* p : PatternsOf(peer)) {
    if (Matches(*p, ns)) return true;
  }
  return false;
}

}  // namespace tierpool
