// The nvme tier: local flash as preallocated files (or a block device) holding one record per
// object, written and read through an IoBackend. Records are self-describing and checked on
// every read; the layout is in docs/nvme-format.md.
#pragma once

#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "tiers/extent_allocator.h"
#include "tiers/io_backend.h"
#include "tiers/tier.h"

namespace tierpool {

struct NvmeTierConfig {
  std::string path;            // a directory (files are created in it) or a block device
  std::uint64_t capacity = 0;  // bytes, split evenly over `files`
  std::uint32_t files = 1;
  std::uint32_t block_size = 4096;  // device alignment; records start on it
  std::uint64_t io_size = 1 << 20;  // largest single I/O; payloads are split into these
  std::uint32_t queue_depth = 16;
  std::string backend = "io_uring";        // io_uring, posix, or memory (no files; for tests)
  std::uint32_t degrade_after_errors = 3;  // consecutive I/O errors that mark the tier degraded
  std::uint32_t retry_degraded_ms = 2000;  // then one write is tried again after this long
  // Read every record back and check it before a spill counts as done, so a write the device
  // garbled is caught while the bytes still exist above. Costs a read per spill.
  bool verify_writes = true;
  // Keep the files (a directory's only) for `--persist`: named tierpool-nvme-SET-N.dat, where SET
  // is this tier's file set (random, one per start), locked while open and left in place at exit,
  // so that a journal naming their records (store/persist_journal.h) can bring them back after a
  // crash. Otherwise the files are unlinked at once and their space comes back with the process.
  bool keep_files = false;
  Status validate() const;
};

// The name of file `index` of file set `set` in `dir`, and whether a name is one of those (a set
// is 16 hex digits). Recovery reads and removes only files so named.
std::string NvmeFilePath(const std::string& dir, const std::string& set, std::uint32_t index);
bool IsNvmeFileName(const std::string& name, std::string* set = nullptr);

// Checks a record's header block against what the index expects of it: "" when it matches,
// else what is wrong. The payload's checksum is the caller's to check.
std::string CheckRecordHeader(const std::byte* header, const RecordInfo& expect);

// The fixed header at the start of every record (little-endian, 64 bytes, in its own block).
inline constexpr std::uint32_t kRecordMagic = 0x43525054;  // "TPRC"
inline constexpr std::uint16_t kRecordVersion = 1;
inline constexpr std::size_t kRecordHeaderBytes = 64;

class NvmeTier final : public Tier {
 public:
  // backend: use this one instead of building config.backend (tests pass a fault injector).
  // pinned: memory to register for fixed-buffer I/O (the dram arenas).
  static Result<std::unique_ptr<NvmeTier>> Create(const NvmeTierConfig& config,
                                                  std::unique_ptr<IoBackend> backend = nullptr,
                                                  const std::vector<iovec>& pinned = {});
  ~NvmeTier() override;

  TierKind kind() const override { return TierKind::kNvme; }
  std::uint32_t level() const override { return 3; }
  std::uint64_t Footprint(std::uint64_t size) const override { return RecordBytes(size); }
  Result<Extent> Allocate(std::uint64_t size, const AllocationHint& hint) override;
  Status Free(const Extent& extent) override;
  std::byte* HostAddress(const Extent&) override { return nullptr; }
  std::vector<ArenaInfo> Arenas() const override { return {}; }
  TierStats Stats() const override;
  std::uint64_t capacity() const override { return capacity_; }
  std::uint64_t used_bytes() const override;

  // Record size on disk for a payload of size bytes: one header block + the rounded payload.
  std::uint64_t RecordBytes(std::uint64_t size) const;
  // Bytes a payload buffer must span for I/O: size rounded up to the block.
  std::uint64_t PayloadSpan(std::uint64_t size) const;
  // Refuses with RESOURCE_EXHAUSTED when full, UNAVAILABLE while degraded.
  Status CheckWritable() override;
  // Writes header and payload. payload must be block-aligned and readable for PayloadSpan(size).
  Status WriteRecord(const Extent& extent, const RecordInfo& info, const std::byte* payload);
  // Reads into dst (block-aligned, PayloadSpan(size) bytes of room) and checks header and
  // payload against expect: DATA_LOSS on any mismatch, never unchecked bytes.
  Status ReadRecord(const Extent& extent, const RecordInfo& expect, std::byte* dst);

  IoBackend& backend() { return *backend_; }
  bool degraded() const;

  // With keep_files: the file set's name and its files (empty otherwise).
  const std::string& file_set() const { return file_set_; }
  std::uint32_t block_size() const { return config_.block_size; }
  const std::string& path() const { return config_.path; }
  // Makes every record written so far durable (fdatasync of each file).
  Status SyncData();

 protected:
  // Record I/O through the backend; blocks the calling thread until the device answers, then
  // completes on it. Write checks the payload against its checksum before it goes to disk.
  void ReadImpl(const Extent& src, const RecordInfo& info, std::byte* dst,
                IoCompletion done) override;
  void WriteImpl(const Extent& dst, const RecordInfo& info, const std::byte* src,
                 IoCompletion done) override;

 private:
  explicit NvmeTier(NvmeTierConfig config) : config_(std::move(config)) {}
  Status Open();
  void NoteResult(const Status& s, bool is_write);
  std::vector<IoOp> RecordOps(IoOp::Kind kind, const Extent& extent, std::byte* header,
                              std::byte* payload, std::uint64_t size) const;
  AlignedBuffer TakeHeaderBuffer();
  void ReturnHeaderBuffer(AlignedBuffer b);

  NvmeTierConfig config_;
  std::vector<UniqueFd> fds_;
  std::string file_set_;  // keep_files: this start's set
  std::unique_ptr<IoBackend> backend_;
  std::uint64_t capacity_ = 0;
  std::uint64_t per_file_ = 0;

  mutable std::mutex mu_;
  std::vector<ExtentAllocator> allocators_;
  std::vector<AlignedBuffer> header_pool_;
  std::uint32_t consecutive_errors_ = 0;
  bool degraded_ = false;
  bool full_ = false;
  std::chrono::steady_clock::time_point retry_at_;
  std::uint64_t read_errors_ = 0, write_errors_ = 0, checksum_failures_ = 0;
  std::uint64_t records_written_ = 0, records_read_ = 0, verify_failures_ = 0;
};

}  // namespace tierpool
