#include "store/namespace_policy.h"

#include <nlohmann/json.hpp>

#include "common/posix.h"
#include "common/units.h"

namespace tierpool {

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
    if (field != "grants" && field != "quotas") {
      return Status::InvalidArgument("unknown field '" + field + "' (grants, quotas)");
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
        if (!ns.is_string() || ns.get<std::string>().empty()) {
          return Status::InvalidArgument("namespace patterns are non-empty strings");
        }
        const std::string pattern = ns.get<std::string>();
        if (pattern.find('*') != std::string::npos && pattern.find('*') != pattern.size() - 1) {
          return Status::InvalidArgument("'*' may only end a pattern: " + pattern);
        }
        grant.patterns.push_back(pattern);
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
        if (field == "bytes") {
          if (value.is_number_unsigned()) {
            quota.max_bytes = value.get<std::uint64_t>();
          } else if (value.is_string()) {
            auto b = ParseByteSize(value.get<std::string>());
            if (!b.ok())
              return Status::InvalidArgument("quota of " + ns + ": " + b.status().message());
            quota.max_bytes = *b;
          } else {
            return Status::InvalidArgument("quota bytes of " + ns + " must be a size");
          }
        } else if (field == "objects") {
          if (!value.is_number_unsigned()) {
            return Status::InvalidArgument("quota objects of " + ns + " must be a count");
          }
          quota.max_objects = value.get<std::uint64_t>();
        } else {
          return Status::InvalidArgument("unknown quota field '" + field + "' (bytes, objects)");
        }
      }
      policy.quotas_[ns] = quota;
    }
  }
  return policy;
}

bool NamespacePolicy::Matches(const std::string& pattern, const std::string& ns) {
  if (!pattern.empty() && pattern.back() == '*') {
    return ns.compare(0, pattern.size() - 1, pattern, 0, pattern.size() - 1) == 0;
  }
  return pattern == ns;
}

bool NamespacePolicy::Allows(const transport::PeerCredentials& peer, const std::string& ns) const {
  if (peer.uid == server_uid_ || peer.uid == 0) return true;
  for (const Grant& g : grants_) {
    if (g.by_uid ? peer.uid != g.id : !peer.InGroup(g.id)) continue;
    for (const auto& p : g.patterns) {
      if (Matches(p, ns)) return true;
    }
  }
  return false;
}

}  // namespace tierpool
