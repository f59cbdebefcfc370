// The importer's two halves, for callers that import one model more than once (generation
// imports a decoder once per call): reading the file, and importing a model already read.
#pragma once

#include <onnx/onnx_pb.h>

#include <cstdint>
#include <string>

#include "compiler_hooks/onnx_importer.h"

namespace tierpool::hooks {

// Reads and parses an ONNX file from outside: a missing file is NOT_FOUND; one larger than
// max_bytes, or not a model, INVALID_ARGUMENT.
Result<onnx::ModelProto> LoadOnnxModel(const std::string& path, std::uint64_t max_bytes);

// ImportOnnx on a model read from `path` (named in the schedule and in errors). Import fixes its
// dimensions and folds into it, so it takes its own copy.
Result<prefetch::Schedule> ImportOnnxModel(onnx::ModelProto model, const std::string& path,
                                           const OnnxImportOptions& options);

}  // namespace tierpool::hooks
