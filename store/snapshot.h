// Snapshots for `tierpoold --persist DIR`: a clean shutdown writes every `retained` object, with
// its key and metadata, to DIR/tierpool.snapshot; the next start reads it back, checking every
// record, and keeps it: it is the last good state until the next clean shutdown replaces it. The
// names it holds that were deleted or replaced since are in DIR/tierpool.journal
// (store/persist_journal.h), and a start skips them. The format is in docs/snapshot-format.md.
//
// A snapshot is written to a temporary file, synced, and renamed into place: a crash while it is
// written, or a write that fails (a full disk), leaves the previous snapshot as it was, never a
// half-written record that a start would take. Every record carries checksums of its header, its
// metadata and its bytes; a record that fails one is skipped and counted, and the ones after it
// are still read.
//
// Thread safety: run while no client is connected (before the server starts, after it stops).
#pragma once

#include <cstdint>
#include <functional>
#include <set>
#include <string>
#include <utility>

#include "common/status.h"
#include "store/object_store.h"

namespace tierpool {

struct SnapshotStats {
  std::uint64_t id = 0;       // the snapshot's (its header's checksum)
  std::uint64_t objects = 0;  // written, or recovered
  std::uint64_t deleted = 0;  // loading: a tombstone says it was deleted since: not restored
  std::set<std::pair<std::string, std::string>> names;  // loading: (ns, key) of those recovered
  std::uint64_t bytes = 0;                              // their payload bytes
  std::uint64_t skipped = 0;       // saving: not retained; loading: a record failed its checks
  std::uint64_t not_restored = 0;  // saving: could not be read; loading: no room, or bad meta
  bool complete = true;            // loading: the end record was found and agreed
};

// Whether `dir` can hold snapshots: a directory this process may create files in, whose
// snapshot and journal paths are regular files or absent (a FIFO there would hang a start). A
// temporary file left by a crash is removed. Called at start, so that a bad --persist is found
// then and not at shutdown.
Status CheckPersistDir(const std::string& dir);

// The id of dir/tierpool.snapshot (NOT_FOUND when there is none).
Result<std::uint64_t> SnapshotId(const std::string& dir);

// Writes every retained object of `store` to dir/tierpool.snapshot, replacing it only once the
// new one is complete and synced; on any failure the temporary file is removed and the previous
// snapshot stays.
Result<SnapshotStats> SaveSnapshot(ObjectStore& store, const std::string& dir);

// Puts an object described by `m` back into `store` (into dram, spilling as the store does), its
// bytes written by `fill` into the room reserved for them (called once that room is reserved,
// with nullptr for an empty object), and commits it only if they match m.checksum. IO_ERROR
// when fill fails (its source ended), DATA_LOSS when the bytes do not match (nothing stays either
// way); the store's error when it has no room. Shared by the snapshot and the nvme recovery
// (store/persist_recovery.h).
Status RestoreObject(ObjectStore& store, const ObjectMeta& m,
                     const std::function<bool(std::byte* dst)>& fill);

// Reads dir/tierpool.snapshot into `store` (puts into dram, spilling as the store does), but
// the objects named in `deleted` (its journal's tombstones), and keeps the file. NOT_FOUND when
// there is no snapshot.
Result<SnapshotStats> LoadSnapshot(ObjectStore& store, const std::string& dir,
                                   const std::set<std::pair<std::string, std::string>>& deleted);

}  // namespace tierpool
