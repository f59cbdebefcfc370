#include "store/snapshot.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <limits>

#include "common/checksum.h"
#include "common/logging.h"
#include "common/posix.h"
#include "common/units.h"
#include "proto/tierpool.pb.h"
#include "transport/wire_meta.h"

namespace tierpool {

namespace {

constexpr std::uint32_t kFileMagic = 0x4E535054;    // "TPSN"
constexpr std::uint32_t kRecordMagic = 0x424F5054;  // "TPOB"
constexpr std::uint16_t kVersion = 1;
constexpr std::uint16_t kFileHeaderSize = 32;
constexpr std::uint16_t kRecordHeaderSize = 48;
constexpr std::uint16_t kObjectRecord = 1;
constexpr std::uint16_t kEndRecord = 2;
constexpr std::uint32_t kMaxMetaBytes = 64 * 1024;
constexpr char kName[] = "tierpool.snapshot";

std::uint64_t UnixMillis() {
  return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                        std::chrono::system_clock::now().time_since_epoch())
                                        .count());
}

template <typename T>
void Put(std::uint8_t* at, T v) {
  std::memcpy(at, &v, sizeof(T));  // little-endian hosts only (x86-64, aarch64)
}
template <typename T>
T Get(const std::uint8_t* at) {
  T v;
  std::memcpy(&v, at, sizeof(T));
  return v;
}

struct RecordHeader {
  std::uint16_t kind = 0;
  std::uint32_t meta_len = 0;
  std::uint64_t payload_len = 0;  // end record: the number of object records
  std::uint64_t payload_sum = 0;  // end record: their payload bytes
  std::uint64_t meta_sum = 0;
};

void Encode(const RecordHeader& r, std::uint8_t out[kRecordHeaderSize]) {
  std::memset(out, 0, kRecordHeaderSize);
  Put<std::uint32_t>(out, kRecordMagic);
  Put<std::uint16_t>(out + 4, r.kind);
  Put<std::uint16_t>(out + 6, kRecordHeaderSize);
  Put<std::uint32_t>(out + 8, r.meta_len);
  Put<std::uint64_t>(out + 16, r.payload_len);
  Put<std::uint64_t>(out + 24, r.payload_sum);
  Put<std::uint64_t>(out + 32, r.meta_sum);
  Put<std::uint64_t>(out + 40, Xxh3(out, 40));
}

Result<RecordHeader> Decode(const std::uint8_t in[kRecordHeaderSize]) {
  if (Get<std::uint32_t>(in) != kRecordMagic || Get<std::uint16_t>(in + 6) != kRecordHeaderSize) {
    return Status::DataLoss("not a record header");
  }
  if (Get<std::uint64_t>(in + 40) != Xxh3(in, 40)) {
    return Status::DataLoss("record header checksum mismatch");
  }
  RecordHeader r;
  r.kind = Get<std::uint16_t>(in + 4);
  r.meta_len = Get<std::uint32_t>(in + 8);
  r.payload_len = Get<std::uint64_t>(in + 16);
  r.payload_sum = Get<std::uint64_t>(in + 24);
  r.meta_sum = Get<std::uint64_t>(in + 32);
  return r;
}

