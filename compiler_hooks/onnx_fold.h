// Folding of shape arithmetic in ONNX graphs: the small integer tensors a graph computes from
// shapes (Shape -> Gather -> Div -> Concat -> Slice, an expand's -1 handling, a window
// attention's padding) evaluated at import and added as initializers, so that ONNX's shape
// inference, which cannot always follow them, sizes what they feed. Used by the importer only.
#pragma once

#include <onnx/onnx_pb.h>

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

namespace tierpool::hooks {

inline std::uint64_t Elements(const std::vector<std::int64_t>& shape) {
  std::uint64_t n = 1;
  for (auto d : shape) n *= static_cast<std::uint64_t>(d);
  return n;
}

// One round over the graph: evaluates every node it can from constants, initializers and the
// known `shapes` (by value name), and adds each result as an initializer of the node's output.
// Returns how many it added; run shape inference and call again until it returns 0.
int FoldShapeArithmetic(onnx::GraphProto* g,
                        const std::unordered_map<std::string, std::vector<std::int64_t>>& shapes);

}  // namespace tierpool::hooks
