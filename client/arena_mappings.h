// The server's arenas as this client maps them (internal to the client library).
//
// Each arena is mapped once per client and kept while any connection or view uses it:
// read-write for reservations, and read-only for views and reads (a view cannot write the memory
// it shows, even by mistake).
//
// Pages are faulted in as the client first uses them, by the call that meets them, one system
// call for all of an extent's (MADV_POPULATE_WRITE for the read-write mapping,
// MADV_POPULATE_READ for the read-only one, Linux 5.14), in granules of 64 KiB. A copy into or
// out of pages this process has not touched yet otherwise takes a minor fault per 4 KiB;
// faulting the whole read-write mapping in inside Map (MAP_POPULATE) made Connect take about
// 60 ms per GiB of arena (470 ms for an 8 GiB dram tier on the development VM,
// docs/benchmarks/redis.md, "Connecting to a large arena") and gave every client page tables for
// all of it. Granules bound what a small object faults in beyond its own pages (and the bitmap: one
// bit per 64 KiB).
//
// Locking: Map is called once, before the mappings are shared; afterwards every method is
// const and safe from any thread (the populated-granule bitmaps are atomics; two callers that
// meet the same granule unpopulated both populate it, which is harmless).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

#include "common/posix.h"
#include "common/status.h"
#include "proto/tierpool.pb.h"

namespace tierpool::detail {

class ArenaMappings {
 public:
  // The unit pages are faulted in by.
  static constexpr std::uint64_t kGranule = 64ull << 10;

  ArenaMappings() = default;
  ~ArenaMappings();
  ArenaMappings(const ArenaMappings&) = delete;
  ArenaMappings& operator=(const ArenaMappings&) = delete;

  // Maps every arena the handshake describes, from the descriptors it passed.
  Status Map(const wire::HelloReply& hello, std::vector<UniqueFd>& fds);
  // Where to write an extent, its pages faulted in; nullptr when it is not inside a mapped arena.
  std::byte* Address(std::uint32_t arena_id, std::uint64_t offset, std::uint64_t length) const;
  std::byte* Address(const wire::Extent& e) const {
    return Address(e.arena_id(), e.offset(), e.length());
  }
  // Where to read it (the read-only mapping when the server passed one), its pages faulted in.
  const std::byte* ReadAddress(std::uint32_t arena_id, std::uint64_t offset,
                               std::uint64_t length) const;
  const std::byte* ReadAddress(const wire::Extent& e) const {
    return ReadAddress(e.arena_id(), e.offset(), e.length());
  }

 private:
  // One bit per granule of a mapping: set once the granule was faulted in.
  class GranuleSet {
   public:
    explicit GranuleSet(std::uint64_t size);
    // Faults in the granules of [offset, offset + length) not faulted in yet.
    void Populate(std::byte* base, std::uint64_t size, std::uint64_t offset, std::uint64_t length,
                  int advice) const;

   private:
    std::unique_ptr<std::atomic<std::uint64_t>[]> words_;
  };
  struct Mapping {
    std::byte* base = nullptr;
    std::byte* read_only = nullptr;  // nullptr: views read through base
    std::uint64_t size = 0;
    std::unique_ptr<GranuleSet> written, read;
  };
  const Mapping* Find(std::uint32_t arena_id, std::uint64_t offset, std::uint64_t length) const;

  std::unordered_map<std::uint32_t, Mapping> maps_;
};

}  // namespace tierpool::detail
