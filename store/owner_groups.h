// Which process and user each connection (owner) belongs to, from its peer credentials: the
// per-process and per-user limits on open reservations sum their connections' holdings
// (store/object_store_admission.cc). Three connections of one process, each within its own
// share, held all of dram before these (issue #76).
//
// Thread safety: every method takes the table's own mutex; it is a leaf lock.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <vector>

namespace tierpool {

class OwnerGroups {
 public:
  struct Identity {
    pid_t pid = 0;
    uid_t uid = 0;
  };
  void Set(std::uint64_t owner, Identity who) {
    std::lock_guard lock(mu_);
    owners_[owner] = who;
  }
  void Erase(std::uint64_t owner) {
    std::lock_guard lock(mu_);
    owners_.erase(owner);
  }
  std::optional<Identity> Of(std::uint64_t owner) const {
    std::lock_guard lock(mu_);
    auto it = owners_.find(owner);
    if (it == owners_.end()) return std::nullopt;
    return it->second;
  }
  // The owners of the same process (same_process) or of the same user, `owner` included.
  std::vector<std::uint64_t> Like(const Identity& who, bool same_process) const {
    std::vector<std::uint64_t> out;
    std::lock_guard lock(mu_);
    for (const auto& [o, id] : owners_) {
      if (same_process ? id.pid == who.pid : id.uid == who.uid) out.push_back(o);
    }
    return out;
  }

 private:
  mutable std::mutex mu_;
  std::unordered_map<std::uint64_t, Identity> owners_;  // guarded by mu_
};

}  // namespace tierpool
