#include "store/membership.h"

#include <chrono>

#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

#include "common/units.h"
#include "transport/peer_auth.h"

namespace tierpool {

using json = nlohmann::json;

Status MembershipConfig::validate() const {
  if (etcd.empty()) return Status::InvalidArgument("--etcd is needed to join a cluster");
  TIERPOOL_RETURN_IF_ERROR(EtcdClient::Create(etcd).status());
  if (cluster.empty() || cluster.size() > 128 || cluster.find('/') != std::string::npos) {
    return Status::InvalidArgument("--cluster must be 1 to 128 characters without '/'");
  }
  if (node_id.empty() || node_id.size() > 255 || node_id.find('/') != std::string::npos) {
    return Status::InvalidArgument("--node-id must be 1 to 255 characters without '/'");
  }
  if (peer_address.size() > 300) {  // what the other nodes take (Decode)
    return Status::InvalidArgument("--peer-advertise must be at most 300 characters");
  }
  if (ttl_s < 2 || ttl_s > 3600)
    return Status::InvalidArgument("the member TTL must be 2 to 3600 s");
  return Status::Ok();
}

Result<std::unique_ptr<Membership>> Membership::Create(MembershipConfig config,
                                                       MembershipCallbacks callbacks) {
  TIERPOOL_RETURN_IF_ERROR(config.validate());
  auto etcd = EtcdClient::Create(config.etcd, config.etcd_timeout_ms);
  if (!etcd.ok()) return etcd.status();
  return std::unique_ptr<Membership>(
      new Membership(std::move(config), std::move(callbacks), std::move(etcd).value()));
}

Membership::Membership(MembershipConfig config, MembershipCallbacks callbacks, EtcdClient etcd)
    : config_(std::move(config)),
      callbacks_(std::move(callbacks)),
      etcd_(etcd),
      watch_etcd_(etcd) {}

Membership::~Membership() { Stop(); }

std::string Membership::Encode(const RemoteMember& m) {
  return json{{"node_id", m.node_id},
              {"incarnation", std::to_string(m.incarnation)},
              {"peer_address", m.address},
              {"lend_bytes", m.lend_bytes},
              {"borrows", m.borrows}}
      .dump();
}

Result<RemoteMember> Membership::Decode(const std::string& value) {
  json j = json::parse(value, nullptr, false);
  if (j.is_discarded() || !j.is_object())
    return Status::InvalidArgument("member record is not JSON");
  RemoteMember m;
  try {
    m.node_id = j.at("node_id").get<std::string>();
    m.incarnation = std::stoull(j.at("incarnation").get<std::string>());
    m.address = j.at("peer_address").get<std::string>();
    m.lend_bytes = j.at("lend_bytes").get<std::uint64_t>();
    // Absent in the records of releases before it: those nodes all borrowed.
    m.borrows = j.value("borrows", true);
  } catch (const std::exception& e) {
    return Status::InvalidArgument(std::string("member record: ") + e.what());
  }
  if (m.node_id.empty() || m.incarnation == 0) {
    return Status::InvalidArgument("member record without node id or incarnation");
  }
  // What --node-id allows, and an address no longer than a host name and a port.
  if (m.node_id.size() > 255 || m.node_id.find('/') != std::string::npos ||
      m.address.size() > 300) {
    return Status::InvalidArgument("member record with a node id or address out of bounds");
  }
  return m;
}

std::optional<std::string> Membership::NodeOfKey(const std::string& prefix,
                                                 const std::string& key) {
  if (key.size() <= prefix.size() || key.compare(0, prefix.size(), prefix) != 0) {
    return std::nullopt;
  }
  return key.substr(prefix.size());
}

Result<RemoteMember> Membership::DecodeAt(const std::string& prefix, const std::string& key,
                                          const std::string& value) {
  auto m = Decode(value);
  if (!m.ok()) return m.status();
  if (NodeOfKey(prefix, key) != m->node_id) {
    return Status::InvalidArgument("member record of " + m->node_id + " under another key");
  }
  return m;
}

Status Membership::Register(std::uint64_t incarnation) {
  auto lease = etcd_.GrantLease(config_.ttl_s);
  if (!lease.ok()) return lease.status();
  const RemoteMember self = Self(incarnation != 0 ? incarnation : transport::RandomIncarnation());
  if (Status s = etcd_.Put(prefix() + config_.node_id, Encode(self), *lease); !s.ok()) {
    (void)etcd_.Revoke(*lease);
    return s;
  }
  std::lock_guard lock(mu_);
  lease_ = *lease;
  incarnation_ = self.incarnation;
  return Status::Ok();
}

RemoteMember Membership::Self(std::uint64_t incarnation) const {
  return RemoteMember{config_.node_id, incarnation, config_.peer_address, config_.lend_bytes,
                      config_.borrows};
}

Status Membership::Start() {
  if (Status s = Register(config_.incarnation); !s.ok()) {
    return Status(s.code(), "cannot join cluster " + config_.cluster + " at " + config_.etcd +
                                ": " + s.message());
  }
  spdlog::info("joined cluster {} as {} (incarnation {:x}), lending {}", config_.cluster,
               config_.node_id, incarnation(), FormatBytes(config_.lend_bytes));
  keepalive_ = std::thread([this] { KeepAliveLoop(); });
  watch_ = std::thread([this] { WatchLoop(); });
  return Status::Ok();
}

void Membership::Stop() {
  {
    std::lock_guard lock(mu_);
    if (stopping_) return;
    stopping_ = true;
  }
  wake_.notify_all();
  watch_etcd_.CancelWatch();
  if (keepalive_.joinable()) keepalive_.join();
  if (watch_.joinable()) watch_.join();
  std::int64_t lease = 0;
  {
    std::lock_guard lock(mu_);
    lease = std::exchange(lease_, 0);
  }
  if (lease != 0) (void)etcd_.Revoke(lease);
}

std::vector<RemoteMember> Membership::Members() const {
  std::lock_guard lock(mu_);
  std::vector<RemoteMember> out;
  for (const auto& [id, m] : members_) out.push_back(m);
  return out;
}

std::uint64_t Membership::incarnation() const {
  std::lock_guard lock(mu_);
  return incarnation_;
}

void Membership::KeepAliveLoop() {
  const auto period = std::chrono::milliseconds(config_.ttl_s * 1000 / 3);
  int unlisted = 0;  // renewals in a row that found this node's record missing from the view
  std::unique_lock lock(mu_);
  while (!stopping_) {
    wake_.wait_for(lock, period, [this] { return stopping_; });
    if (stopping_) return;
    const std::int64_t lease = lease_;
    const std::uint64_t incarnation = incarnation_;
    const bool listed = members_.count(config_.node_id) != 0 &&
                        members_.at(config_.node_id).incarnation == incarnation;
    lock.unlock();
    bool lost = false;
    if (lease != 0) {
      auto ttl = etcd_.KeepAlive(lease);
      if (ttl.ok() && *ttl > 0) {
        // Our record gone while the lease lives (someone deleted the key; a watch that missed
        // it is read again within a renewal or two): put it back under the same lease.
        unlisted = listed ? 0 : unlisted + 1;
        if (unlisted >= 2) {
          spdlog::warn("the cluster record of {} is gone from etcd; writing it again",
                       config_.node_id);
          if (Status s = etcd_.Put(prefix() + config_.node_id, Encode(Self(incarnation)), lease);
              !s.ok()) {
            spdlog::warn("cannot write the cluster record again: {}", s.ToString());
          }
          unlisted = 0;
        }
        // The same view again, so that time-based decisions (a lender's grace period for a
        // borrower that left) are taken even when nobody joins or leaves.
        std::lock_guard cb(callback_mu_);
        Publish();
      } else if (ttl.ok()) {
        lost = true;  // etcd says the lease is gone (it expired, or etcd restarted empty)
      } else {
        // etcd does not answer. Nobody sees anyone leave while that lasts, and a restarted
        // etcd keeps its leases (and extends them), so nothing is dropped: keep asking.
        spdlog::warn("cannot renew the cluster lease: {}", ttl.status().ToString());
      }
    }
    if (lost) {
      spdlog::error("the cluster lease of {} lapsed; registering again", config_.node_id);
      std::lock_guard cb(callback_mu_);
      if (callbacks_.lost) callbacks_.lost();
    }
    if (lost || lease == 0) {
      {
        std::lock_guard relock(mu_);
        lease_ = 0;
      }
      // The same incarnation: this process lived on, and so did what it holds. Peers judge it
      // gone by its silence on the peer link or a restart, not by its record in etcd.
      if (Status s = Register(incarnation); s.ok()) {
        spdlog::info("rejoined cluster {} as {} (incarnation {:x})", config_.cluster,
                     config_.node_id, incarnation);
        unlisted = 0;
      }
    }
    lock.lock();
  }
}

void Membership::Publish() {
  if (callbacks_.members) callbacks_.members(Members());
}

void Membership::WatchLoop() {
  const std::string pfx = prefix();
  auto stopped = [this] {
    std::lock_guard lock(mu_);
    return stopping_;
  };
  while (!stopped()) {
    std::int64_t revision = 0;
    auto kvs = watch_etcd_.RangePrefix(pfx, &revision);
    if (kvs.ok()) {
      {
        std::lock_guard lock(mu_);
        members_.clear();
        for (const auto& kv : *kvs) {
          if (auto m = DecodeAt(pfx, kv.key, kv.value); m.ok()) {
            members_[m->node_id] = *m;
          } else {
            spdlog::warn("ignoring a member record under {}: {}", kv.key, m.status().ToString());
          }
        }
      }
      {
        std::lock_guard cb(callback_mu_);
        Publish();
      }
      Status s = watch_etcd_.Watch(pfx, revision + 1, [&](const EtcdEvent& e) {
        {
          std::lock_guard lock(mu_);
          if (e.deleted) {
            if (auto node = NodeOfKey(pfx, e.kv.key)) members_.erase(*node);
          } else if (auto m = DecodeAt(pfx, e.kv.key, e.kv.value); m.ok()) {
            members_[m->node_id] = *m;
          } else {
            spdlog::warn("ignoring a member record under {}: {}", e.kv.key, m.status().ToString());
          }
        }
        std::lock_guard cb(callback_mu_);
        Publish();
        return true;
      });
      if (stopped()) return;
      spdlog::warn("cluster watch ended: {}; reading the members again", s.ToString());
    } else {
      spdlog::warn("cannot read the cluster members: {}", kvs.status().ToString());
    }
    std::unique_lock lock(mu_);
    wake_.wait_for(lock, std::chrono::milliseconds(500), [this] { return stopping_; });
  }
}

}  // namespace tierpool
