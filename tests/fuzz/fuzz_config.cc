// A tierpoold configuration file (--config).
#include "store/server_config.h"
#include "tests/fuzz/fuzz_target.h"
#include "tests/fuzz/memfd_file.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace tierpool;
  fuzz::MemFile file(data, size);
  const std::string path = file.path();
  const char* argv[] = {"tierpoold", "--config", path.c_str()};
  bool exit_now = false;
  auto config = ParseServerFlags(3, argv, &exit_now);
  if (config.ok()) (void)config->validate();
  return 0;
}
