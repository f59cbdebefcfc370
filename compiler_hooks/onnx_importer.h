// ONNX graphs -> lifetime schedules. ONNX's own shape inference sizes every value; weights may be
// initializers or, in graphs exported without weights, graph inputs. Each node is one step with
// its FLOPs (MatMul, Gemm, Conv, attention) and bytes touched, for the cost model.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "prefetch/schedule.h"

namespace tierpool::hooks {

struct OnnxImportOptions {
  std::int64_t batch = 1;                    // value for symbolic batch dimensions
  std::map<std::string, std::int64_t> dims;  // values for other symbolic dimensions, by name
  std::vector<std::string> data_inputs;      // graph inputs that are data, not weights
  bool repeats = true;                       // an inference server runs the graph again and again
  std::uint64_t max_file_bytes = 4ull << 30;
};

Result<prefetch::Schedule> ImportOnnx(const std::string& path, const OnnxImportOptions& options);

}  // namespace tierpool::hooks
