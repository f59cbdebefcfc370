#include "client/arena_mappings.h"

#include <sys/mman.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <string>

namespace tierpool::detail {

namespace {
#ifdef MADV_POPULATE_WRITE
constexpr int kPopulateWrite = MADV_POPULATE_WRITE;
constexpr int kPopulateRead = MADV_POPULATE_READ;
#else
constexpr int kPopulateWrite = -1;  // no such advice here: pages fault in as they are touched
constexpr int kPopulateRead = -1;
#endif

// Where the server's arena is in transparent huge pages (tiers/memfd_arena.h), this mapping
// maps them 2 MiB at a time only with the same advice (under shmem_enabled "advise"); the
// kernel already placed it on a 2 MiB boundary then. A kernel without it says EINVAL: ignored.
void AdviseHugePages(void* p, std::uint64_t size) { (void)::madvise(p, size, MADV_HUGEPAGE); }
}  // namespace

ArenaMappings::GranuleSet::GranuleSet(std::uint64_t size)
    : words_(new std::atomic<std::uint64_t>[(size + 64 * kGranule - 1) / (64 * kGranule)]()) {}

void ArenaMappings::GranuleSet::Populate(std::byte* base, std::uint64_t size, std::uint64_t offset,
                                         std::uint64_t length, int advice) const {
  if (length == 0 || advice < 0) return;
  const std::uint64_t first = offset / kGranule, last = (offset + length - 1) / kGranule;
  // The first and last granules not faulted in yet, a word of the bitmap at a time (a get's
  // check of an extent already faulted in is a load per 64 granules); those between are faulted
  // in with them (one call; pages already mapped cost the kernel little).
  std::uint64_t from = last + 1, to = first;
  for (std::uint64_t w = first / 64; w <= last / 64; ++w) {
    const std::uint64_t lo = w == first / 64 ? first % 64 : 0;
    const std::uint64_t hi = w == last / 64 ? last % 64 : 63;
    const std::uint64_t in_range = (~0ull >> (63 - hi)) & (~0ull << lo);
    const std::uint64_t missing = ~words_[w].load(std::memory_order_relaxed) & in_range;
    if (missing == 0) continue;
    from = std::min(from, w * 64 + static_cast<std::uint64_t>(std::countr_zero(missing)));
    to = w * 64 + 63 - static_cast<std::uint64_t>(std::countl_zero(missing));
  }
  if (from > to) return;
  const std::uint64_t begin = from * kGranule, end = std::min((to + 1) * kGranule, size);
  // A kernel without the advice (EINVAL) or a range it cannot fault in now (ENOMEM, EFAULT) is
  // marked all the same: the copy then faults its pages one by one, as it would anyway.
  (void)::madvise(base + begin, end - begin, advice);
  for (std::uint64_t g = from; g <= to; ++g) {
    words_[g / 64].fetch_or(1ull << (g % 64), std::memory_order_relaxed);
  }
}

ArenaMappings::~ArenaMappings() {
  for (auto& [id, m] : maps_) {
    ::munmap(m.base, m.size);
    if (m.read_only != nullptr) ::munmap(m.read_only, m.size);
  }
}

Status ArenaMappings::Map(const wire::HelloReply& hello, std::vector<UniqueFd>& fds) {
  auto fd_at = [&](int index) -> Result<int> {
    if (static_cast<std::size_t>(index) >= fds.size()) {
      return Status::Internal("server described an arena it did not pass");
    }
    return fds[static_cast<std::size_t>(index)].get();
  };
  for (const auto& a : hello.arenas()) {
    if (a.fd_index() < 0) continue;
    auto fd = fd_at(a.fd_index());
    if (!fd.ok()) return fd.status();
    void* p = ::mmap(nullptr, a.size(), PROT_READ | PROT_WRITE, MAP_SHARED, *fd, 0);
    if (p == MAP_FAILED) return ErrnoStatus("map arena " + std::to_string(a.id()), errno);
    AdviseHugePages(p, a.size());
    Mapping& m = maps_[a.id()];
    m.base = static_cast<std::byte*>(p);
    m.size = a.size();
    m.written = std::make_unique<GranuleSet>(a.size());
    m.read = std::make_unique<GranuleSet>(a.size());
    if (a.has_read_only_fd_index() && a.read_only_fd_index() >= 0) {
      auto ro = fd_at(a.read_only_fd_index());
      if (!ro.ok()) return ro.status();
      void* r = ::mmap(nullptr, a.size(), PROT_READ, MAP_SHARED, *ro, 0);
      if (r == MAP_FAILED) return ErrnoStatus("map arena " + std::to_string(a.id()), errno);
      AdviseHugePages(r, a.size());
      m.read_only = static_cast<std::byte*>(r);
    }
  }
  return Status::Ok();
}

const ArenaMappings::Mapping* ArenaMappings::Find(std::uint32_t arena_id, std::uint64_t offset,
                                                  std::uint64_t length) const {
  auto it = maps_.find(arena_id);
  if (it == maps_.end() || offset > it->second.size || length > it->second.size - offset) {
    return nullptr;
  }
  return &it->second;
}

std::byte* ArenaMappings::Address(std::uint32_t arena_id, std::uint64_t offset,
                                  std::uint64_t length) const {
  const Mapping* m = Find(arena_id, offset, length);
  if (m == nullptr) return nullptr;
  m->written->Populate(m->base, m->size, offset, length, kPopulateWrite);
  return m->base + offset;
}

const std::byte* ArenaMappings::ReadAddress(std::uint32_t arena_id, std::uint64_t offset,
                                            std::uint64_t length) const {
  const Mapping* m = Find(arena_id, offset, length);
  if (m == nullptr) return nullptr;
  std::byte* base = m->read_only != nullptr ? m->read_only : m->base;
  m->read->Populate(base, m->size, offset, length, kPopulateRead);
  return base + offset;
}

}  // namespace tierpool::detail
