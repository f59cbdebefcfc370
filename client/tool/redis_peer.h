// A Redis server started for one benchmark run, and a client for it: `tierpool bench --compare
// redis` measures the same sizes and batch shapes through it, in the same run, as the reference
// an engineer would otherwise reach for.
//
// The server is Debian's redis-server on a private Unix socket in a fresh directory (mode 0700),
// with persistence off and no TCP port; it is stopped (SIGTERM, then SIGKILL after 5 s) when the
// RedisPeer goes. One RedisPeer is used by one thread at a time.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tierpool/status.h"

struct redisContext;

namespace tierpool::tool {

class RedisPeer {
 public:
  // binary: the redis-server to run (looked up on PATH when it has no '/').
  static Result<std::unique_ptr<RedisPeer>> Start(const std::string& binary);
  ~RedisPeer();
  RedisPeer(const RedisPeer&) = delete;
  RedisPeer& operator=(const RedisPeer&) = delete;

  Status Set(const std::string& key, const std::byte* data, std::uint64_t size);
  // Reads the value into dst; its size must be `size` (anything else is an error, never bytes).
  Status Get(const std::string& key, std::byte* dst, std::uint64_t size);
  // keys.size() SETs (or GETs) written back to back, then all replies read: one pipeline.
  Status SetPipelined(const std::vector<std::string>& keys, const std::byte* data,
                      std::uint64_t size_each);
  Status GetPipelined(const std::vector<std::string>& keys, std::byte* dst,
                      std::uint64_t size_each);
  Status Delete(const std::vector<std::string>& keys);

 private:
  RedisPeer() = default;
  Status Connect();
  void Stop();

  std::string dir_;
  std::string socket_;
  pid_t pid_ = -1;
  redisContext* ctx_ = nullptr;
};

}  // namespace tierpool::tool
