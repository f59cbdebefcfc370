#include "store/persist_journal.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "common/logging.h"
#include "store/journal_records.h"

namespace tierpool {

namespace {

namespace records = journal_records;

// The tombstones the calling thread queued up to (PersistJournal::WaitForCaller).
thread_local std::uint64_t t_waits_for = 0;

std::map<PersistJournal::Name, bool> WithSnapshotFlags(
    const std::set<PersistJournal::Name>& names) {
  std::map<PersistJournal::Name, bool> out;
  for (const auto& n : names) out.emplace_hint(out.end(), n, true);
  return out;
}

}  // namespace

Result<PersistJournal::Contents> PersistJournal::Read(const std::string& dir,
                                                      std::uint64_t snapshot_id) {
  return records::Read(dir, snapshot_id);
}

Result<std::unique_ptr<PersistJournal>> PersistJournal::Open(const std::string& dir,
                                                             std::uint64_t snapshot_id,
                                                             std::set<Name> watched) {
  // Written whole: a crash leaves the old one or this.
  auto fd = records::Replace(dir, records::Header(snapshot_id));
  if (!fd.ok()) return fd.status();
  return std::unique_ptr<PersistJournal>(
      new PersistJournal(dir, snapshot_id, std::move(fd).value(), std::move(watched)));
}

PersistJournal::PersistJournal(std::string dir, std::uint64_t snapshot_id, UniqueFd fd,
                               std::set<Name> watched)
    : dir_(std::move(dir)),
      snapshot_id_(snapshot_id),
      fd_(std::move(fd)),
      watched_(WithSnapshotFlags(watched)),
      file_bytes_(records::kHeaderSize) {
  writer_ = std::thread([this] { WriterLoop(); });
}

PersistJournal::~PersistJournal() { Close(); }

void PersistJournal::SetNvmeFiles(const std::string& dir, const std::string& file_set,
                                  std::uint32_t block_size, std::function<Status()> sync) {
  std::string record = records::FileSet(dir, file_set, block_size);
  std::lock_guard lock(mu_);
  file_set_record_ = std::move(record);
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
  const bool in_snapshot = it->second;
  watched_.erase(it);
  const std::string record = records::Tombstone(ns, key);
  queued_ += record;
  ForgetPutLocked(Name(ns, key));
  if (in_snapshot && removed_.insert(Name(ns, key)).second) {
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
  std::string record = records::NvmePut(ns, key, meta, extent, info);
  std::lock_guard lock(mu_);
  if (sync_nvme_ == nullptr || record.empty()) return;
  watched_.emplace(Name(ns, key), false);  // a snapshot name keeps its flag
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
  const std::string record = records::NvmeGone(extent, object_id);
  std::lock_guard lock(mu_);
  if (sync_nvme_ == nullptr) return;
  queued_ += record;
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
    if (s.ok()) s = records::WriteAll(fd_.get(), batch.data(), batch.size());
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
    const std::uint64_t live = records::kHeaderSize + file_set_record_.size() + live_bytes_;
    if (s.ok() && file_bytes_ > compact_bytes_ && file_bytes_ > 2 * live) {
      lock.unlock();
      if (Status c = Compact(); !c.ok()) {
        // The journal as it was stays; try again once it has grown as much again.
        spdlog::warn("persist: compacting {}/{}: {}", dir_, records::kName, c.ToString());
        lock.lock();
        compact_bytes_ = file_bytes_ * 2;
        continue;
      }
      lock.lock();
    }
  }
}

std::string PersistJournal::LiveRecordsLocked() const {
  std::string out = records::Header(snapshot_id_) + file_set_record_;
  for (const auto& [ns, key] : removed_) out += records::Tombstone(ns, key);
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
  auto fd = records::Replace(dir_, bytes);
  if (!fd.ok()) return fd.status();
  fd_ = std::move(fd).value();
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
  const std::string snapshot = dir_ + "/tierpool.snapshot", journal = dir_ + "/" + records::kName;
  const bool moved =
      ::rename(snapshot.c_str(), (snapshot + ".stale").c_str()) == 0 || errno == ENOENT;
  const bool moved_journal = ::rename(journal.c_str(), (journal + ".stale").c_str()) == 0;
  if (UniqueFd d(::open(dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC)); d.valid()) {
    (void)::fsync(d.get());
  }
  spdlog::critical(
      "persist: cannot record in {}/{} ({}); {} the snapshot and journal: until the next clean "
      "shutdown a crash brings nothing back",
      dir_, records::kName, why.ToString(),
      moved && moved_journal ? "moved aside" : "could not move aside");
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
  const std::string path = dir + "/" + records::kName;
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
