// Snapshots for `tierpoold --persist DIR`: a clean shutdown writes every `retained` object, with
// its key and metadata, to DIR/tierpool.snapshot; the next start reads it back, checking every
// record, and renames it so that a later crash cannot bring back objects deleted since. The
// format is in docs/snapshot-format.md.
//
// A snapshot is written to a temporary file, synced, and renamed into place: a crash while it is
// written leaves the previous state (no snapshot), never a half-written record that a start
// would take. Every record carries checksums of its header, its metadata and its bytes; a record
// that fails one is skipped and counted, and the ones after it are still read.
//
// Thread safety: run while no client is connected (before the server starts, after it stops).
#pragma once

#include <cstdint>
#include <string>

#include "common/status.h"
#include "store/object_store.h"

namespace tierpool {

struct SnapshotStats {
  std::uint64_t objects = 0;       // written, or recovered
  std::uint64_t bytes = 0;         // their payload bytes
  std::uint64_t skipped = 0;       // saving: not retained; loading: a record failed its checks
  std::uint64_t not_restored = 0;  // saving: could not be read; loading: no room, or bad meta
  bool complete = true;            // loading: the end record was found and agreed
};

// Writes every retained object of `store` to dir/tierpool.snapshot (replacing it).
Result<SnapshotStats> SaveSnapshot(ObjectStore& store, const std::string& dir);

// Reads dir/tierpool.snapshot into `store` (puts into dram, spilling as the store does), then
// renames it to tierpool.snapshot.loaded. NOT_FOUND when there is no snapshot.
Result<SnapshotStats> LoadSnapshot(ObjectStore& store, const std::string& dir);

}  // namespace tierpool
