// A small client of etcd's v3 JSON gateway (HTTP/1.1, Boost.Beast): leases, puts, prefix reads
// and prefix watches, which is all cluster membership needs. Keys and values are bytes; the
// gateway's base64 is handled here.
//
// Thread safety: calls may run on several threads at once (each opens its own connection);
// CancelWatch may be called from any thread. Every call but Watch is bounded by timeout_ms.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "common/status.h"
#include "store/etcd_wire.h"

namespace tierpool {

class EtcdClient {
 public:
  // url: http://host:port (TLS to etcd is not spoken yet).
  static Result<EtcdClient> Create(const std::string& url, std::uint32_t timeout_ms = 2000);
  EtcdClient(const EtcdClient& o) : host_(o.host_), port_(o.port_), timeout_ms_(o.timeout_ms_) {}
  EtcdClient& operator=(const EtcdClient&) = delete;

  Result<std::int64_t> GrantLease(std::int64_t ttl_s);
  // The lease's remaining TTL in seconds; 0 when it is gone (expired or revoked).
  Result<std::int64_t> KeepAlive(std::int64_t lease);
  Status Revoke(std::int64_t lease);
  Status Put(const std::string& key, const std::string& value, std::int64_t lease = 0);
  Status Delete(const std::string& key);
  // Every key under prefix; *revision: the store's revision the answer is of.
  Result<std::vector<EtcdKeyValue>> RangePrefix(const std::string& prefix, std::int64_t* revision);
  // Streams the changes under prefix from start_revision, calling on_event for each, until the
  // stream ends (an error), on_event returns false (OK), or CancelWatch is called (CANCELLED as
  // ABORTED). Blocks.
  Status Watch(const std::string& prefix, std::int64_t start_revision,
               const std::function<bool(const EtcdEvent&)>& on_event);
  void CancelWatch();

  const std::string& endpoint() const { return endpoint_; }

 private:
  EtcdClient(std::string host, std::string port, std::uint32_t timeout_ms)
      : host_(std::move(host)),
        port_(std::move(port)),
        timeout_ms_(timeout_ms),
        endpoint_(host_ + ":" + port_) {}
  Result<std::string> Post(const std::string& path, const std::string& body);

  std::string host_;
  std::string port_;
  std::uint32_t timeout_ms_;
  std::string endpoint_;
  std::atomic<int> watch_fd_{-1};
  std::atomic<bool> watch_cancelled_{false};
};

// The end of the key range that holds every key starting with prefix (etcd's range_end).
std::string PrefixEnd(const std::string& prefix);

}  // namespace tierpool
