#include "store/persist_recovery.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <vector>

#include "common/checksum.h"
#include "common/logging.h"
#include "common/posix.h"
#include "common/units.h"
#include "proto/tierpool.pb.h"
#include "transport/wire_meta.h"

namespace tierpool {

namespace {

constexpr std::uint32_t kMaxFilesPerSet = 64;  // NvmeTierConfig::validate's bound

bool PreadAll(int fd, void* dst, std::uint64_t n, std::uint64_t offset) {
  auto* p = static_cast<std::byte*>(dst);
  while (n > 0) {
    const ssize_t r = ::pread(fd, p, n, static_cast<off_t>(offset));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    p += r;
    n -= static_cast<std::uint64_t>(r);
    offset += static_cast<std::uint64_t>(r);
  }
  return true;
}

// Reads the journal's nvme records back into the store.
class NvmeRestorer {
 public:
  explicit NvmeRestorer(ObjectStore& store) : store_(store) {}

  // OK when the object is in the store again; anything else says why it is not.
  Status Restore(const PersistJournal::Name& name, const PersistJournal::NvmeRecord& rec) {
    wire::ObjectMeta w;
    if (!w.ParseFromString(rec.meta) || !wire::ObjectKind_IsValid(w.kind()) ||
        !wire::Durability_IsValid(w.durability())) {
      return Status::DataLoss("its metadata does not parse");
    }
    const ObjectMeta m = transport::MetaFromWire(w);
    if (m.ns != name.first || m.key != name.second || m.size != rec.info.size ||
        m.checksum != rec.info.checksum || KeyHash(m.ns, m.key) != rec.info.key_hash) {
      return Status::DataLoss("its metadata and its record disagree");
    }
    if (m.size == 0) {  // no record on disk: the journal's word is the object
      return RestoreObject(store_, m, [](std::byte*) { return true; });
    }
    const std::uint64_t block = rec.block_size;
    if (rec.extent.arena_id >= kMaxFilesPerSet ||
        rec.extent.length < block + AlignUp(m.size, block)) {
      return Status::DataLoss("its record's place is impossible");
    }
    auto fd = File(NvmeFilePath(rec.dir, rec.file_set, rec.extent.arena_id));
    if (!fd.ok()) return fd.status();
    std::vector<std::byte> header(block);
    if (!PreadAll(*fd, header.data(), block, rec.extent.offset)) {
      return Status::DataLoss("its record is past the end of its file");
    }
    if (std::string why = CheckRecordHeader(header.data(), rec.info); !why.empty()) {
      return Status::DataLoss(why);
    }
    Status s = RestoreObject(store_, m, [&](std::byte* dst) {
      return PreadAll(*fd, dst, m.size, rec.extent.offset + block);
    });
    if (s.code() == StatusCode::kIoError) return Status::DataLoss("its file ends inside it");
    if (s.code() == StatusCode::kDataLoss) return Status::DataLoss("payload checksum mismatch");
    return s;
  }

 private:
  Result<int> File(const std::string& path) {
    auto it = files_.find(path);
    if (it != files_.end()) return it->second.get();
    UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK));
    if (!fd.valid()) return ErrnoStatus("open " + path, errno);
    struct stat st {};
    if (::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode)) {
      return Status::FailedPrecondition(path + " is not a regular file");
    }
    const int raw = fd.get();
    files_.emplace(path, std::move(fd));
    return raw;
  }

  ObjectStore& store_;
  std::map<std::string, UniqueFd> files_;
};

// Removes dir's kept nvme files of other starts that no live process holds (their lock).
std::uint64_t SweepNvmeDir(const std::string& dir, const std::string& keep_set) {
  std::uint64_t removed = 0;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    std::string set;
    const std::string name = e.path().filename().string();
    if (!IsNvmeFileName(name, &set) || set == keep_set) continue;
    UniqueFd fd(::open(e.path().c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK));
    if (!fd.valid() || ::flock(fd.get(), LOCK_EX | LOCK_NB) != 0) continue;  // in use
    if (::unlink(e.path().c_str()) == 0) ++removed;
  }
  return removed;
}

}  // namespace

void RemoveNvmeFileSet(const std::string& dir, const std::string& file_set) {
  for (std::uint32_t i = 0; i < kMaxFilesPerSet; ++i) {
    ::unlink(NvmeFilePath(dir, file_set, i).c_str());
  }
}

Result<PersistRecovery> RecoverPersisted(ObjectStore& store, const std::string& dir,
                                         NvmeTier* kept_nvme) {
  PersistRecovery out;
  std::uint64_t id = 0;  // no snapshot yet
  if (auto sid = SnapshotId(dir); sid.ok()) {
    id = *sid;
  } else if (sid.status().code() != StatusCode::kNotFound) {
    return sid.status();
  }
  auto contents = PersistJournal::Read(dir, id);
  if (!contents.ok()) return contents.status();
  out.journal_records = contents->records;
  // The snapshot's copy of a name stays out if it was removed since, or if a later version of
  // it is on nvme.
  std::set<PersistJournal::Name> skip = contents->removed;
  for (const auto& [name, rec] : contents->from_nvme) skip.insert(name);
  if (id != 0) {
    auto loaded = LoadSnapshot(store, dir, skip);
    if (!loaded.ok()) return loaded.status();
    out.snapshot = std::move(loaded).value();
  }
  std::set<PersistJournal::Name> names = out.snapshot.names;
  NvmeRestorer restorer(store);
  for (const auto& [name, rec] : contents->from_nvme) {
    if (Status s = restorer.Restore(name, rec); !s.ok()) {
      ++out.nvme_failed;
      spdlog::error("persist: {}/{} not brought back from nvme: {}", name.first, name.second,
                    s.ToString());
      continue;
    }
    names.insert(name);
    ++out.from_nvme;
    out.from_nvme_bytes += rec.info.size;
  }
  if (!contents->removed.empty() || !contents->from_nvme.empty()) {
    // What came back differs from the snapshot: all of it into one new snapshot, and the journal
    // and the nvme files of the last start are not needed after this. (Otherwise the snapshot
    // holds it already; the fresh journal below replaces the old one.)
    auto saved = SaveSnapshot(store, dir);
    if (!saved.ok()) {
      return Status(saved.status().code(),
                    "cannot write the snapshot of what came back: " + saved.status().message() +
                        "; nothing is lost (the next start tries again)");
    }
    id = saved->id;
    out.checkpointed = true;
  }
  auto journal = PersistJournal::Open(dir, id, std::move(names));
  if (!journal.ok()) return journal.status();
  out.journal = std::move(journal).value();
  for (const auto& [set_dir, set] : contents->file_sets) {
    if (kept_nvme == nullptr || set != kept_nvme->file_set()) RemoveNvmeFileSet(set_dir, set);
  }
  if (kept_nvme != nullptr) {
    out.nvme_files_removed = SweepNvmeDir(kept_nvme->path(), kept_nvme->file_set());
    out.journal->SetNvmeFiles(kept_nvme->path(), kept_nvme->file_set(), kept_nvme->block_size(),
                              [kept_nvme] { return kept_nvme->SyncData(); });
  }
  return out;
}

}  // namespace tierpool
