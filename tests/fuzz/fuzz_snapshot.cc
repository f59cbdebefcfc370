// A --persist snapshot file read back at start, and the same bytes as the tombstones of its
// journal.
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "store/persist_journal.h"
#include "store/snapshot.h"
#include "tests/fuzz/fuzz_target.h"
#include "tests/fuzz/store_harness.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace tierpool;
  auto& h = fuzz::StoreHarness::Get();
  static const std::string dir = [] {
    auto d = std::filesystem::temp_directory_path() /
             ("tierpool-fuzz-snapshot-" + std::to_string(::getpid()));
    std::filesystem::create_directories(d);
    return d.string();
  }();
  std::ofstream(dir + "/tierpool.snapshot", std::ios::binary | std::ios::trunc)
      .write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  (void)LoadSnapshot(*h.store, dir, {});
  h.Reset();
  // A journal with a good header (written by Open) followed by the input.
  (void)PersistJournal::Open(dir, 42, {});
  std::ofstream(dir + "/tierpool.journal", std::ios::binary | std::ios::app)
      .write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  (void)PersistJournal::Read(dir, 42);
  return 0;
}
