#include "tiers/memfd_arena.h"

#include <fcntl.h>
#include <linux/memfd.h>
#include <numa.h>
#include <sys/mman.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include "common/logging.h"
#include "common/units.h"

namespace tierpool {

std::vector<int> NumaNodes() {
  std::vector<int> nodes;
  if (numa_available() < 0) return {0};
  struct bitmask* mask = numa_get_mems_allowed();
  for (int n = 0; n <= numa_max_node(); ++n) {
    if (numa_bitmask_isbitset(mask, static_cast<unsigned>(n))) nodes.push_back(n);
  }
  numa_bitmask_free(mask);
  if (nodes.empty()) nodes.push_back(0);
  return nodes;
}

namespace {

// Why an arena of huge pages could not be had: what it needs against what the pool holds.
Status NoHugePages(const MemfdArenaOptions& options, const char* what, int err) {
  const long long free_pages = MeminfoValue("HugePages_Free");
  const long long total = MeminfoValue("HugePages_Total");
  return Status::ResourceExhausted(
      std::string(what) + " for '" + options.name + "' (" + std::strerror(err) + "): it needs " +
      std::to_string(options.size / kHugePageBytes) +
      " huge pages of 2 MiB and the kernel's pool has " +
      (free_pages < 0 ? std::string("none it reports")
                      : std::to_string(free_pages) + " free of " + std::to_string(total)) +
      "; raise vm.nr_hugepages (sysctl -w vm.nr_hugepages=N, as root) or start without "
      "--huge-pages");
}

}  // namespace

Result<std::unique_ptr<MemfdArena>> MemfdArena::Create(const MemfdArenaOptions& options) {
  if (options.size == 0) return Status::InvalidArgument("arena size must be > 0");
  if (options.huge_pages && options.size % kHugePageBytes != 0) {
    return Status::InvalidArgument("an arena of huge pages must be a multiple of 2 MiB, not " +
                                   FormatBytes(options.size));
  }
  std::unique_ptr<MemfdArena> arena(new MemfdArena());
  unsigned flags = MFD_CLOEXEC | MFD_ALLOW_SEALING;
  if (options.huge_pages) flags |= MFD_HUGETLB | MFD_HUGE_2MB;
  int fd = ::memfd_create(options.name.c_str(), flags);
  if (fd < 0 && options.huge_pages) return NoHugePages(options, "memfd_create(MFD_HUGETLB)", errno);
  if (fd < 0) return ErrnoStatus("memfd_create", errno);
  arena->fd_.reset(fd);
  if (::ftruncate(fd, static_cast<off_t>(options.size)) != 0) {
    return ErrnoStatus("ftruncate arena to " + FormatBytes(options.size), errno);
  }
  // Clients get this fd: seal the size so no client can shrink it under the server (SIGBUS).
  if (::fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
    return ErrnoStatus("seal arena", errno);
  }
  // A second open file description of the same memory, read-only: what views are mapped from.
  // mmap(PROT_WRITE, MAP_SHARED) of it fails with EACCES, whatever the client tries.
  const std::string self = "/proc/self/fd/" + std::to_string(fd);
  int ro = ::open(self.c_str(), O_RDONLY | O_CLOEXEC);
  if (ro < 0) return ErrnoStatus("open " + self + " read-only", errno);
  arena->read_only_fd_.reset(ro);
  // A shared mapping of huge pages reserves them from the pool here: a pool too small fails
  // now (ENOMEM), not with a SIGBUS at some later first touch.
  void* p = ::mmap(nullptr, options.size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED && options.huge_pages) return NoHugePages(options, "mmap", errno);
  if (p == MAP_FAILED) return ErrnoStatus("mmap arena of " + FormatBytes(options.size), errno);
  arena->base_ = static_cast<std::byte*>(p);
  arena->size_ = options.size;
  arena->huge_pages_ = options.huge_pages;
  // Before the first touch, so that populating faults in 2 MiB pages where the kernel gives them.
  if (!options.huge_pages && options.transparent_huge_pages)
    (void)::madvise(p, options.size, MADV_HUGEPAGE);
  if (options.numa_node >= 0) {
    // Bind before the first touch so the pages are allocated on the node.
    if (numa_available() >= 0) {
      numa_tonode_memory(p, options.size, options.numa_node);
      arena->numa_node_ = options.numa_node;
    } else {
      spdlog::warn("libnuma reports no NUMA support; arena '{}' is not bound to a node",
                   options.name);
    }
  }
  if (options.lock_pages) {
    if (::mlock(p, options.size) == 0) {
      arena->locked_ = true;
    } else {
      spdlog::warn(
          "could not page-lock {} for '{}' ({}); it stays pageable. Raise "
          "RLIMIT_MEMLOCK (ulimit -l) or grant CAP_IPC_LOCK to lock it",
          FormatBytes(options.size), options.name, std::strerror(errno));
    }
  }
  if (options.populate && !arena->locked_) {
#ifdef MADV_POPULATE_WRITE
    if (::madvise(p, options.size, MADV_POPULATE_WRITE) != 0)
#endif
    {
      // Older kernels: touch one byte per page.
      for (std::uint64_t off = 0; off < options.size; off += 4096) {
        static_cast<volatile std::byte*>(p)[off] = std::byte{0};
      }
    }
  }
  return arena;
}

std::uint64_t MemfdArena::HugeMappedBytes() const {
  if (huge_pages_) return size_;  // from the pool, reserved whole at mmap
  const long long pmd = SmapsValue(base_, "ShmemPmdMapped");
  return pmd > 0 ? static_cast<std::uint64_t>(pmd) << 10 : 0;
}

MemfdArena::~MemfdArena() {
  if (base_ != nullptr) ::munmap(base_, size_);
}

}  // namespace tierpool