Status WriteAll(int fd, const void* data, std::size_t size, const std::string& path) {
  const auto* p = static_cast<const std::uint8_t*>(data);
  while (size > 0) {
    ssize_t n = ::write(fd, p, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return ErrnoStatus("write " + path, errno);
    p += n;
    size -= static_cast<std::size_t>(n);
  }
  return Status::Ok();
}

// Reads exactly size bytes; false at the end of the file (or on an error).
bool ReadAll(int fd, void* data, std::size_t size) {
  auto* p = static_cast<std::uint8_t*>(data);
  while (size > 0) {
    ssize_t n = ::read(fd, p, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    p += n;
    size -= static_cast<std::size_t>(n);
  }
  return true;
}

Status SyncDir(const std::string& dir) {
  UniqueFd d(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (d.get() < 0 || ::fsync(d.get()) != 0) return ErrnoStatus("sync " + dir, errno);
  return Status::Ok();
}

}  // namespace

Status CheckPersistDir(const std::string& dir) {
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0) {
    return ErrnoStatus("--persist " + dir + (errno == ENOENT ? " (create it first)" : ""), errno);
  }
  if (!S_ISDIR(st.st_mode))
    return Status::InvalidArgument("--persist " + dir + " is not a directory");
  // Writable, for real (a read-only mount passes access()): a file made and removed.
  const std::string probe = dir + "/.tierpool-probe-" + std::to_string(::getpid());
  UniqueFd fd(::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600));
  if (!fd.valid()) return ErrnoStatus("--persist " + dir + ": cannot create a file there", errno);
  fd.reset();
  ::unlink(probe.c_str());
  for (const char* name :
       {"tierpool.snapshot", "tierpool.snapshot.tmp", "tierpool.journal", "tierpool.journal.tmp"}) {
    const std::string path = dir + "/" + name;
    struct stat f {};
    if (::lstat(path.c_str(), &f) != 0) {
      if (errno == ENOENT) continue;
      return ErrnoStatus("--persist: " + path, errno);
    }
    if (!S_ISREG(f.st_mode)) {
      return Status::FailedPrecondition("--persist: " + path +
                                        " is not a regular file (a FIFO, a link, a directory?): "
                                        "move it away");
    }
    if (std::string(name).ends_with(".tmp")) {
      spdlog::warn("--persist: removing {}, left by a crash while it was written", path);
      ::unlink(path.c_str());
    }
  }
  return Status::Ok();
}

namespace {

// dir/tierpool.snapshot open for reading, if it is a regular file (O_NONBLOCK: a FIFO in its
// place would hang the open).
Result<UniqueFd> OpenSnapshot(const std::string& path) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOFOLLOW));
  if (!fd.valid()) {
    if (errno == ENOENT) return Status::NotFound("no snapshot at " + path);
    return ErrnoStatus("open " + path, errno);
  }
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return ErrnoStatus("stat " + path, errno);
  if (!S_ISREG(st.st_mode)) {
    return Status::FailedPrecondition(path + " is not a regular file: move it away");
  }
  return fd;
}

Result<SnapshotStats> WriteSnapshot(ObjectStore& store, const std::string& dir,
                                    const std::string& path, const std::string& tmp);

}  // namespace

Result<std::uint64_t> SnapshotId(const std::string& dir) {
  const std::string path = dir + "/" + kName;
  auto fd = OpenSnapshot(path);
  if (!fd.ok()) return fd.status();
  std::uint8_t header[kFileHeaderSize];
  if (!ReadAll(fd->get(), header, sizeof(header)) || Get<std::uint32_t>(header) != kFileMagic ||
      Get<std::uint64_t>(header + 24) != Xxh3(header, 24)) {
    return Status::DataLoss(path + " is not a tierpool snapshot (bad header)");
  }
  return Get<std::uint64_t>(header + 24);
}

Result<SnapshotStats> SaveSnapshot(ObjectStore& store, const std::string& dir) {
  const std::string path = dir + "/" + kName;
  const std::string tmp = path + ".tmp";
  auto saved = WriteSnapshot(store, dir, path, tmp);
  if (!saved.ok()) ::unlink(tmp.c_str());  // the previous snapshot stays as it was
  return saved;
}

