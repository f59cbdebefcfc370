// What `--persist` keeps beside its last good snapshot so that a crash loses at most what was not
// yet durable: DIR/tierpool.journal, an append-only log of
//   - tombstones: a name the snapshot or an earlier record holds was deleted or replaced;
//   - nvme puts: a retained object's record landed on a kept nvme file (tiers/nvme_tier.h,
//     keep_files), with its metadata and where the record is;
//   - nvme gones: such a record was freed while its object lived on above;
//   - file sets: the nvme files this start's records are in.
// docs/snapshot-format.md has the bytes.
//
// A removal of a watched name (one the snapshot holds, or one with an nvme put) is answered
// only once its tombstone is on disk: the writer thread syncs records in groups and the request
// waits on a worker thread. An nvme put waits for nothing: the writer syncs the nvme files before
// the records that name them, and until then a crash loses the object as it would have before.
//
// The journal is kept to a size proportional to what it still says: once it passes
// compact_bytes() and twice the records that still matter (the file set, the snapshot's names
// removed, the latest nvme record of each name), the writer rewrites it with those alone (to a
// temporary file, synced, renamed) and appends to that.
//
// A journal belongs to one snapshot (its id, the snapshot header's checksum; 0: none yet): one
// that names another is ignored. A start that finds records recovers (store/persist_recovery.h),
// writes a new snapshot and starts a fresh journal. If a record cannot be made durable (a full
// disk, an I/O error), the snapshot and the journal are moved aside (*.stale) so that no crash
// can bring back what was deleted: until the next clean shutdown a crash then brings nothing back.
//
// Thread safety: every method may be called from any thread. The Note* methods are cheap (a set
// lookup and an append under mu_, a leaf lock) and never do I/O; WaitForCaller blocks until the
// calling thread's tombstones are durable.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "common/posix.h"
#include "common/status.h"
#include "tiers/tier.h"

namespace tierpool {

class PersistJournal {
 public:
  using Name = std::pair<std::string, std::string>;  // (namespace, key)

  // An object whose record is on a kept nvme file.
  struct NvmeRecord {
    std::string meta;  // its wire::ObjectMeta, serialized
    std::string dir, file_set;
    std::uint32_t block_size = 0;
    Extent extent;  // arena_id: the file's index in its set
    RecordInfo info;
  };
  // What a journal says, its records applied in order.
  struct Contents {
    std::set<Name> removed;                // the snapshot's copy of these must not come back
    std::map<Name, NvmeRecord> from_nvme;  // their latest version is this record
    // Every nvme file the journal names (dir, file set): removed once a new snapshot holds all.
    std::set<std::pair<std::string, std::string>> file_sets;
    std::uint64_t records = 0;  // whole records read (0: nothing to recover)
  };

  // The records of dir's journal for snapshot `snapshot_id` (none when there is no journal, or
  // it belongs to another snapshot). A torn or damaged record ends it.
  static Result<Contents> Read(const std::string& dir, std::uint64_t snapshot_id);

  // Starts a fresh journal for the snapshot (replacing any) and its writer thread. `watched`:
  // the names the snapshot holds, whose first removal needs a tombstone.
  static Result<std::unique_ptr<PersistJournal>> Open(const std::string& dir,
                                                      std::uint64_t snapshot_id,
                                                      std::set<Name> watched);
  ~PersistJournal();
  PersistJournal(const PersistJournal&) = delete;
  PersistJournal& operator=(const PersistJournal&) = delete;

  // The kept nvme files this start writes records to; `sync` makes them durable. Until this is
  // called, NoteNvmePut and NoteNvmeGone record nothing.
  void SetNvmeFiles(const std::string& dir, const std::string& file_set, std::uint32_t block_size,
                    std::function<Status()> sync);
  bool records_nvme() const;

