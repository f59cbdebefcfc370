#include "store/journal_records.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <optional>
#include <tuple>

#include "common/checksum.h"
#include "common/logging.h"
#include "tiers/nvme_tier.h"

namespace tierpool::journal_records {

namespace {

constexpr std::uint32_t kJournalMagic = 0x4E4A5054;  // "TPJN"
constexpr std::uint16_t kVersion = 2;
// Records: magic (the kind), body length, body, XXH3-64 of the three before it.
constexpr std::uint32_t kTombstone = 0x42545054;  // "TPTB"
constexpr std::uint32_t kFileSet = 0x53465054;    // "TPFS"
constexpr std::uint32_t kNvmePut = 0x504E5054;    // "TPNP"
constexpr std::uint32_t kNvmeGone = 0x474E5054;   // "TPNG"

template <typename T>
void Append(std::string* out, T v) {
  out->append(reinterpret_cast<const char*>(&v), sizeof v);  // little-endian hosts only
}
template <typename T>
T Load(const char* at) {
  T v;
  std::memcpy(&v, at, sizeof v);
  return v;
}

// Frames `body` as a record of `kind` at the end of out.
void Frame(std::uint32_t kind, const std::string& body, std::string* out) {
  const std::size_t start = out->size();
  Append<std::uint32_t>(out, kind);
  Append<std::uint32_t>(out, static_cast<std::uint32_t>(body.size()));
  out->append(body);
  Append<std::uint64_t>(out, Xxh3(out->data() + start, out->size() - start));
}

// Reads a record's body field by field; any read past its end fails the record.
class BodyReader {
 public:
  explicit BodyReader(std::string_view body) : b_(body) {}
  template <typename T>
  bool Get(T* v) {
    if (b_.size() - at_ < sizeof(T)) return false;
    *v = Load<T>(b_.data() + at_);
    at_ += sizeof(T);
    return true;
  }
  bool Bytes(std::uint32_t n, std::string* out) {
    if (b_.size() - at_ < n) return false;
    out->assign(b_.data() + at_, n);
    at_ += n;
    return true;
  }
  bool done() const { return at_ == b_.size(); }

 private:
  std::string_view b_;
  std::size_t at_ = 0;
};

// The journal's bytes, when it is a regular file (a FIFO or a device in its place is refused:
// opening it without O_NONBLOCK would hang the start).
Result<std::string> ReadFile(const std::string& path) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOFOLLOW));
  if (!fd.valid()) {
    if (errno == ENOENT) return std::string();
    return ErrnoStatus("open " + path, errno);
  }
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return ErrnoStatus("stat " + path, errno);
  if (!S_ISREG(st.st_mode)) {
    return Status::FailedPrecondition(path + " is not a regular file: move it away");
  }
  std::string bytes(static_cast<std::size_t>(st.st_size), '\0');
  std::size_t got = 0;
  while (got < bytes.size()) {
    const ssize_t n = ::read(fd.get(), bytes.data() + got, bytes.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += static_cast<std::size_t>(n);
  }
  bytes.resize(got);
  return bytes;
}

