// Who may use which namespace, decided by the server from the kernel's word on who the peer is
// (SO_PEERCRED), not claimed by the client; and how much each namespace may hold.
//
// Without a policy file, the server's own user (and root) may use every namespace and nobody
// else any: the socket is 0600 by default, so that is who can connect anyway. A policy file
// (`tierpoold --namespace-policy FILE`, JSON) grants namespaces to other users and groups and
// sets pools and quotas:
//
//   {"grants": [{"uid": 1001, "namespaces": ["bob", "bob-*"]},
//               {"gid": 2000, "namespaces": ["*"]}],
//    "pools":  {"bob": {"namespaces": ["bob", "bob-*"], "dram": "4G", "hbm": "1G"}},
//    "quotas": {"bob": {"bytes": "8G", "objects": 100000, "hbm": "512M", "nvme": "64G"}}}
//
// A pattern is a namespace, a prefix ending in '*', or '*' for all. A gid grant matches the
// peer's primary group or any of its supplementary groups (SO_PEERGROUPS). The server's own
// user keeps every namespace whatever the file says.
//
// Pools isolate memory, not just names: a pool's namespaces live in arenas of their own, carved
// out of dram (and hbm), and a client is sent the descriptors of a pool only when its grants
// cover every namespace of the pool; the shared arenas (every namespace in no pool) only when it
// may use every namespace. A client that may use a namespace whose arenas it does not map gets
// its bytes through the server's copies. Pools' patterns may not overlap.
//
// Immutable once built: safe to share between threads.
#pragma once

#include <sys/types.h>

#include <array>
#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/status.h"
#include "tierpool/types.h"
#include "tiers/tier.h"
#include "transport/unix_server.h"

namespace tierpool {

struct NamespaceQuota {
  std::uint64_t max_bytes = 0;    // the namespace's objects and open reservations; 0: no limit
  std::uint64_t max_objects = 0;  // 0: no limit
  // Bytes its copies may take in each tier (by TierKind; 0: no limit). A put over the hbm limit
  // goes to dram, one over the dram limit is refused; a move into a tier over its limit does
  // not start (the copy stays where it is).
  std::array<std::uint64_t, kTierKindCount> max_tier_bytes{};
};

struct NamespacePool {
  std::string name;
  std::vector<std::string> patterns;
  std::uint64_t dram_bytes = 0;  // its own dram arena (> 0)
  std::uint64_t hbm_bytes = 0;   // its own hbm region (0: its objects never enter hbm)
};

// The pool a namespace lives in: i + 1 for pools[i], kSharedPool when none matches.
std::uint32_t PoolOf(const std::vector<NamespacePool>& pools, const std::string& ns);

class NamespacePolicy {
 public:
  explicit NamespacePolicy(uid_t server_uid) : server_uid_(server_uid) {}
  static Result<NamespacePolicy> Load(const std::string& path, uid_t server_uid);
  static Result<NamespacePolicy> Parse(const std::string& json, uid_t server_uid);

  bool Allows(const transport::PeerCredentials& peer, const std::string& ns) const;
  // Whether the peer may map pool p's arenas (kSharedPool: the shared ones).
  bool MapsPool(const transport::PeerCredentials& peer, std::uint32_t pool) const;
  // Whether the peer maps the arenas ns's objects live in.
  bool MapsNamespace(const transport::PeerCredentials& peer, const std::string& ns) const {
    return Unrestricted(peer) || MapsPool(peer, PoolOf(pools_, ns));
  }
  const std::unordered_map<std::string, NamespaceQuota>& quotas() const { return quotas_; }
  const std::vector<NamespacePool>& pools() const { return pools_; }

 private:
  struct Grant {
    bool by_uid = true;
    std::uint32_t id = 0;
    std::vector<std::string> patterns;
  };
  static bool Matches(const std::string& pattern, const std::string& ns);
  // Every namespace that `pattern` matches, `grant` matches too.
  static bool Covers(const std::string& grant, const std::string& pattern);
  // Some namespace matches both.
  static bool Overlap(const std::string& a, const std::string& b);
  bool Unrestricted(const transport::PeerCredentials& peer) const;
  // The patterns of the grants that apply to the peer.
  std::vector<const std::string*> PatternsOf(const transport::PeerCredentials& peer) const;
  static Result<NamespacePool> ParsePool(const std::string& name, const nlohmann::json& p);
  friend std::uint32_t PoolOf(const std::vector<NamespacePool>& pools, const std::string& ns);

  uid_t server_uid_;
  std::vector<Grant> grants_;
  std::unordered_map<std::string, NamespaceQuota> quotas_;
  std::vector<NamespacePool> pools_;
};

}  // namespace tierpool