  // Whether any name is watched (callers skip all checks when not).
  bool watching() const;
  bool Watched(const std::string& ns, const std::string& key) const;
  // A name is being unlinked: if it is watched (the first time), its tombstone is queued, and
  // the calling thread must WaitForCaller before it answers.
  void NoteRemoval(const std::string& ns, const std::string& key);
  // A retained object's record landed at `extent` of the nvme files: recorded (the name is
  // watched from now on). `meta`: its wire::ObjectMeta, serialized.
  void NoteNvmePut(const std::string& ns, const std::string& key, const std::string& meta,
                   const Extent& extent, const RecordInfo& info);
  // The record of object `object_id` at `extent` was freed while the object lived on.
  void NoteNvmeGone(const Extent& extent, std::uint64_t object_id);
  // Blocks until every tombstone this thread queued is durable (or the journal failed and the
  // snapshot was moved aside). Returns at once when it queued none.
  void WaitForCaller();
  // Blocks until every record queued so far is durable (tests; the stat counters
  // persist_records_queued and persist_records_durable tell a client the same).
  void Flush();
  // Stops the writer (the records queued are written first). The journal file stays: the
  // caller removes it once a new snapshot is in place (Remove).
  void Close();
  static void Remove(const std::string& dir);

  // Compaction's threshold (default 64 MiB; tests set less).
  void set_compact_bytes(std::uint64_t bytes);
  std::uint64_t compactions() const;

  std::uint64_t tombstones() const;  // written by this process
  std::uint64_t nvme_puts() const;   // written by this process
  // Its counters, for stat and /metrics: persist_tombstones, persist_nvme_records (durable, of
  // this process); persist_records_queued and persist_records_durable (records are durable in
  // the order queued: once durable reaches a count read earlier, all queued by then are);
  // persist_journal_compactions; persist_journal_failed (1 once the snapshot went aside).
  void VisitCounters(const std::function<void(const std::string&, std::uint64_t)>& visit) const;

 private:
  PersistJournal(std::string dir, std::uint64_t snapshot_id, UniqueFd fd, std::set<Name> watched);
  // What a rewritten journal holds: the header and the records that still matter.
  std::string LiveRecordsLocked() const;
  // Rewrites the journal with those records (the writer thread's, between batches).
  Status Compact();
  std::uint64_t QueueLocked();  // the record just appended to queued_: its sequence number
  void ForgetPutLocked(const Name& name);  // its live nvme put, if any, no longer matters
  void WriterLoop();
  // The journal cannot hold records any more: the snapshot and the journal go aside.
  void Fail(const Status& why);

  const std::string dir_;
  const std::uint64_t snapshot_id_;
  UniqueFd fd_;  // the writer thread's alone once it runs
  mutable std::mutex mu_;
  std::condition_variable wake_, durable_cv_;
  // Guarded by mu_: the watched names, each with whether the snapshot holds it (a compaction
  // keeps the tombstones of those alone).
  std::map<Name, bool> watched_;
  std::string queued_;                // guarded by mu_: encoded records not yet written
  bool queued_nvme_ = false;          // guarded by mu_: queued_ names nvme records
  std::uint64_t queued_seq_ = 0;      // guarded by mu_: records queued in all
  std::uint64_t durable_seq_ = 0;     // guarded by mu_: of those, on disk (or given up on)
  std::uint64_t durable_ok_seq_ = 0;  // guarded by mu_: of those, on disk
  std::uint64_t tombstones_ = 0, nvme_puts_ = 0;             // guarded by mu_: written
  std::uint64_t pending_tombstones_ = 0, pending_puts_ = 0;  // guarded by mu_: in queued_
  std::function<Status()> sync_nvme_;                        // guarded by mu_
  bool stopping_ = false;                                    // guarded by mu_
  bool failed_ = false;  // guarded by mu_: a batch could not be made durable
  // What a compaction keeps (guarded by mu_): the snapshot's names removed, the file set's record
  // and each name's latest nvme put (framed) with where it is.
  std::set<Name> removed_;
  std::string file_set_record_;
  std::map<Name, std::string> live_puts_;
  std::map<std::tuple<std::uint32_t, std::uint64_t, std::uint64_t>, Name> live_where_;
  std::map<Name, std::tuple<std::uint32_t, std::uint64_t, std::uint64_t>> where_of_;
  std::uint64_t live_bytes_ = 0;  // guarded by mu_: of live_puts_ and removed_'s records
  std::uint64_t compact_bytes_ = 64ull << 20;  // guarded by mu_
  std::uint64_t file_bytes_ = 0;               // the writer thread's: the journal's size
  std::uint64_t compactions_ = 0;              // guarded by mu_
  std::thread writer_;
};

}  // namespace tierpool
