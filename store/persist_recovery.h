// A start with `--persist DIR`: brings back what the last good snapshot and its journal hold,
// and sets up the journal of this start.
//
// The snapshot's objects come back but for the names the journal says were removed since; the
// objects whose latest version the journal places on a kept nvme file (tiers/nvme_tier.h) are
// read from it, each record checked (its header against the journal, its bytes against their
// checksum): one that fails is left out and counted, never restored wrong. When the journal
// removed names or placed objects on nvme, a new snapshot is written with everything that came
// back; the nvme files of earlier starts are then removed: from then on nothing depends on them.
//
// Thread safety: run before the server serves, on one thread.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "common/status.h"
#include "store/object_store.h"
#include "store/persist_journal.h"
#include "store/snapshot.h"
#include "tiers/nvme_tier.h"

namespace tierpool {

struct PersistRecovery {
  std::unique_ptr<PersistJournal> journal;  // this start's, bound to the snapshot now in place
  SnapshotStats snapshot;                   // what came back from the snapshot
  std::uint64_t journal_records = 0;        // records of the last start's journal
  std::uint64_t from_nvme = 0;              // objects read back from kept nvme files
  std::uint64_t from_nvme_bytes = 0;
  std::uint64_t nvme_failed = 0;  // records that failed their checks, or found no room
  bool checkpointed = false;      // a new snapshot was written
  std::uint64_t nvme_files_removed = 0;
};

// `kept_nvme`: this start's nvme tier when it keeps its files (its records are journaled), or
// null. Fails (and the start must stop, nothing on disk lost) when the snapshot cannot be read or
// the new one cannot be written.
Result<PersistRecovery> RecoverPersisted(ObjectStore& store, const std::string& dir,
                                         NvmeTier* kept_nvme);

// After a clean shutdown's snapshot: the kept nvme files of this start hold nothing it does not.
void RemoveNvmeFileSet(const std::string& dir, const std::string& file_set);

}  // namespace tierpool
