// The I/O seam under the nvme tier (LevelDB's Env, CacheLib's Device): a backend runs batches of
// block-aligned reads and writes. The public methods are non-virtual and do the work every
// backend needs — alignment checks, bounce buffers for unaligned memory, retrying short
// transfers, optional checksum verification, counters — around small virtual *Impl methods.
//
// Backends: io_uring (io_uring_backend.h), posix pread/pwrite, in-memory (tests), and a
// fault-injecting wrapper around any of them.
#pragma once

#include <sys/uio.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "common/posix.h"
#include "common/status.h"

namespace tierpool {

struct IoOp {
  enum class Kind : std::uint8_t { kRead, kWrite };
  Kind kind = Kind::kRead;
  std::uint32_t file = 0;
  std::uint64_t offset = 0;
  void* buf = nullptr;
  std::uint64_t len = 0;
  // Filled in by the backend.
  Status status;
  std::uint64_t done = 0;  // bytes transferred
  int fixed_index = -1;    // registered buffer holding buf (set by Run; io_uring uses it)
};

struct IoStats {
  std::uint64_t reads = 0;
  std::uint64_t writes = 0;
  std::uint64_t bytes_read = 0;
  std::uint64_t bytes_written = 0;
  std::uint64_t errors = 0;
  std::uint64_t short_transfers = 0;
  std::uint64_t bounced = 0;  // ops that went through a bounce buffer
  std::uint64_t checksum_failures = 0;
  std::uint64_t flushes = 0;
  std::uint64_t batches = 0;
};

struct IoBackendConfig {
  std::uint32_t block_size = 4096;  // offsets and lengths are multiples of this (O_DIRECT)
  std::uint32_t queue_depth = 16;   // ops in flight at once
  Status validate() const;
};

class IoBackend {
 public:
  virtual ~IoBackend() = default;
  IoBackend(const IoBackend&) = delete;
  IoBackend& operator=(const IoBackend&) = delete;

  // Runs every op (queue_depth at a time) and returns when all have finished. Each op gets its
  // own status; the return value is the first failure, or OK.
  Status Run(std::span<IoOp> ops);
  Status Read(std::uint32_t file, std::uint64_t offset, void* buf, std::uint64_t len);
  Status Write(std::uint32_t file, std::uint64_t offset, const void* buf, std::uint64_t len);
  // Reads, then checks the XXH3-64 of the first check_len bytes: DATA_LOSS on a mismatch.
  Status ReadVerified(std::uint32_t file, std::uint64_t offset, void* buf, std::uint64_t len,
                      std::uint64_t check_len, std::uint64_t expected_xxh3);
  Status Flush();

  // Pinned memory the backend may use for fixed-buffer I/O. Ops whose buffer lies inside one
  // region are marked with its index. Call before any I/O; once.
  Status RegisterBuffers(const std::vector<iovec>& regions);

  std::uint32_t block_size() const { return config_.block_size; }
  std::uint32_t queue_depth() const { return config_.queue_depth; }
  IoStats stats() const;
  virtual std::string name() const = 0;

 protected:
  explicit IoBackend(IoBackendConfig config) : config_(config) {}
  // Runs at most queue_depth ops, one attempt each: sets op.status and op.done. A short
  // transfer is not an error here; Run retries the rest.
  virtual void SubmitImpl(std::span<IoOp> ops) = 0;
  virtual Status FlushImpl() = 0;
  virtual Status RegisterBuffersImpl(const std::vector<iovec>&) { return Status::Ok(); }

 private:
  friend class FaultInjectingIoBackend;
  IoBackendConfig config_;
  std::vector<iovec> registered_;
  struct Counters {
    std::atomic<std::uint64_t> reads{0}, writes{0}, bytes_read{0}, bytes_written{0}, errors{0},
        short_transfers{0}, bounced{0}, checksum_failures{0}, flushes{0}, batches{0};
  } counters_;
};

// pread/pwrite on file descriptors the caller owns. Runs in the caller's thread.
class PosixIoBackend final : public IoBackend {
 public:
  PosixIoBackend(IoBackendConfig config, std::vector<int> fds)
      : IoBackend(config), fds_(std::move(fds)) {}
  std::string name() const override { return "posix"; }

 protected:
  void SubmitImpl(std::span<IoOp> ops) override;
  Status FlushImpl() override;

 private:
  std::vector<int> fds_;
};

// Files held in memory: for tests, and for machines without a spare disk.
class MemoryIoBackend final : public IoBackend {
 public:
  MemoryIoBackend(IoBackendConfig config, std::vector<std::uint64_t> file_sizes);
  std::string name() const override { return "memory"; }

 protected:
  void SubmitImpl(std::span<IoOp> ops) override;
  Status FlushImpl() override { return Status::Ok(); }

 private:
  std::mutex mu_;
  std::vector<std::vector<std::byte>> files_;
};

enum class FaultKind : std::uint8_t {
  kEio,           // the op fails with EIO, nothing transferred
  kEnospc,        // a write fails with ENOSPC
  kShortRead,     // a read transfers half (block-rounded) of what was asked
  kShortWrite,    // same for writes
  kFlipBitRead,   // a read returns one bit flipped
  kFlipBitWrite,  // a write stores one bit flipped
  kLatency,       // the op is delayed by latency_us
};

struct FaultRule {
  FaultKind kind = FaultKind::kEio;
  std::uint64_t one_in = 0;  // fire on each matching op with probability 1/one_in (0: never)
  std::uint64_t nth = 0;     // fire on the nth matching op (1-based; 0: never)
  std::uint32_t latency_us = 0;
};

// Wraps a backend and injects faults into its ops by rule.
class FaultInjectingIoBackend final : public IoBackend {
 public:
  FaultInjectingIoBackend(std::unique_ptr<IoBackend> inner, std::uint64_t seed);
  std::string name() const override { return "fault(" + inner_->name() + ")"; }
  void AddRule(FaultRule rule);
  void ClearRules();
  std::uint64_t injected() const { return injected_.load(); }

 protected:
  void SubmitImpl(std::span<IoOp> ops) override;
  Status FlushImpl() override { return inner_->FlushImpl(); }
  Status RegisterBuffersImpl(const std::vector<iovec>& r) override {
    return inner_->RegisterBuffers(r);
  }

 private:
  struct Armed {
    FaultRule rule;
    std::uint64_t seen = 0;
  };
  bool Fires(Armed& a, bool is_read);

  std::unique_ptr<IoBackend> inner_;
  std::mutex mu_;
  std::vector<Armed> rules_;
  std::mt19937_64 rng_;
  std::atomic<std::uint64_t> injected_{0};
};

// Memory aligned for O_DIRECT, freed with free().
struct AlignedFree {
  void operator()(void* p) const;
};
using AlignedBuffer = std::unique_ptr<std::byte, AlignedFree>;
AlignedBuffer AllocateAligned(std::uint64_t size, std::uint64_t alignment);

}  // namespace tierpool
