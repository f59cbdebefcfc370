// A shared-memory arena: a sealed memfd mapped in the server, optionally bound to a NUMA node,
// page-locked, and backed by huge pages. Clients map the same fd (passed over the Unix socket) and
// write in place, and map a read-only descriptor of the same memory for views.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/posix.h"
#include "common/status.h"

namespace tierpool {

struct MemfdArenaOptions {
  std::string name = "tierpool";
  std::uint64_t size = 0;
  int numa_node = -1;       // bind the pages to this node with libnuma; -1: no binding
  bool lock_pages = false;  // mlock; failure is a logged warning, not an error
  bool populate = true;     // fault every page in now, so first use pays no page faults
  // Back the arena with 2 MiB pages from the kernel's huge page pool (MFD_HUGETLB; the pool is
  // vm.nr_hugepages): a copy through the arena then meets one TLB entry per 2 MiB instead of
  // per 4 KiB, and a client's page tables for it are 512 times smaller. size must be a
  // multiple of kHugePageBytes; creating fails, saying what the pool has, if it lacks the pages.
  bool huge_pages = false;
  // Otherwise, ask for transparent huge pages (madvise MADV_HUGEPAGE): where the kernel's
  // shmem_enabled is "advise" (or "within_size"/"always"), the arena is then backed by 2 MiB
  // pages where it can find them, like huge_pages but with no pool reserved ahead; where it is
  // "never" (Debian's default) the advice changes nothing. Clients advise their mappings too.
  bool transparent_huge_pages = true;
};

inline constexpr std::uint64_t kHugePageBytes = 2ull << 20;

class MemfdArena {
 public:
  static Result<std::unique_ptr<MemfdArena>> Create(const MemfdArenaOptions& options);
  ~MemfdArena();
  MemfdArena(const MemfdArena&) = delete;
  MemfdArena& operator=(const MemfdArena&) = delete;

  std::byte* base() const { return base_; }
  std::uint64_t size() const { return size_; }
  int fd() const { return fd_.get(); }
  // The same memory opened read-only (O_RDONLY): clients map views from it.
  int read_only_fd() const { return read_only_fd_.get(); }
  int numa_node() const { return numa_node_; }
  bool locked() const { return locked_; }
  // Bytes of the arena this process maps with 2 MiB pages now (huge_pages: all of it;
  // transparent ones: what the kernel found, once faulted in, read from /proc/self/smaps).
  std::uint64_t HugeMappedBytes() const;

 private:
  MemfdArena() = default;
  UniqueFd fd_;
  UniqueFd read_only_fd_;
  std::byte* base_ = nullptr;
  std::uint64_t size_ = 0;
  int numa_node_ = -1;
  bool locked_ = false;
  bool huge_pages_ = false;  // MemfdArenaOptions::huge_pages
};

// libnuma's view of the machine: the nodes memory can be placed on (at least {0}).
std::vector<int> NumaNodes();

}  // namespace tierpool