// Applies the records of `b` (after its header) to `out` in order. Returns where the whole
// records end.
std::size_t ApplyRecords(const std::string& b, PersistJournal::Contents* out) {
  using Name = PersistJournal::Name;
  struct Set {
    std::string dir, name;
    std::uint32_t block_size = 0;
  };
  std::optional<Set> set;  // the file set of the nvme records that follow
  // (set, file, offset, object id) of each live nvme record -> its name, for the gones. (Empty
  // objects have no bytes on nvme, and all sit at offset 0: the id tells them apart.)
  std::map<std::tuple<std::string, std::uint32_t, std::uint64_t, std::uint64_t>, Name> where;
  std::size_t at = kHeaderSize;
  while (b.size() - at >= 16) {
    const char* p = b.data() + at;
    const std::uint32_t kind = Load<std::uint32_t>(p), len = Load<std::uint32_t>(p + 4);
    if (len > kMaxBodyBytes || b.size() - at < 8 + std::size_t{len} + 8) break;  // torn
    if (Load<std::uint64_t>(p + 8 + len) != Xxh3(p, 8 + len)) break;
    BodyReader r(std::string_view(p + 8, len));
    bool ok = false;
    if (kind == kTombstone) {
      std::uint32_t ns_len = 0, key_len = 0;
      Name n;
      ok = r.Get(&ns_len) && r.Get(&key_len) && r.Bytes(ns_len, &n.first) &&
           r.Bytes(key_len, &n.second) && r.done();
      if (ok) {
        out->removed.insert(n);
        out->from_nvme.erase(n);
      }
    } else if (kind == kFileSet) {
      std::uint32_t dir_len = 0, set_len = 0;
      Set s;
      ok = r.Get(&s.block_size) && r.Get(&dir_len) && r.Get(&set_len) && r.Bytes(dir_len, &s.dir) &&
           r.Bytes(set_len, &s.name) && r.done() &&
           // Only files so named are ever read or removed.
           IsNvmeFileName("tierpool-nvme-" + s.name + "-0.dat") && !s.dir.empty() &&
           s.block_size >= 512 && (s.block_size & (s.block_size - 1)) == 0;
      if (ok) {
        out->file_sets.emplace(s.dir, s.name);
        set = std::move(s);
      }
    } else if (kind == kNvmePut) {
      std::uint32_t ns_len = 0, key_len = 0, meta_len = 0;
      Name n;
      PersistJournal::NvmeRecord rec;
      ok = set.has_value() && r.Get(&ns_len) && r.Get(&key_len) && r.Get(&meta_len) &&
           r.Get(&rec.extent.arena_id) && r.Get(&rec.extent.offset) && r.Get(&rec.extent.length) &&
           r.Get(&rec.info.key_hash) && r.Get(&rec.info.object_id) && r.Get(&rec.info.size) &&
           r.Get(&rec.info.checksum) && r.Bytes(ns_len, &n.first) && r.Bytes(key_len, &n.second) &&
           r.Bytes(meta_len, &rec.meta) && r.done();
      if (ok) {
        rec.dir = set->dir;
        rec.file_set = set->name;
        rec.block_size = set->block_size;
        where[{set->name, rec.extent.arena_id, rec.extent.offset, rec.info.object_id}] = n;
        out->from_nvme[n] = std::move(rec);
      }
    } else if (kind == kNvmeGone) {
      std::uint32_t file = 0;
      std::uint64_t offset = 0, object_id = 0;
      ok = set.has_value() && r.Get(&file) && r.Get(&offset) && r.Get(&object_id) && r.done();
      if (ok) {
        auto w = where.find({set->name, file, offset, object_id});
        if (w != where.end()) {
          auto it = out->from_nvme.find(w->second);
          if (it != out->from_nvme.end() && it->second.file_set == set->name &&
              it->second.extent.arena_id == file && it->second.extent.offset == offset &&
              it->second.info.object_id == object_id) {
            out->from_nvme.erase(it);
          }
          where.erase(w);
        }
      }
    }
    if (!ok) break;  // an unknown kind or a body that does not parse: nothing after is trusted
    ++out->records;
    at += 8 + std::size_t{len} + 8;
  }
  return at;
}

}  // namespace

std::string Header(std::uint64_t snapshot_id) {
  std::string h;
  Append<std::uint32_t>(&h, kJournalMagic);
  Append<std::uint16_t>(&h, kVersion);
  Append<std::uint16_t>(&h, kHeaderSize);
  Append<std::uint64_t>(&h, snapshot_id);
  Append<std::uint64_t>(&h, 0);
  Append<std::uint64_t>(&h, Xxh3(h.data(), h.size()));
  return h;
}

Status WriteAll(int fd, const char* p, std::size_t n) {
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return ErrnoStatus("write the journal", w < 0 ? errno : ENOSPC);
    p += w;
    n -= static_cast<std::size_t>(w);
  }
  return Status::Ok();
}

