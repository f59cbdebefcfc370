// Tied weights in ONNX exports. PyTorch exports a weight that two layers share (an embedding tied
// to the output projection) as two initializers: the weight, and its transpose where a MatMul
// reads it. Counting both would plan a model with the tied bytes twice; the importer maps the
// copy onto the weight instead (one tensor, used by both). Used by the importer only.
//
// Stateless; thread-safe.
#pragma once

#include <onnx/onnx_pb.h>

#include <string>
#include <unordered_map>

namespace tierpool::hooks {

// The initializers that repeat another's bytes, by name, each mapped to the one it repeats:
// 2-D tensors equal to another's transpose, or to another of the same shape, element for element
// (raw data; tensors whose elements are all equal, like a zero-initialized matrix, are never
// taken for copies).
std::unordered_map<std::string, std::string> TiedInitializers(const onnx::GraphProto& g);

}  // namespace tierpool::hooks
