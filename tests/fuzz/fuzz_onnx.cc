// An ONNX model file given to `tierpool schedule from-onnx`, and what `schedule reorder
// MODEL.onnx --onnx-out` does with it: the lower-peak order, which must keep every dependency,
// written back into the model.
#include <cstdlib>

#include "compiler_hooks/onnx_importer.h"
#include "compiler_hooks/onnx_reorder.h"
#include "prefetch/reorder.h"
#include "tests/fuzz/fuzz_target.h"
#include "tests/fuzz/memfd_file.h"
#include "tests/fuzz/quiet_logs.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace tierpool;
  fuzz::QuietLogs();
  fuzz::MemFile file(data, size);
  auto s = hooks::ImportOnnx(file.path(), {});
  if (!s.ok()) return 0;
  auto lower = prefetch::LowerPeakOrder(*s);
  if (!lower.ok()) return 0;
  if (!prefetch::CheckOrder(*s, lower->order).ok()) std::abort();  // a dependency broken
  (void)hooks::WriteReorderedOnnx(file.path(), {}, *s, lower->order, "/dev/null");
  return 0;
}
