// Our own shape rules for ONNX ops whose outputs ONNX's shape inference leaves unsized (its
// Einsum infers a rank only), applied after inference and folding; every value sized this way
// is named, so the schedule records which tensors a rule of ours sized. Used by the importer.
#pragma once

#include <onnx/onnx_pb.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

namespace tierpool::hooks {

// The output shape of an Einsum with `equation` over inputs of `shapes` (explicit "->" or
// implicit output, "..." broadcast, size-1 dimensions broadcast); nullopt if they disagree.
std::optional<std::vector<std::int64_t>> EinsumShape(
    const std::string& equation, const std::vector<std::vector<std::int64_t>>& shapes);

// One pass: every node whose output is unsized, whose inputs are all sized and whose op has a
// rule gets its output's shape written into the graph's value_info. Records each such value in
// `sized` (its name -> the op whose rule sized it) and returns how many it sized.
int ApplyShapeRules(onnx::GraphProto* g,
                    const std::unordered_map<std::string, std::vector<std::int64_t>>& known,
                    std::map<std::string, std::string>* sized);

}  // namespace tierpool::hooks
