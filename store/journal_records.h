// The bytes of --persist's journal (store/persist_journal.h; the format is in
// docs/snapshot-format.md): its header, its records' framing and bodies, reading a journal back
// in order, and replacing one whole. Internal to store/.
//
// Thread safety: functions of their arguments only.
#pragma once

#include <cstdint>
#include <string>

#include "common/posix.h"
#include "common/status.h"
#include "store/persist_journal.h"
#include "tiers/tier.h"

namespace tierpool::journal_records {

inline constexpr std::size_t kHeaderSize = 32;
inline constexpr std::uint32_t kMaxBodyBytes = 256 * 1024;
inline constexpr char kName[] = "tierpool.journal";

std::string Header(std::uint64_t snapshot_id);
// Each record framed (kind, length, body, checksum), ready to append.
std::string Tombstone(const std::string& ns, const std::string& key);
std::string FileSet(const std::string& dir, const std::string& file_set, std::uint32_t block_size);
// Empty when its body would be past kMaxBodyBytes (such a put is not journaled).
std::string NvmePut(const std::string& ns, const std::string& key, const std::string& meta,
                    const Extent& extent, const RecordInfo& info);
std::string NvmeGone(const Extent& extent, std::uint64_t object_id);

// dir's journal for the snapshot, its records applied in order (PersistJournal::Read).
Result<PersistJournal::Contents> Read(const std::string& dir, std::uint64_t snapshot_id);
// Replaces dir's journal with `bytes` (a temporary file, synced, renamed, the directory synced)
// and opens it for appending.
Result<UniqueFd> Replace(const std::string& dir, const std::string& bytes);
Status WriteAll(int fd, const char* p, std::size_t n);

}  // namespace tierpool::journal_records
