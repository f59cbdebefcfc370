// Who may use which namespace, decided by the server from the kernel's word on who the peer is
// (SO_PEERCRED), not claimed by the client; and how much each namespace may hold.
//
// Without a policy file, the server's own user (and root) may use every namespace and nobody
// else any: the socket is 0600 by default, so that is who can connect anyway. A policy file
// (`tierpoold --namespace-policy FILE`, JSON) grants namespaces to other users and groups and
// sets quotas:
//
//   {"grants": [{"uid": 1001, "namespaces": ["bob", "bob-*"]},
//               {"gid": 2000, "namespaces": ["*"]}],
//    "quotas": {"bob": {"bytes": "8G", "objects": 100000}}}
//
// A pattern is a namespace, a prefix ending in '*', or '*' for all. A gid grant matches the
// peer's primary group or any of its supplementary groups (SO_PEERGROUPS). The server's own
// user keeps every namespace whatever the file says.
//
// Immutable once built: safe to share between threads.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/status.h"
#include "transport/unix_server.h"

namespace tierpool {

struct NamespaceQuota {
  std::uint64_t max_bytes = 0;    // the namespace's objects and open reservations; 0: no limit
  std::uint64_t max_objects = 0;  // 0: no limit
};

class NamespacePolicy {
 public:
  explicit NamespacePolicy(uid_t server_uid) : server_uid_(server_uid) {}
  static Result<NamespacePolicy> Load(const std::string& path, uid_t server_uid);
  static Result<NamespacePolicy> Parse(const std::string& json, uid_t server_uid);

  bool Allows(const transport::PeerCredentials& peer, const std::string& ns) const;
  const std::unordered_map<std::string, NamespaceQuota>& quotas() const { return quotas_; }

 private:
  struct Grant {
    bool by_uid = true;
    std::uint32_t id = 0;
    std::vector<std::string> patterns;
  };
  static bool Matches(const std::string& pattern, const std::string& ns);

  uid_t server_uid_;
  std::vector<Grant> grants_;
  std::unordered_map<std::string, NamespaceQuota> quotas_;
};

}  // namespace tierpool
