#include "store/removal_journal.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "common/checksum.h"
#include "common/logging.h"

namespace tierpool {

namespace {

constexpr std::uint32_t kJournalMagic = 0x4E4A5054;    // "TPJN"
constexpr std::uint32_t kTombstoneMagic = 0x42545054;  // "TPTB"
constexpr std::uint16_t kVersion = 1;
constexpr std::size_t kHeaderSize = 32;
constexpr std::uint32_t kMaxNameBytes = 64 * 1024;
constexpr char kName[] = "tierpool.journal";

// The tombstones the calling thread queued up to (RemovalJournal::WaitForCaller).
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

void EncodeTombstone(const std::string& ns, const std::string& key, std::string* out) {
  const std::size_t start = out->size();
  Append<std::uint32_t>(out, kTombstoneMagic);
  Append<std::uint32_t>(out, static_cast<std::uint32_t>(ns.size()));
  Append<std::uint32_t>(out, static_cast<std::uint32_t>(key.size()));
  out->append(ns);
  out->append(key);
  Append<std::uint64_t>(out, Xxh3(out->data() + start, out->size() - start));
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

}  // namespace

Result<std::set<RemovalJournal::Name>> RemovalJournal::Read(const std::string& dir,
                                                            std::uint64_t snapshot_id) {
  const std::string path = dir + "/" + kName;
  auto bytes = ReadFile(path);
  if (!bytes.ok()) return bytes.status();
  std::set<Name> out;
  const std::string& b = *bytes;
  if (b.size() < kHeaderSize || b.compare(0, kHeaderSize, Header(snapshot_id)) != 0) {
    if (!b.empty()) spdlog::warn("{} belongs to another snapshot: ignored", path);
    return out;
  }
  std::size_t at = kHeaderSize;
  while (b.size() - at >= 12) {
    const char* p = b.data() + at;
    if (Load<std::uint32_t>(p) != kTombstoneMagic) break;
    const std::uint32_t ns_len = Load<std::uint32_t>(p + 4), key_len = Load<std::uint32_t>(p + 8);
    if (ns_len > kMaxNameBytes || key_len > kMaxNameBytes) break;
    const std::size_t len = 12 + std::size_t{ns_len} + key_len;
    if (b.size() - at < len + 8) break;  // torn: the crash came while it was written
    if (Load<std::uint64_t>(p + len) != Xxh3(p, len)) break;
    out.emplace(std::string(p + 12, ns_len), std::string(p + 12 + ns_len, key_len));
    at += len + 8;
  }
  if (at != b.size()) {
    spdlog::warn("{}: {} bytes after the last whole tombstone are ignored", path, b.size() - at);
  }
  return out;
}

Result<std::unique_ptr<RemovalJournal>> RemovalJournal::Open(const std::string& dir,
                                                             std::uint64_t snapshot_id,
                                                             std::set<Name> watched) {
  const std::string path = dir + "/" + kName;
  auto kept = Read(dir, snapshot_id);
  if (!kept.ok()) return kept.status();
  // Rewritten whole (to a temporary file, synced, renamed): its own tombstones only, none torn.
  std::string bytes = Header(snapshot_id);
  for (const auto& [ns, key] : *kept) EncodeTombstone(ns, key, &bytes);
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
  for (const Name& gone : *kept) watched.erase(gone);
  return std::unique_ptr<RemovalJournal>(
      new RemovalJournal(dir, std::move(fd), std::move(watched)));
}

RemovalJournal::RemovalJournal(std::string dir, UniqueFd fd, std::set<Name> watched)
    : dir_(std::move(dir)), fd_(std::move(fd)), watched_(std::move(watched)) {
  writer_ = std::thread([this] { WriterLoop(); });
}

RemovalJournal::~RemovalJournal() { Close(); }

bool RemovalJournal::watching() const {
  std::lock_guard lock(mu_);
  return !watched_.empty();
}

bool RemovalJournal::Watched(const std::string& ns, const std::string& key) const {
  std::lock_guard lock(mu_);
  return !watched_.empty() && watched_.count(Name(ns, key)) != 0;
}

void RemovalJournal::NoteRemoval(const std::string& ns, const std::string& key) {
  std::lock_guard lock(mu_);
  if (watched_.empty()) return;
  auto it = watched_.find(Name(ns, key));
  if (it == watched_.end()) return;
  watched_.erase(it);
  EncodeTombstone(ns, key, &queued_);
  t_waits_for = ++queued_seq_;
  wake_.notify_one();
}

void RemovalJournal::WaitForCaller() {
  if (t_waits_for == 0) return;
  std::unique_lock lock(mu_);
  // (A count from another journal of this thread's past, in tests, never waits past this one's.)
  const std::uint64_t want = std::min(t_waits_for, queued_seq_);
  durable_cv_.wait(lock, [this, want] { return durable_seq_ >= want; });
  t_waits_for = 0;
}

void RemovalJournal::WriterLoop() {
  std::unique_lock lock(mu_);
  for (;;) {
    wake_.wait(lock, [this] { return stopping_ || !queued_.empty(); });
    if (queued_.empty() && stopping_) return;
    std::string batch;
    batch.swap(queued_);
    const std::uint64_t upto = queued_seq_;
    lock.unlock();
    // One write and one sync for every tombstone queued meanwhile (a group commit).
    Status s = fd_.valid() ? WriteAll(fd_.get(), batch.data(), batch.size())
                           : Status::FailedPrecondition("the journal failed before");
    if (s.ok() && ::fdatasync(fd_.get()) != 0) s = ErrnoStatus("sync the journal", errno);
    if (!s.ok() && fd_.valid()) Fail(s);
    lock.lock();
    if (s.ok()) written_ += upto - durable_seq_;
    durable_seq_ = upto;
    durable_cv_.notify_all();
  }
}

void RemovalJournal::Fail(const Status& why) {
  // Without durable tombstones the snapshot could bring deleted objects back after a crash:
  // it goes aside, and a crash then brings back nothing rather than anything deleted.
  const std::string snapshot = dir_ + "/tierpool.snapshot";
  const bool moved = ::rename(snapshot.c_str(), (snapshot + ".stale").c_str()) == 0;
  if (UniqueFd d(::open(dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC)); d.valid()) {
    (void)::fsync(d.get());
  }
  spdlog::critical(
      "persist: cannot record a deletion in {}/{} ({}); {} the snapshot: until the next clean "
      "shutdown a crash brings nothing back",
      dir_, kName, why.ToString(), moved ? "moved aside" : "could not move aside");
  fd_.reset();
}

void RemovalJournal::Close() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (writer_.joinable()) writer_.join();
}

void RemovalJournal::Remove(const std::string& dir) {
  const std::string path = dir + "/" + kName;
  ::unlink(path.c_str());
  if (UniqueFd d(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC)); d.valid()) {
    (void)::fsync(d.get());
  }
}

std::uint64_t RemovalJournal::tombstones() const {
  std::lock_guard lock(mu_);
  return written_;
}

}  // namespace tierpool
