// An ONNX model file given to `tierpool schedule from-onnx`.
#include "common/logging.h"
#include "compiler_hooks/onnx_importer.h"
#include "tests/fuzz/fuzz_target.h"
#include "tests/fuzz/memfd_file.h"
#include "transport/framing.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace tierpool;
  static const bool quiet = [] {
    (void)SetLogLevel("off");
    transport::RouteProtobufLogs();
    return true;
  }();
  (void)quiet;
  fuzz::MemFile file(data, size);
  (void)hooks::ImportOnnx(file.path(), {});
  return 0;
}