namespace {

Result<SnapshotStats> WriteSnapshot(ObjectStore& store, const std::string& dir,
                                    const std::string& path, const std::string& tmp) {
  UniqueFd fd(::open(tmp.c_str(),
                     O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NONBLOCK | O_NOFOLLOW, 0600));
  if (fd.get() < 0) return ErrnoStatus("create " + tmp, errno);
  std::uint8_t header[kFileHeaderSize] = {};
  Put<std::uint32_t>(header, kFileMagic);
  Put<std::uint16_t>(header + 4, kVersion);
  Put<std::uint16_t>(header + 6, kFileHeaderSize);
  Put<std::uint64_t>(header + 8, UnixMillis());
  Put<std::uint64_t>(header + 24, Xxh3(header, 24));
  TIERPOOL_RETURN_IF_ERROR(WriteAll(fd.get(), header, sizeof(header), tmp));

  SnapshotStats stats;
  std::string bytes, meta_bytes;
  bool truncated = false;
  for (const ObjectMeta& m : store.List("", "", "", std::numeric_limits<std::uint32_t>::max(),
                                        /*all_namespaces=*/true, &truncated)) {
    if (m.durability != Durability::kRetained) {
      ++stats.skipped;
      continue;
    }
    auto read = store.ReadCopy(m.ns, m.key, &bytes);  // checked against its checksum
    if (!read.ok()) {
      ++stats.not_restored;
      spdlog::error("snapshot: {}/{} not saved: {}", m.ns, m.key, read.status().ToString());
      continue;
    }
    wire::ObjectMeta w;
    transport::ToWire(*read, &w);
    w.SerializeToString(&meta_bytes);
    RecordHeader r{kObjectRecord, static_cast<std::uint32_t>(meta_bytes.size()), bytes.size(),
                   read->checksum, Xxh3(meta_bytes.data(), meta_bytes.size())};
    std::uint8_t rh[kRecordHeaderSize];
    Encode(r, rh);
    TIERPOOL_RETURN_IF_ERROR(WriteAll(fd.get(), rh, sizeof(rh), tmp));
    TIERPOOL_RETURN_IF_ERROR(WriteAll(fd.get(), meta_bytes.data(), meta_bytes.size(), tmp));
    TIERPOOL_RETURN_IF_ERROR(WriteAll(fd.get(), bytes.data(), bytes.size(), tmp));
    ++stats.objects;
    stats.bytes += bytes.size();
  }
  RecordHeader end{kEndRecord, 0, stats.objects, stats.bytes, 0};
  std::uint8_t eh[kRecordHeaderSize];
  Encode(end, eh);
  TIERPOOL_RETURN_IF_ERROR(WriteAll(fd.get(), eh, sizeof(eh), tmp));
  if (::fsync(fd.get()) != 0) return ErrnoStatus("sync " + tmp, errno);
  fd.reset();
  if (::rename(tmp.c_str(), path.c_str()) != 0) return ErrnoStatus("rename " + tmp, errno);
  TIERPOOL_RETURN_IF_ERROR(SyncDir(dir));
  stats.id = Get<std::uint64_t>(header + 24);
  return stats;
}

}  // namespace

Status RestoreObject(ObjectStore& store, const ObjectMeta& m,
                     const std::function<bool(std::byte* dst)>& fill) {
  const PutSpec spec{.ns = m.ns,
                     .key = m.key,
                     .size = m.size,
                     .dtype = m.dtype,
                     .shape = m.shape,
                     .kind = m.kind,
                     .durability = m.durability};
  auto res = store.Reserve(spec, kStoreOwner);
  if (!res.ok()) return res.status();
  std::byte* dst = m.size > 0 ? store.HostAddress(res->extent) : nullptr;
  if (!fill(dst)) {
    (void)store.Abort(res->id, kStoreOwner);
    return Status::IoError("its source ends inside it");
  }
  const std::uint64_t sum = Xxh3(dst, m.size);
  if (sum != m.checksum) {
    (void)store.Abort(res->id, kStoreOwner);
    return Status::DataLoss("bytes do not match their checksum");
  }
  return store.Commit(res->id, sum, kStoreOwner);
}

