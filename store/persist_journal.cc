#include "store/persist_journal.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "common/checksum.h"
#include "common/logging.h"
#include "tiers/nvme_tier.h"

namespace tierpool {

namespace {

constexpr std::uint32_t kJournalMagic = 0x4E4A5054;  // "TPJN"
constexpr std::uint16_t kVersion = 2;
constexpr std::size_t kHeaderSize = 32;
// Records: magic (the kind), body length, body, XXH3-64 of the three before it.
constexpr std::uint32_t kTombstone = 0x42545054;  // "TPTB"
constexpr std::uint32_t kFileSet = 0x53465054;    // "TPFS"
constexpr std::uint32_t kNvmePut = 0x504E5054;    // "TPNP"
constexpr std::uint32_t kNvmeGone = 0x474E5054;   // "TPNG"
constexpr std::uint32_t kMaxBodyBytes = 256 * 1024;
constexpr char kName[] = "tierpool.journal";

// The tombstones the calling thread queued up to (PersistJournal::WaitForCaller).
thread_local std::uint64_t t_waits_for = 0;

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

Result<PersistJournal::Contents> PersistJournal::Read(const std::string& dir,
                                                      std::uint64_t snapshot_id) {
  const std::string path = dir + "/" + kName;
  auto bytes = ReadFile(path);
  if (!bytes.ok()) return bytes.status();
  Contents out;
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

Result<std::unique_ptr<PersistJournal>> PersistJournal::Open(const std::string& dir,
                                                             std::uint64_t snapshot_id,
                                                             std::set<Name> watched) {
  const std::string path = dir + "/" + kName;
  // Written whole (to a temporary file, synced, renamed): a crash leaves the old one or this.
  const std::string bytes = Header(snapshot_id);
  const std::string tmp = path + ".tmp";
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
  return std::unique_ptr<PersistJournal>(
      new PersistJournal(dir, snapshot_id, std::move(fd), std::move(watched)));
}

PersistJournal::PersistJournal(std::string dir, std::uint64_t snapshot_id, UniqueFd fd,
                               std::set<Name> watched)
    : dir_(std::move(dir)),
      snapshot_id_(snapshot_id),
      fd_(std::move(fd)),
      watched_(watched),
      snapshot_names_(std::move(watched)),
      file_bytes_(kHeaderSize) {
  writer_ = std::thread([this] { WriterLoop(); });
}

PersistJournal::~PersistJournal() { Close(); }

void PersistJournal::SetNvmeFiles(const std::string& dir, const std::string& file_set,
                                  std::uint32_t block_size, std::function<Status()> sync) {
  std::string body;
  Append<std::uint32_t>(&body, block_size);
  Append<std::uint32_t>(&body, static_cast<std::uint32_t>(dir.size()));
  Append<std::uint32_t>(&body, static_cast<std::uint32_t>(file_set.size()));
  body.append(dir);
  body.append(file_set);
  std::lock_guard lock(mu_);
  file_set_record_.clear();
  Frame(kFileSet, body, &file_set_record_);
  queued_ += file_set_record_;
  sync_nvme_ = std::move(sync);
  (void)QueueLocked();
}

bool PersistJournal::records_nvme() const {
  std::lock_guard lock(mu_);
  return sync_nvme_ != nullptr;
}

bool PersistJournal::watching() const {
  std::lock_guard lock(mu_);
  return !watched_.empty();
}

bool PersistJournal::Watched(const std::string& ns, const std::string& key) const {
  std::lock_guard lock(mu_);
  return !watched_.empty() && watched_.count(Name(ns, key)) != 0;
}

std::uint64_t PersistJournal::QueueLocked() {
  wake_.notify_one();
  return ++queued_seq_;
}

void PersistJournal::NoteRemoval(const std::string& ns, const std::string& key) {
  std::lock_guard lock(mu_);
  if (watched_.empty()) return;
  auto it = watched_.find(Name(ns, key));
  if (it == watched_.end()) return;
  watched_.erase(it);
  std::string body;
  Append<std::uint32_t>(&body, static_cast<std::uint32_t>(ns.size()));
  Append<std::uint32_t>(&body, static_cast<std::uint32_t>(key.size()));
  body.append(ns);
  body.append(key);
  std::string record;
  Frame(kTombstone, body, &record);
  queued_ += record;
  ForgetPutLocked(Name(ns, key));
  if (snapshot_names_.count(Name(ns, key)) != 0 && removed_.insert(Name(ns, key)).second) {
    live_bytes_ += record.size();
  }
  ++pending_tombstones_;
  t_waits_for = QueueLocked();
}

void PersistJournal::ForgetPutLocked(const Name& name) {
  auto it = live_puts_.find(name);
  if (it == live_puts_.end()) return;
  live_bytes_ -= it->second.size();
  live_puts_.erase(it);
  auto w = where_of_.find(name);
  if (w != where_of_.end()) {
    live_where_.erase(w->second);
    where_of_.erase(w);
  }
}

void PersistJournal::NoteNvmePut(const std::string& ns, const std::string& key,
                                 const std::string& meta, const Extent& extent,
                                 const RecordInfo& info) {
  std::string body;
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
  std::lock_guard lock(mu_);
  if (sync_nvme_ == nullptr || body.size() > kMaxBodyBytes) return;
  watched_.emplace(ns, key);
  std::string record;
  Frame(kNvmePut, body, &record);
  queued_ += record;
  const Name name(ns, key);
  ForgetPutLocked(name);
  const auto at = std::make_tuple(extent.arena_id, extent.offset, info.object_id);
  live_bytes_ += record.size();
  live_puts_[name] = std::move(record);
  live_where_[at] = name;
  where_of_[name] = at;
  queued_nvme_ = true;
  ++pending_puts_;
  (void)QueueLocked();
}

void PersistJournal::NoteNvmeGone(const Extent& extent, std::uint64_t object_id) {
  std::string body;
  Append<std::uint32_t>(&body, extent.arena_id);
  Append<std::uint64_t>(&body, extent.offset);
  Append<std::uint64_t>(&body, object_id);
  std::lock_guard lock(mu_);
  if (sync_nvme_ == nullptr) return;
  Frame(kNvmeGone, body, &queued_);
  if (auto w = live_where_.find(std::make_tuple(extent.arena_id, extent.offset, object_id));
      w != live_where_.end()) {
    ForgetPutLocked(Name(w->second));
  }
  (void)QueueLocked();
}

void PersistJournal::WaitForCaller() {
  if (t_waits_for == 0) return;
  std::unique_lock lock(mu_);
  // (A count from another journal of this thread's past, in tests, never waits past this one's.)
  const std::uint64_t want = std::min(t_waits_for, queued_seq_);
  durable_cv_.wait(lock, [this, want] { return durable_seq_ >= want; });
  t_waits_for = 0;
}

void PersistJournal::Flush() {
  std::unique_lock lock(mu_);
  const std::uint64_t want = queued_seq_;
  durable_cv_.wait(lock, [this, want] { return durable_seq_ >= want; });
}

void PersistJournal::WriterLoop() {
  std::unique_lock lock(mu_);
  for (;;) {
    wake_.wait(lock, [this] { return stopping_ || !queued_.empty(); });
    if (queued_.empty() && stopping_) return;
    std::string batch;
    batch.swap(queued_);
    const bool nvme = std::exchange(queued_nvme_, false);
    const std::uint64_t upto = queued_seq_;
    const std::uint64_t tombstones = std::exchange(pending_tombstones_, 0);
    const std::uint64_t puts = std::exchange(pending_puts_, 0);
    std::function<Status()> sync = sync_nvme_;
    lock.unlock();
    // One write and one sync for every record queued meanwhile (a group commit); the nvme
    // records they name are made durable first.
    Status s = fd_.valid() ? Status::Ok() : Status::FailedPrecondition("the journal failed before");
    if (s.ok() && nvme && sync) s = sync();
    if (s.ok()) s = WriteAll(fd_.get(), batch.data(), batch.size());
    if (s.ok() && ::fdatasync(fd_.get()) != 0) s = ErrnoStatus("sync the journal", errno);
    if (!s.ok() && fd_.valid()) Fail(s);
    if (s.ok()) file_bytes_ += batch.size();
    lock.lock();
    if (s.ok()) {
      tombstones_ += tombstones;
      nvme_puts_ += puts;
      durable_ok_seq_ = upto;
    } else {
      failed_ = true;
    }
    durable_seq_ = upto;
    durable_cv_.notify_all();
    const std::uint64_t live = kHeaderSize + file_set_record_.size() + live_bytes_;
    if (s.ok() && file_bytes_ > compact_bytes_ && file_bytes_ > 2 * live) {
      lock.unlock();
      if (Status c = Compact(); !c.ok()) {
        // The journal as it was stays; try again once it has grown as much again.
        spdlog::warn("persist: compacting {}/{}: {}", dir_, kName, c.ToString());
        lock.lock();
        compact_bytes_ = file_bytes_ * 2;
        continue;
      }
      lock.lock();
    }
  }
}

std::string PersistJournal::LiveRecordsLocked() const {
  std::string out = Header(snapshot_id_) + file_set_record_;
  for (const auto& [ns, key] : removed_) {
    std::string body;
    Append<std::uint32_t>(&body, static_cast<std::uint32_t>(ns.size()));
    Append<std::uint32_t>(&body, static_cast<std::uint32_t>(key.size()));
    body.append(ns);
    body.append(key);
    Frame(kTombstone, body, &out);
  }
  for (const auto& [name, record] : live_puts_) out += record;
  return out;
}

Status PersistJournal::Compact() {
  std::string bytes;
  std::function<Status()> sync;
  {
    std::lock_guard lock(mu_);
    bytes = LiveRecordsLocked();
    sync = sync_nvme_;
  }
  // Its nvme puts may include some still queued: their bytes go to disk before the records do.
  if (sync) TIERPOOL_RETURN_IF_ERROR(sync());
  const std::string path = dir_ + "/" + kName, tmp = path + ".tmp";
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
  if (UniqueFd d(::open(dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC)); d.valid()) {
    (void)::fsync(d.get());
  }
  UniqueFd fd(::open(path.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC | O_NOFOLLOW));
  if (!fd.valid()) return ErrnoStatus("open " + path, errno);
  fd_ = std::move(fd);
  file_bytes_ = bytes.size();
  std::lock_guard lock(mu_);
  ++compactions_;
  return Status::Ok();
}

void PersistJournal::set_compact_bytes(std::uint64_t bytes) {
  std::lock_guard lock(mu_);
  compact_bytes_ = bytes;
}

std::uint64_t PersistJournal::compactions() const {
  std::lock_guard lock(mu_);
  return compactions_;
}

void PersistJournal::Fail(const Status& why) {
  // Without durable records a crash could bring back deleted objects: the snapshot and the
  // journal go aside, and a crash then brings back nothing rather than anything deleted.
  const std::string snapshot = dir_ + "/tierpool.snapshot", journal = dir_ + "/" + kName;
  const bool moved =
      ::rename(snapshot.c_str(), (snapshot + ".stale").c_str()) == 0 || errno == ENOENT;
  const bool moved_journal = ::rename(journal.c_str(), (journal + ".stale").c_str()) == 0;
  if (UniqueFd d(::open(dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC)); d.valid()) {
    (void)::fsync(d.get());
  }
  spdlog::critical(
      "persist: cannot record in {}/{} ({}); {} the snapshot and journal: until the next clean "
      "shutdown a crash brings nothing back",
      dir_, kName, why.ToString(), moved && moved_journal ? "moved aside" : "could not move aside");
  fd_.reset();
}

void PersistJournal::Close() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (writer_.joinable()) writer_.join();
}

void PersistJournal::Remove(const std::string& dir) {
  const std::string path = dir + "/" + kName;
  ::unlink(path.c_str());
  if (UniqueFd d(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC)); d.valid()) {
    (void)::fsync(d.get());
  }
}

std::uint64_t PersistJournal::tombstones() const {
  std::lock_guard lock(mu_);
  return tombstones_;
}

void PersistJournal::VisitCounters(
    const std::function<void(const std::string&, std::uint64_t)>& visit) const {
  std::uint64_t tombstones = 0, puts = 0, queued = 0, durable = 0, compactions = 0;
  bool failed = false;
  {
    std::lock_guard lock(mu_);
    compactions = compactions_;
    tombstones = tombstones_;
    puts = nvme_puts_;
    queued = queued_seq_;
    durable = durable_ok_seq_;
    failed = failed_;
  }
  visit("persist_tombstones", tombstones);
  visit("persist_nvme_records", puts);
  visit("persist_records_queued", queued);
  visit("persist_records_durable", durable);
  visit("persist_journal_compactions", compactions);
  visit("persist_journal_failed", failed ? 1 : 0);
}

std::uint64_t PersistJournal::nvme_puts() const {
  std::lock_guard lock(mu_);
  return nvme_puts_;
}

}  // namespace tierpool