std::string Tombstone(const std::string& ns, const std::string& key) {
  std::string body, out;
  Append<std::uint32_t>(&body, static_cast<std::uint32_t>(ns.size()));
  Append<std::uint32_t>(&body, static_cast<std::uint32_t>(key.size()));
  body.append(ns);
  body.append(key);
  Frame(kTombstone, body, &out);
  return out;
}

std::string FileSet(const std::string& dir, const std::string& file_set, std::uint32_t block_size) {
  std::string body, out;
  Append<std::uint32_t>(&body, block_size);
  Append<std::uint32_t>(&body, static_cast<std::uint32_t>(dir.size()));
  Append<std::uint32_t>(&body, static_cast<std::uint32_t>(file_set.size()));
  body.append(dir);
  body.append(file_set);
  Frame(kFileSet, body, &out);
  return out;
}

std::string NvmePut(const std::string& ns, const std::string& key, const std::string& meta,
                    const Extent& extent, const RecordInfo& info) {
  std::string body, out;
  Append<std::uint32_t>(&body, static_cast<std::uint32_t>(ns.size()));
  Append<std::uint32_t>(&body, static_cast<std::uint32_t>(key.size()));
  Append<std::uint32_t>(&body, static_cast<std::uint32_t>(meta.size()));
  Append<std::uint32_t>(&body, extent.arena_id);
  Append<std::uint64_t>(&body, extent.offset);
  Append<std::uint64_t>(&body, extent.length);
  Append<std::uint64_t>(&body, info.key_hash);
  Append<std::uint64_t>(&body, info.object_id);
  Append<std::uint64_t>(&body, info.size);
  Append<std::uint64_t>(&body, info.checksum);
  body.append(ns);
  body.append(key);
  body.append(meta);
  if (body.size() > kMaxBodyBytes) return out;
  Frame(kNvmePut, body, &out);
  return out;
}

std::string NvmeGone(const Extent& extent, std::uint64_t object_id) {
  std::string body, out;
  Append<std::uint32_t>(&body, extent.arena_id);
  Append<std::uint64_t>(&body, extent.offset);
  Append<std::uint64_t>(&body, object_id);
  Frame(kNvmeGone, body, &out);
  return out;
}

Result<PersistJournal::Contents> Read(const std::string& dir, std::uint64_t snapshot_id) {
  const std::string path = dir + "/" + kName;
  auto bytes = ReadFile(path);
  if (!bytes.ok()) return bytes.status();
  PersistJournal::Contents out;
  const std::string& b = *bytes;
  if (b.size() < kHeaderSize || b.compare(0, kHeaderSize, Header(snapshot_id)) != 0) {
    if (!b.empty()) spdlog::warn("{} belongs to another snapshot: ignored", path);
    return out;
  }
  const std::size_t end = ApplyRecords(b, &out);
  if (end != b.size()) {
    spdlog::warn("{}: {} bytes after the last whole record are ignored", path, b.size() - end);
  }
  return out;
}

Result<UniqueFd> Replace(const std::string& dir, const std::string& bytes) {
  const std::string path = dir + "/" + kName, tmp = path + ".tmp";
  {
    UniqueFd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600));
    if (!fd.valid()) return ErrnoStatus("create " + tmp, errno);
    Status w = WriteAll(fd.get(), bytes.data(), bytes.size());
    if (w.ok() && ::fsync(fd.get()) != 0) w = ErrnoStatus("sync " + tmp, errno);
    if (!w.ok()) {
      ::unlink(tmp.c_str());
      return w;
    }
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    return ErrnoStatus("rename " + tmp, err);
  }
  UniqueFd fd(::open(path.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC | O_NOFOLLOW));
  if (!fd.valid()) return ErrnoStatus("open " + path, errno);
  if (UniqueFd d(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
      !d.valid() || ::fsync(d.get()) != 0) {
    return ErrnoStatus("sync " + dir, errno);
  }
  return fd;
}

}  // namespace tierpool::journal_records
