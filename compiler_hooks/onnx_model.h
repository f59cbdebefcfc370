// The importer's two halves, for callers that import one model more than once (generation
// imports a decoder once per call) or write it back (reorder): reading and writing the file, and
// importing a model already read.
#pragma once

#include <onnx/onnx_pb.h>

#include <cstdint>
#include <string>
#include <vector>

#include "compiler_hooks/onnx_importer.h"

namespace tierpool::hooks {

// Reads and parses an ONNX file from outside: a missing file is NOT_FOUND; one larger than
// max_bytes, or not a model, INVALID_ARGUMENT.
Result<onnx::ModelProto> LoadOnnxModel(const std::string& path, std::uint64_t max_bytes);

// Writes `model` (read from `source`) to `path`. A model whose tensors keep their data in
// external files names them relative to its own directory, so it is written only into the same
// directory as `source` (the files are not copied).
Status SaveOnnxModel(const onnx::ModelProto& model, const std::string& source,
                     const std::string& path);

// `model` with its graph's nodes reordered so that the nodes that are steps of `imported` (the
// schedule ImportOnnx made from this model) run in `order` (new position -> step of `imported`).
// A step is matched to the node that makes its tensors. Nodes with no step (those import folded
// into constants) go as early as their inputs allow, so the node list stays topologically
// sorted and every dimension stays as symbolic as it was. An order the model's own edges forbid
// (a step that would run before a node it depends on through a folded value) is an error naming
// the node.
Result<onnx::ModelProto> ReorderOnnxNodes(const onnx::ModelProto& model,
                                          const prefetch::Schedule& imported,
                                          const std::vector<std::uint32_t>& order);

// ImportOnnx on a model read from `path` (named in the schedule and in errors). Import fixes its
// dimensions and folds into it, so it takes its own copy.
Result<prefetch::Schedule> ImportOnnxModel(onnx::ModelProto model, const std::string& path,
                                           const OnnxImportOptions& options);

}  // namespace tierpool::hooks
