#include "tiers/tier.h"

#include <utility>

namespace tierpool {

IoCompletion Tier::Counted(IoCompletion done, bool is_write, std::uint64_t bytes) {
  return [this, done = std::move(done), is_write, bytes](Status s) {
    if (s.ok()) {
      (is_write ? writes_ : reads_).fetch_add(1, std::memory_order_relaxed);
      (is_write ? bytes_written_ : bytes_read_).fetch_add(bytes, std::memory_order_relaxed);
    } else {
      io_failures_.fetch_add(1, std::memory_order_relaxed);
    }
    done(std::move(s));
  };
}

void Tier::Read(const Extent& src, const RecordInfo& info, std::byte* dst, IoCompletion done) {
  if (src.length < info.size) {
    done(Status::Internal("read of " + std::to_string(info.size) + " bytes from an extent of " +
                          std::to_string(src.length)));
    return;
  }
  ReadImpl(src, info, dst, Counted(std::move(done), false, info.size));
}

void Tier::Write(const Extent& dst, const RecordInfo& info, const std::byte* src,
                 IoCompletion done) {
  if (dst.length < Footprint(info.size)) {
    done(Status::Internal("write of " + std::to_string(info.size) + " bytes to an extent of " +
                          std::to_string(dst.length)));
    return;
  }
  WriteImpl(dst, info, src, Counted(std::move(done), true, info.size));
}

TierIoCounters Tier::io_counters() const {
  return {reads_.load(std::memory_order_relaxed), writes_.load(std::memory_order_relaxed),
          bytes_read_.load(std::memory_order_relaxed),
          bytes_written_.load(std::memory_order_relaxed),
          io_failures_.load(std::memory_order_relaxed)};
}

}  // namespace tierpool