Result<SnapshotStats> LoadSnapshot(ObjectStore& store, const std::string& dir,
                                   const std::set<std::pair<std::string, std::string>>& deleted) {
  const std::string path = dir + "/" + kName;
  auto opened = OpenSnapshot(path);
  if (!opened.ok()) return opened.status();
  UniqueFd fd = std::move(opened).value();
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return ErrnoStatus("stat " + path, errno);
  const std::uint64_t file_size = static_cast<std::uint64_t>(st.st_size);
  std::uint8_t header[kFileHeaderSize];
  if (!ReadAll(fd.get(), header, sizeof(header)) || Get<std::uint32_t>(header) != kFileMagic ||
      Get<std::uint64_t>(header + 24) != Xxh3(header, 24)) {
    return Status::DataLoss(path + " is not a tierpool snapshot (bad header)");
  }
  if (Get<std::uint16_t>(header + 4) != kVersion) {
    return Status::FailedPrecondition(path + " has snapshot format version " +
                                      std::to_string(Get<std::uint16_t>(header + 4)) +
                                      "; this tierpoold reads version 1");
  }
  SnapshotStats stats;
  stats.id = Get<std::uint64_t>(header + 24);
  stats.complete = false;
  std::uint64_t at = kFileHeaderSize;
  std::string meta_bytes;
  std::uint64_t end_count = 0, end_bytes = 0, seen = 0, seen_bytes = 0;
  for (;;) {
    std::uint8_t rh[kRecordHeaderSize];
    if (!ReadAll(fd.get(), rh, sizeof(rh))) break;  // ended without an end record
    at += kRecordHeaderSize;
    auto r = Decode(rh);
    // A bad header means the lengths cannot be trusted: nothing after it can be found.
    if (!r.ok()) {
      spdlog::error("snapshot {}: at byte {}: {}; the rest is not read", path, at,
                    r.status().message());
      ++stats.skipped;
      break;
    }
    if (r->kind == kEndRecord) {
      end_count = r->payload_len;
      end_bytes = r->payload_sum;
      stats.complete = true;
      break;
    }
    if (r->kind != kObjectRecord || r->meta_len > kMaxMetaBytes ||
        r->payload_len > file_size - std::min(file_size, at + r->meta_len)) {
      spdlog::error(
          "snapshot {}: at byte {}: a record with impossible lengths; the rest is not read", path,
          at);
      ++stats.skipped;
      break;
    }
    ++seen;
    seen_bytes += r->payload_len;
    meta_bytes.resize(r->meta_len);
    if (!ReadAll(fd.get(), meta_bytes.data(), meta_bytes.size())) break;
    at += r->meta_len;
    wire::ObjectMeta w;
    const bool meta_ok = Xxh3(meta_bytes.data(), meta_bytes.size()) == r->meta_sum &&
                         w.ParseFromString(meta_bytes) && w.size() == r->payload_len &&
                         w.checksum() == r->payload_sum && wire::ObjectKind_IsValid(w.kind()) &&
                         wire::Durability_IsValid(w.durability());
    auto skip_payload = [&] {
      at += r->payload_len;
      return ::lseek(fd.get(), static_cast<off_t>(at), SEEK_SET) >= 0;
    };
    if (!meta_ok) {
      ++stats.skipped;
      spdlog::error("snapshot {}: record {} has bad metadata; skipped", path, seen);
      if (!skip_payload()) break;
      continue;
    }
    const ObjectMeta m = transport::MetaFromWire(w);
    if (!deleted.empty() && deleted.count({m.ns, m.key}) != 0) {
      ++stats.deleted;  // deleted or replaced after this snapshot was read: it stays gone
      if (!skip_payload()) break;
      continue;
    }
    bool read = false;
    Status s = RestoreObject(store, m, [&](std::byte* dst) {
      read = true;
      return ReadAll(fd.get(), dst, m.size);
    });
    if (!read) {  // no room: its bytes were never read
      ++stats.not_restored;
      spdlog::error("snapshot {}: {}/{} not restored: {}", path, m.ns, m.key, s.ToString());
      if (!skip_payload()) break;
      continue;
    }
    at += r->payload_len;
    if (s.code() == StatusCode::kIoError || s.code() == StatusCode::kDataLoss) {
      ++stats.skipped;
      spdlog::error("snapshot {}: {}/{}: {}; skipped", path, m.ns, m.key,
                    s.code() == StatusCode::kDataLoss ? "bytes do not match their checksum"
                                                      : "file ends inside it");
      if (s.code() == StatusCode::kIoError) break;
      continue;
    }
    TIERPOOL_RETURN_IF_ERROR(s);
    stats.names.emplace(m.ns, m.key);
    ++stats.objects;
    stats.bytes += m.size;
  }
  if (stats.complete && (end_count != seen || end_bytes != seen_bytes)) {
    spdlog::error("snapshot {}: its end record counts {} objects, {} found", path, end_count, seen);
    stats.complete = false;
  }
  if (!stats.complete) spdlog::error("snapshot {} is incomplete: some objects are lost", path);
  // Kept: the last good state until the next clean shutdown replaces it; what is deleted or
  // replaced meanwhile goes in the journal (store/persist_journal.h).
  return stats;
}

}  // namespace tierpool
