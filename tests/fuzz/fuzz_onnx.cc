// An ONNX model file given to `tierpool schedule from-onnx`.
#include "compiler_hooks/onnx_importer.h"
#include "tests/fuzz/fuzz_target.h"
#include "tests/fuzz/memfd_file.h"
#include "tests/fuzz/quiet_logs.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace tierpool;
  fuzz::QuietLogs();
  fuzz::MemFile file(data, size);
  (void)hooks::ImportOnnx(file.path(), {});
  return 0;
}
