#include "tiers/io_backend.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "common/checksum.h"

namespace tierpool {

void AlignedFree::operator()(void* p) const { std::free(p); }

AlignedBuffer AllocateAligned(std::uint64_t size, std::uint64_t alignment) {
  void* p = nullptr;
  if (::posix_memalign(&p, alignment, std::max<std::uint64_t>(size, alignment)) != 0) return {};
  return AlignedBuffer(static_cast<std::byte*>(p));
}

Status IoBackendConfig::validate() const {
  if (block_size < 512 || (block_size & (block_size - 1)) != 0) {
    return Status::InvalidArgument("block size must be a power of two >= 512");
  }
  if (queue_depth == 0 || queue_depth > 4096) {
    return Status::InvalidArgument("queue depth must be in [1, 4096]");
  }
  return Status::Ok();
}

Status IoBackend::RegisterBuffers(const std::vector<iovec>& regions) {
  if (!registered_.empty()) return Status::FailedPrecondition("buffers already registered");
  TIERPOOL_RETURN_IF_ERROR(RegisterBuffersImpl(regions));
  registered_ = regions;
  return Status::Ok();
}

Status IoBackend::Run(std::span<IoOp> ops) {
  const std::uint64_t bs = config_.block_size;
  // Validate everything first: a bad op fails alone, the others still run.
  std::vector<AlignedBuffer> bounce(ops.size());
  std::vector<IoOp*> pending;
  for (std::size_t i = 0; i < ops.size(); ++i) {
    IoOp& op = ops[i];
    op.done = 0;
    op.status = Status::Ok();
    op.fixed_index = -1;
    if (op.offset % bs != 0 || op.len % bs != 0 || op.len == 0) {
      op.status = Status::InvalidArgument("I/O at offset " + std::to_string(op.offset) + " of " +
                                          std::to_string(op.len) + " bytes is not aligned to the " +
                                          std::to_string(bs) + "-byte block");
      continue;
    }
    if (reinterpret_cast<std::uintptr_t>(op.buf) % bs != 0) {
      bounce[i] = AllocateAligned(op.len, bs);
      if (!bounce[i]) {
        op.status = Status::ResourceExhausted("no memory for a bounce buffer");
        continue;
      }
      if (op.kind == IoOp::Kind::kWrite) std::memcpy(bounce[i].get(), op.buf, op.len);
      counters_.bounced++;
    } else {
      auto* p = static_cast<std::byte*>(op.buf);
      for (std::size_t r = 0; r < registered_.size(); ++r) {
        auto* base = static_cast<std::byte*>(registered_[r].iov_base);
        if (p >= base && p + op.len <= base + registered_[r].iov_len) {
          op.fixed_index = static_cast<int>(r);
          break;
        }
      }
    }
    pending.push_back(&op);
  }
  counters_.batches++;
  // Submit what remains of each op, queue_depth at a time, until all are done or failed.
  while (!pending.empty()) {
    std::size_t n = std::min<std::size_t>(pending.size(), config_.queue_depth);
    std::vector<IoOp> sub(n);
    for (std::size_t j = 0; j < n; ++j) {
      IoOp& op = *pending[j];
      std::size_t idx = static_cast<std::size_t>(&op - ops.data());
      auto* base = bounce[idx] ? bounce[idx].get() : static_cast<std::byte*>(op.buf);
      sub[j] = op;
      sub[j].buf = base + op.done;
      sub[j].offset = op.offset + op.done;
      sub[j].len = op.len - op.done;
      if (bounce[idx]) sub[j].fixed_index = -1;
      sub[j].status = Status::Ok();
      sub[j].done = 0;
    }
    SubmitImpl(std::span<IoOp>(sub.data(), n));
    std::vector<IoOp*> next;
    for (std::size_t j = 0; j < n; ++j) {
      IoOp& op = *pending[j];
      const IoOp& s = sub[j];
      bool is_read = op.kind == IoOp::Kind::kRead;
      if (!s.status.ok()) {
        op.status = s.status;
        counters_.errors++;
        continue;
      }
      op.done += s.done;
      (is_read ? counters_.bytes_read : counters_.bytes_written) += s.done;
      if (op.done == op.len) {
        (is_read ? counters_.reads : counters_.writes)++;
        continue;
      }
      counters_.short_transfers++;
      if (s.done == 0 || op.done % bs != 0) {
        op.status =
            Status::IoError(std::string(is_read ? "read" : "write") + " at offset " +
                            std::to_string(op.offset) + " stopped after " +
                            std::to_string(op.done) + " of " + std::to_string(op.len) + " bytes");
        counters_.errors++;
        continue;
      }
      next.push_back(&op);
    }
    next.insert(next.end(), pending.begin() + static_cast<long>(n), pending.end());
    pending = std::move(next);
  }
  Status first;
  for (std::size_t i = 0; i < ops.size(); ++i) {
    IoOp& op = ops[i];
    if (bounce[i] && op.kind == IoOp::Kind::kRead && op.status.ok()) {
      std::memcpy(op.buf, bounce[i].get(), op.len);
    }
    if (!op.status.ok() && first.ok()) first = op.status;
  }
  return first;
}

Status IoBackend::Read(std::uint32_t file, std::uint64_t offset, void* buf, std::uint64_t len) {
  IoOp op{.kind = IoOp::Kind::kRead, .file = file, .offset = offset, .buf = buf, .len = len};
  return Run(std::span<IoOp>(&op, 1));
}

Status IoBackend::Write(std::uint32_t file, std::uint64_t offset, const void* buf,
                        std::uint64_t len) {
  IoOp op{.kind = IoOp::Kind::kWrite,
          .file = file,
          .offset = offset,
          .buf = const_cast<void*>(buf),
          .len = len};
  return Run(std::span<IoOp>(&op, 1));
}

Status IoBackend::ReadVerified(std::uint32_t file, std::uint64_t offset, void* buf,
                               std::uint64_t len, std::uint64_t check_len,
                               std::uint64_t expected_xxh3) {
  TIERPOOL_RETURN_IF_ERROR(Read(file, offset, buf, len));
  if (Xxh3(buf, std::min(check_len, len)) != expected_xxh3) {
    counters_.checksum_failures++;
    return Status::DataLoss("checksum mismatch reading " + std::to_string(len) +
                            " bytes at offset " + std::to_string(offset));
  }
  return Status::Ok();
}

Status IoBackend::Flush() {
  counters_.flushes++;
  Status s = FlushImpl();
  if (!s.ok()) counters_.errors++;
  return s;
}

IoStats IoBackend::stats() const {
  const Counters& c = counters_;
  return {
      c.reads.load(),   c.writes.load(),          c.bytes_read.load(), c.bytes_written.load(),
      c.errors.load(),  c.short_transfers.load(), c.bounced.load(),    c.checksum_failures.load(),
      c.flushes.load(), c.batches.load()};
}

// ---- posix ----

void PosixIoBackend::SubmitImpl(std::span<IoOp> ops) {
  for (IoOp& op : ops) {
    if (op.file >= fds_.size()) {
      op.status = Status::InvalidArgument("no file " + std::to_string(op.file));
      continue;
    }
    ssize_t n;
    do {
      n = op.kind == IoOp::Kind::kRead
              ? ::pread(fds_[op.file], op.buf, op.len, static_cast<off_t>(op.offset))
              : ::pwrite(fds_[op.file], op.buf, op.len, static_cast<off_t>(op.offset));
    } while (n < 0 && errno == EINTR);
    if (n < 0) {
      op.status = ErrnoStatus(op.kind == IoOp::Kind::kRead ? "pread" : "pwrite", errno);
    } else {
      op.done = static_cast<std::uint64_t>(n);
    }
  }
}

Status PosixIoBackend::FlushImpl() {
  for (int fd : fds_) {
    if (::fdatasync(fd) != 0) return ErrnoStatus("fdatasync", errno);
  }
  return Status::Ok();
}

// ---- memory ----

MemoryIoBackend::MemoryIoBackend(IoBackendConfig config, std::vector<std::uint64_t> file_sizes)
    : IoBackend(config) {
  for (auto s : file_sizes) files_.emplace_back(s);
}

void MemoryIoBackend::SubmitImpl(std::span<IoOp> ops) {
  std::lock_guard lock(mu_);
  for (IoOp& op : ops) {
    if (op.file >= files_.size()) {
      op.status = Status::InvalidArgument("no file " + std::to_string(op.file));
      continue;
    }
    auto& f = files_[op.file];
    if (op.offset >= f.size()) {
      op.done = 0;  // past the end: nothing transferred
      continue;
    }
    std::uint64_t n = std::min<std::uint64_t>(op.len, f.size() - op.offset);
    if (op.kind == IoOp::Kind::kRead) {
      std::memcpy(op.buf, f.data() + op.offset, n);
    } else {
      std::memcpy(f.data() + op.offset, op.buf, n);
    }
    op.done = n;
  }
}

// ---- fault injection ----

FaultInjectingIoBackend::FaultInjectingIoBackend(std::unique_ptr<IoBackend> inner,
                                                 std::uint64_t seed)
    : IoBackend(inner->config_), inner_(std::move(inner)), rng_(seed) {}

void FaultInjectingIoBackend::AddRule(FaultRule rule) {
  std::lock_guard lock(mu_);
  rules_.push_back({rule, 0});
}

void FaultInjectingIoBackend::ClearRules() {
  std::lock_guard lock(mu_);
  rules_.clear();
}

bool FaultInjectingIoBackend::Fires(Armed& a, bool is_read) {
  switch (a.rule.kind) {
    case FaultKind::kEnospc:
    case FaultKind::kShortWrite:
    case FaultKind::kFlipBitWrite:
      if (is_read) return false;
      break;
    case FaultKind::kShortRead:
    case FaultKind::kFlipBitRead:
      if (!is_read) return false;
      break;
    default:
      break;
  }
  ++a.seen;
  if (a.rule.nth != 0 && a.seen == a.rule.nth) return true;
  return a.rule.one_in != 0 && rng_() % a.rule.one_in == 0;
}

void FaultInjectingIoBackend::SubmitImpl(std::span<IoOp> ops) {
  const std::uint64_t bs = block_size();
  std::vector<IoOp*> pass;  // ops (possibly altered) that still go to the inner backend
  std::vector<std::pair<IoOp*, std::uint64_t>> flip_after_read;  // op, bit
  std::vector<AlignedBuffer> corrupted;
  std::uint32_t delay_us = 0;
  {
    std::lock_guard lock(mu_);
    for (IoOp& op : ops) {
      bool is_read = op.kind == IoOp::Kind::kRead;
      bool failed = false;
      for (Armed& a : rules_) {
        if (failed || !Fires(a, is_read)) continue;
        ++injected_;
        switch (a.rule.kind) {
          case FaultKind::kEio:
            op.status = ErrnoStatus("injected", EIO);
            failed = true;
            break;
          case FaultKind::kEnospc:
            op.status = ErrnoStatus("injected", ENOSPC);
            failed = true;
            break;
          case FaultKind::kShortRead:
          case FaultKind::kShortWrite:
            op.len = op.len / 2 / bs * bs;  // may become 0: no progress
            break;
          case FaultKind::kFlipBitRead:
            if (op.len > 0) flip_after_read.emplace_back(&op, rng_() % (op.len * 8));
            break;
          case FaultKind::kFlipBitWrite: {
            if (op.len == 0) break;  // an earlier rule left nothing to write
            auto copy = AllocateAligned(op.len, bs);
            std::memcpy(copy.get(), op.buf, op.len);
            std::uint64_t bit = rng_() % (op.len * 8);
            copy.get()[bit / 8] ^= static_cast<std::byte>(1u << (bit % 8));
            op.buf = copy.get();
            op.fixed_index = -1;
            corrupted.push_back(std::move(copy));
            break;
          }
          case FaultKind::kLatency:
            delay_us = std::max(delay_us, a.rule.latency_us);
            break;
        }
      }
      if (!failed) pass.push_back(&op);
    }
  }
  if (delay_us > 0) std::this_thread::sleep_for(std::chrono::microseconds(delay_us));
  std::vector<IoOp> inner_ops;
  for (IoOp* op : pass) {
    if (op->len == 0) {
      op->done = 0;
      continue;
    }
    inner_ops.push_back(*op);
  }
  if (!inner_ops.empty()) inner_->SubmitImpl(std::span<IoOp>(inner_ops));
  std::size_t k = 0;
  for (IoOp* op : pass) {
    if (op->len == 0) continue;
    op->status = inner_ops[k].status;
    op->done = inner_ops[k].done;
    ++k;
  }
  for (auto [op, bit] : flip_after_read) {
    if (op->status.ok() && bit / 8 < op->done) {
      static_cast<std::byte*>(op->buf)[bit / 8] ^= static_cast<std::byte>(1u << (bit % 8));
    }
  }
}

}  // namespace tierpool
