// What keeps `--persist`'s last good snapshot true across a crash: the names it holds that have
// been deleted or replaced since it was read.
//
// A start reads DIR/tierpool.snapshot and keeps it (it is the last good state until a clean
// shutdown writes the next). Objects deleted or replaced since must not come back from it after
// a crash, so the first removal of each name the snapshot holds appends a tombstone to
// DIR/tierpool.journal, and the request that removed it is answered only once the tombstone is
// on disk (the writer thread syncs tombstones in groups; the request waits on a worker thread,
// docs/snapshot-format.md). A start after a crash skips the snapshot's objects whose names
// have a tombstone. A clean shutdown writes a new snapshot and then removes the journal.
//
// A journal belongs to one snapshot (its id, the snapshot header's checksum): one that names
// another is ignored. If a tombstone cannot be made durable (the disk is full, an I/O error), the
// snapshot is moved aside (tierpool.snapshot.stale) so that no crash can bring back what was
// deleted: the objects it held then live only in memory until the next clean shutdown.
//
// Thread safety: every method may be called from any thread. NoteRemoval is cheap (a set lookup
// under mu_) and never does I/O; WaitForCaller blocks until the calling thread's tombstones are
// durable.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "common/posix.h"
#include "common/status.h"

namespace tierpool {

class RemovalJournal {
 public:
  using Name = std::pair<std::string, std::string>;  // (namespace, key)

  // The tombstones of dir's journal for snapshot `snapshot_id` (empty when there is none, or it
  // belongs to another snapshot). A torn last record (a crash while it was written) ends it.
  static Result<std::set<Name>> Read(const std::string& dir, std::uint64_t snapshot_id);

  // Opens dir's journal for the snapshot (keeping the tombstones it holds, starting afresh when
  // it names another snapshot) and starts the writer thread. `watched`: the names the
  // snapshot brought back, whose first removal needs a tombstone.
  static Result<std::unique_ptr<RemovalJournal>> Open(const std::string& dir,
                                                      std::uint64_t snapshot_id,
                                                      std::set<Name> watched);
  ~RemovalJournal();
  RemovalJournal(const RemovalJournal&) = delete;
  RemovalJournal& operator=(const RemovalJournal&) = delete;

  // Whether any snapshot name is still unremoved (callers skip all checks when not).
  bool watching() const;
  bool Watched(const std::string& ns, const std::string& key) const;
  // A name is being unlinked: if the snapshot holds it (the first time), its tombstone is
  // queued, and the calling thread must WaitForCaller before it answers.
  void NoteRemoval(const std::string& ns, const std::string& key);
  // Blocks until every tombstone this thread queued is durable (or the journal failed and the
  // snapshot was moved aside). Returns at once when it queued none.
  void WaitForCaller();
  // Stops the writer (the tombstones queued are written first). The journal file stays: the
  // caller removes it once a new snapshot is in place (Remove).
  void Close();
  static void Remove(const std::string& dir);

  std::uint64_t tombstones() const;  // written by this process

 private:
  RemovalJournal(std::string dir, UniqueFd fd, std::set<Name> watched);
  void WriterLoop();
  // The journal cannot hold tombstones any more: the snapshot goes aside.
  void Fail(const Status& why);

  const std::string dir_;
  UniqueFd fd_;
  mutable std::mutex mu_;
  std::condition_variable wake_, durable_cv_;
  std::set<Name> watched_;         // guarded by mu_
  std::string queued_;             // guarded by mu_: encoded tombstones not yet written
  std::uint64_t queued_seq_ = 0;   // guarded by mu_: tombstones queued in all
  std::uint64_t durable_seq_ = 0;  // guarded by mu_: of those, on disk (or given up on)
  std::uint64_t written_ = 0;      // guarded by mu_
  bool stopping_ = false;          // guarded by mu_
  std::thread writer_;
};

}  // namespace tierpool
