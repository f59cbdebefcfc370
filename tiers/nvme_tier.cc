#include "tiers/nvme_tier.h"

#include <fcntl.h>
#include <linux/fs.h>
#include <sys/file.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <random>

#include "common/checksum.h"
#include "common/logging.h"
#include "common/units.h"
#include "tiers/io_uring_backend.h"

namespace tierpool {

namespace {

void Put64(std::byte* p, std::uint64_t v) { std::memcpy(p, &v, 8); }  // x86-64: little-endian
std::uint64_t Get64(const std::byte* p) {
  std::uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}

}  // namespace

std::string NvmeFilePath(const std::string& dir, const std::string& set, std::uint32_t index) {
  return dir + "/tierpool-nvme-" + set + "-" + std::to_string(index) + ".dat";
}

bool IsNvmeFileName(const std::string& name, std::string* set) {
  static constexpr std::string_view kPrefix = "tierpool-nvme-", kSuffix = ".dat";
  if (name.size() < kPrefix.size() + 16 + 2 + kSuffix.size() || !name.starts_with(kPrefix) ||
      !name.ends_with(kSuffix)) {
    return false;
  }
  const std::string hex = name.substr(kPrefix.size(), 16);
  const std::string rest =
      name.substr(kPrefix.size() + 16, name.size() - kPrefix.size() - 16 - kSuffix.size());
  if (hex.find_first_not_of("0123456789abcdef") != std::string::npos || rest.size() < 2 ||
      rest[0] != '-' || rest.find_first_not_of("0123456789", 1) != std::string::npos) {
    return false;
  }
  if (set != nullptr) *set = hex;
  return true;
}

std::string CheckRecordHeader(const std::byte* h, const RecordInfo& expect) {
  std::uint32_t magic;
  std::uint16_t version;
  std::memcpy(&magic, h, 4);
  std::memcpy(&version, h + 4, 2);
  if (magic != kRecordMagic) return "bad record magic";
  if (version != kRecordVersion) return "record format version " + std::to_string(version);
  if (Get64(h + 56) != Xxh3(h, 56)) return "record header checksum mismatch";
  if (Get64(h + 8) != expect.key_hash || Get64(h + 16) != expect.object_id) {
    return "record belongs to another object (index mix-up)";
  }
  if (Get64(h + 24) != expect.size || Get64(h + 32) != expect.checksum) {
    return "record size or checksum differs from the index";
  }
  return "";
}

std::uint64_t KeyHash(const std::string& ns, const std::string& key) {
  std::string s;
  s.reserve(ns.size() + 1 + key.size());
  s.append(ns).push_back('\0');
  s.append(key);
  return Xxh3(s.data(), s.size());
}

Status NvmeTierConfig::validate() const {
  if (backend != "io_uring" && backend != "posix" && backend != "memory") {
    return Status::InvalidArgument("nvme backend must be io_uring, posix or memory");
  }
  if (backend != "memory" && path.empty()) return Status::InvalidArgument("nvme path is empty");
  if (files == 0 || files > 64) return Status::InvalidArgument("nvme files must be in [1, 64]");
  if (block_size < 512 || (block_size & (block_size - 1)) != 0) {
    return Status::InvalidArgument("nvme block size must be a power of two >= 512");
  }
  if (io_size < block_size || io_size % block_size != 0 || io_size > (64u << 20)) {
    return Status::InvalidArgument(
        "nvme I/O size must be a multiple of the block size and at most 64M");
  }
  if (queue_depth == 0 || queue_depth > 1024) {
    return Status::InvalidArgument("nvme queue depth must be in [1, 1024]");
  }
  if (capacity < static_cast<std::uint64_t>(files) * block_size * 2) {
    return Status::InvalidArgument("nvme capacity too small for one record per file");
  }
  return Status::Ok();
}

Result<std::unique_ptr<NvmeTier>> NvmeTier::Create(const NvmeTierConfig& config,
                                                   std::unique_ptr<IoBackend> backend,
                                                   const std::vector<iovec>& pinned) {
  TIERPOOL_RETURN_IF_ERROR(config.validate());
  std::unique_ptr<NvmeTier> tier(new NvmeTier(config));
  tier->per_file_ = config.capacity / config.files / config.block_size * config.block_size;
  IoBackendConfig io{.block_size = config.block_size, .queue_depth = config.queue_depth};
  if (backend) {
    tier->backend_ = std::move(backend);
  } else if (config.backend == "memory") {
    tier->backend_ = std::make_unique<MemoryIoBackend>(
        io, std::vector<std::uint64_t>(config.files, tier->per_file_));
  } else {
    TIERPOOL_RETURN_IF_ERROR(tier->Open());
    std::vector<int> fds;
    for (auto& f : tier->fds_) fds.push_back(f.get());
    if (config.backend == "io_uring") {
      auto ring = IoUringBackend::Create(io, fds);
      if (ring.ok()) {
        tier->backend_ = std::move(ring).value();
      } else {
        spdlog::warn("io_uring unavailable ({}); the nvme tier uses pread/pwrite",
                     ring.status().ToString());
      }
    }
    if (!tier->backend_) tier->backend_ = std::make_unique<PosixIoBackend>(io, fds);
  }
  for (std::uint32_t i = 0; i < config.files; ++i) {
    tier->allocators_.emplace_back(
        ExtentAllocatorConfig{.capacity = tier->per_file_, .alignment = config.block_size});
  }
  tier->capacity_ = tier->per_file_ * config.files;
  // Header blocks come from a small pinned pool; with the dram arenas, registered for
  // fixed-buffer I/O.
  std::vector<iovec> regions;
  for (std::uint32_t i = 0; i < config.queue_depth; ++i) {
    auto b = AllocateAligned(config.block_size, config.block_size);
    if (!b) return Status::ResourceExhausted("no memory for nvme header buffers");
    regions.push_back({b.get(), config.block_size});
    tier->header_pool_.push_back(std::move(b));
  }
  for (const auto& r : pinned) {
    // io_uring takes at most 1 GiB per registered buffer.
    for (std::size_t off = 0; off < r.iov_len; off += 1ull << 30) {
      regions.push_back({static_cast<std::byte*>(r.iov_base) + off,
                         std::min<std::size_t>(1ull << 30, r.iov_len - off)});
    }
  }
  if (Status s = tier->backend_->RegisterBuffers(regions); !s.ok()) {
    spdlog::warn("nvme: fixed buffers not registered ({}); using plain I/O", s.ToString());
  }
  spdlog::info("nvme tier: {} in {} file(s) under {} via {}, {} I/O at queue depth {}",
               FormatBytes(tier->capacity_), config.files, config.path, tier->backend_->name(),
               FormatBytes(config.io_size), config.queue_depth);
  return tier;
}

Status NvmeTier::Open() {
  struct stat st {};
  bool is_dir = ::stat(config_.path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
  bool is_dev = !is_dir && ::stat(config_.path.c_str(), &st) == 0 && S_ISBLK(st.st_mode);
  if (!is_dir && !is_dev) {
    return Status::InvalidArgument("--nvme-path " + config_.path +
                                   " is neither a directory nor a block device");
  }
  if (is_dev) {
    if (config_.files != 1) return Status::InvalidArgument("a block device is one file");
    int fd = ::open(config_.path.c_str(), O_RDWR | O_DIRECT | O_CLOEXEC);
    if (fd < 0) return ErrnoStatus("open " + config_.path, errno);
    fds_.emplace_back(fd);
    std::uint64_t dev_bytes = 0;
    if (::ioctl(fd, BLKGETSIZE64, &dev_bytes) == 0 && dev_bytes < per_file_) {
      per_file_ = dev_bytes / config_.block_size * config_.block_size;
    }
    return Status::Ok();
  }
  if (config_.keep_files) {
    std::random_device rd;
    const std::uint64_t r = (std::uint64_t{rd()} << 32) ^ rd();
    char hex[17];
    std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(r));
    file_set_ = hex;
  }
  for (std::uint32_t i = 0; i < config_.files; ++i) {
    std::string file = config_.keep_files
                           ? NvmeFilePath(config_.path, file_set_, i)
                           : config_.path + "/tierpool-nvme-" + std::to_string(::getpid()) + "-" +
                                 std::to_string(i) + ".dat";
    int fd = ::open(file.c_str(), O_RDWR | O_CREAT | O_EXCL | O_DIRECT | O_CLOEXEC, 0600);
    if (fd < 0 && errno == EINVAL) {
      spdlog::warn("{} does not support O_DIRECT; the nvme tier goes through the page cache",
                   config_.path);
      fd = ::open(file.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    }
    if (fd < 0) return ErrnoStatus("create " + file, errno);
    fds_.emplace_back(fd);
    if (config_.keep_files) {
      // Kept for the journal; locked, so that a start sweeping old sets leaves a live one alone.
      if (::flock(fd, LOCK_EX | LOCK_NB) != 0) return ErrnoStatus("lock " + file, errno);
    } else {
      // The object index lives in memory, so the file's contents die with the process: unlink
      // now and the space comes back even after a crash.
      ::unlink(file.c_str());
    }
    int rc = ::posix_fallocate(fd, 0, static_cast<off_t>(per_file_));
    if (rc != 0) return ErrnoStatus("preallocate " + FormatBytes(per_file_) + " in " + file, rc);
  }
  return Status::Ok();
}

Status NvmeTier::SyncData() {
  for (const UniqueFd& fd : fds_) {
    if (::fdatasync(fd.get()) != 0) return ErrnoStatus("sync the nvme files", errno);
  }
  return Status::Ok();
}

NvmeTier::~NvmeTier() {
  backend_.reset();  // stops I/O before the files close
}

std::uint64_t NvmeTier::PayloadSpan(std::uint64_t size) const {
  return AlignUp(size, config_.block_size);
}

std::uint64_t NvmeTier::RecordBytes(std::uint64_t size) const {
  return config_.block_size + PayloadSpan(size);
}

Result<Extent> NvmeTier::Allocate(std::uint64_t size, const AllocationHint&) {
  std::lock_guard lock(mu_);
  if (full_) return Status::ResourceExhausted("nvme tier is full (the device said ENOSPC)");
  std::uint64_t need = RecordBytes(size);
  // The file with the most free space first, to spread I/O.
  std::vector<std::uint32_t> order(allocators_.size());
  for (std::uint32_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](auto a, auto b) {
    return allocators_[a].stats().free_bytes > allocators_[b].stats().free_bytes;
  });
  for (auto i : order) {
    if (auto r = allocators_[i].Allocate(need)) return Extent{i, r->offset, r->length};
  }
  return Status::ResourceExhausted("nvme has no free extent of " + FormatBytes(need));
}

Status NvmeTier::Free(const Extent& extent) {
  std::lock_guard lock(mu_);
  if (extent.arena_id >= allocators_.size()) return Status::Internal("free in unknown nvme file");
  full_ = false;  // room again
  return allocators_[extent.arena_id].Free({extent.offset, extent.length});
}

std::uint64_t NvmeTier::used_bytes() const {
  std::lock_guard lock(mu_);
  std::uint64_t used = 0;
  for (const auto& a : allocators_) used += a.stats().used_bytes;
  return used;
}

bool NvmeTier::degraded() const {
  std::lock_guard lock(mu_);
  return degraded_;
}

Status NvmeTier::CheckWritable() {
  std::lock_guard lock(mu_);
  if (full_) return Status::ResourceExhausted("nvme tier is full (the device said ENOSPC)");
  if (degraded_ && std::chrono::steady_clock::now() < retry_at_) {
    return Status::Unavailable("nvme tier is degraded after " +
                               std::to_string(consecutive_errors_) + " I/O errors");
  }
  return Status::Ok();
}

void NvmeTier::NoteResult(const Status& s, bool is_write) {
  std::lock_guard lock(mu_);
  if (s.ok()) {
    if (degraded_) spdlog::info("nvme tier recovered");
    consecutive_errors_ = 0;
    degraded_ = false;
    return;
  }
  if (s.code() == StatusCode::kDataLoss) {
    ++checksum_failures_;
    return;  // the device answered; the bytes were wrong. Counted, not a device error.
  }
  (is_write ? write_errors_ : read_errors_)++;
  if (s.code() == StatusCode::kResourceExhausted && is_write) {
    if (!full_) spdlog::warn("nvme tier full: {}", s.ToString());
    full_ = true;
    return;
  }
  if (++consecutive_errors_ >= config_.degrade_after_errors) {
    if (!degraded_) {
      spdlog::error("nvme tier degraded after {} consecutive I/O errors (last: {})",
                    consecutive_errors_, s.ToString());
    }
    degraded_ = true;
    retry_at_ =
        std::chrono::steady_clock::now() + std::chrono::milliseconds(config_.retry_degraded_ms);
  }
}

AlignedBuffer NvmeTier::TakeHeaderBuffer() {
  {
    std::lock_guard lock(mu_);
    if (!header_pool_.empty()) {
      AlignedBuffer b = std::move(header_pool_.back());
      header_pool_.pop_back();
      return b;
    }
  }
  return AllocateAligned(config_.block_size, config_.block_size);  // pool exhausted: unpinned
}

void NvmeTier::ReturnHeaderBuffer(AlignedBuffer b) {
  std::lock_guard lock(mu_);
  header_pool_.push_back(std::move(b));
}

std::vector<IoOp> NvmeTier::RecordOps(IoOp::Kind kind, const Extent& extent, std::byte* header,
                                      std::byte* payload, std::uint64_t size) const {
  // The header block, then the payload in io_size pieces: one batch, queue_depth in flight.
  std::vector<IoOp> ops;
  ops.push_back({.kind = kind,
                 .file = extent.arena_id,
                 .offset = extent.offset,
                 .buf = header,
                 .len = config_.block_size});
  const std::uint64_t span = PayloadSpan(size);
  for (std::uint64_t off = 0; off < span; off += config_.io_size) {
    ops.push_back({.kind = kind,
                   .file = extent.arena_id,
                   .offset = extent.offset + config_.block_size + off,
                   .buf = payload + off,
                   .len = std::min<std::uint64_t>(config_.io_size, span - off)});
  }
  return ops;
}

Status NvmeTier::WriteRecord(const Extent& extent, const RecordInfo& info,
                             const std::byte* payload) {
  if (extent.length < RecordBytes(info.size)) {
    return Status::Internal("nvme extent smaller than its record");
  }
  AlignedBuffer header = TakeHeaderBuffer();
  std::byte* h = header.get();
  std::memset(h, 0, config_.block_size);
  std::uint32_t magic = kRecordMagic;
  std::uint16_t version = kRecordVersion, header_bytes = kRecordHeaderBytes;
  std::memcpy(h, &magic, 4);
  std::memcpy(h + 4, &version, 2);
  std::memcpy(h + 6, &header_bytes, 2);
  Put64(h + 8, info.key_hash);
  Put64(h + 16, info.object_id);
  Put64(h + 24, info.size);
  Put64(h + 32, info.checksum);
  Put64(h + 56, Xxh3(h, 56));

  const std::uint64_t span = PayloadSpan(info.size);
  std::vector<IoOp> ops =
      RecordOps(IoOp::Kind::kWrite, extent, h, const_cast<std::byte*>(payload), info.size);
  Status s = backend_->Run(ops);
  ReturnHeaderBuffer(std::move(header));
  NoteResult(s, true);
  if (s.ok() && config_.verify_writes) {
    AlignedBuffer check = AllocateAligned(span, config_.block_size);
    if (!check) return Status::ResourceExhausted("no memory to verify an nvme write");
    s = ReadRecord(extent, info, check.get());
    if (!s.ok()) {
      std::lock_guard lock(mu_);
      ++verify_failures_;
      s = Status(s.code(), "verifying the record just written: " + s.message());
    }
  }
  if (s.ok()) {
    std::lock_guard lock(mu_);
    ++records_written_;
  }
  return s;
}

Status NvmeTier::ReadRecord(const Extent& extent, const RecordInfo& expect, std::byte* dst) {
  AlignedBuffer header = TakeHeaderBuffer();
  std::byte* h = header.get();
  std::vector<IoOp> ops = RecordOps(IoOp::Kind::kRead, extent, h, dst, expect.size);
  Status s = backend_->Run(ops);
  if (s.ok()) {
    std::string what = CheckRecordHeader(h, expect);
    if (what.empty() && Xxh3(dst, expect.size) != expect.checksum) {
      what = "payload checksum mismatch";
    }
    if (!what.empty()) {
      s = Status::DataLoss("nvme record at file " + std::to_string(extent.arena_id) + " offset " +
                           std::to_string(extent.offset) + ": " + what);
    }
  }
  ReturnHeaderBuffer(std::move(header));
  NoteResult(s, false);
  if (s.ok()) {
    std::lock_guard lock(mu_);
    ++records_read_;
  }
  return s;
}

void NvmeTier::ReadImpl(const Extent& src, const RecordInfo& info, std::byte* dst,
                        IoCompletion done) {
  done(ReadRecord(src, info, dst));
}

void NvmeTier::WriteImpl(const Extent& dst, const RecordInfo& info, const std::byte* src,
                         IoCompletion done) {
  if (Status s = CheckWritable(); !s.ok()) return done(s);
  // Clients map dram read-write: check the bytes still match their checksum before they go to
  // disk, so a record on nvme is never a "verified" copy of wrong bytes.
  if (Xxh3(src, info.size) != info.checksum) {
    return done(Status::DataLoss("bytes of object " + std::to_string(info.object_id) +
                                 " no longer match their checksum; not written to nvme"));
  }
  done(WriteRecord(dst, info, src));
}

TierStats NvmeTier::Stats() const {
  std::lock_guard lock(mu_);
  TierStats s;
  s.kind = TierKind::kNvme;
  s.backend = backend_->name();
  std::uint64_t free_bytes = 0;
  for (const auto& a : allocators_) AddAllocatorStats(a.stats(), &s, &free_bytes);
  FinishFragmentation(&s, free_bytes);
  s.state = full_ ? "full" : degraded_ ? "degraded" : "ok";
  s.read_errors = read_errors_;
  s.write_errors = write_errors_;
  s.checksum_failures = checksum_failures_;
  return s;
}

}  // namespace tierpool
