// An ONNX model with its nodes in the order of a schedule imported from it and then reordered
// (`tierpool schedule reorder MODEL.onnx --onnx-out OUT.onnx`): what a runtime that runs nodes
// in file order (and tierpool's importer, the next time) sees as the refined execution order.
// Plain functions on values and files: no state, no locking.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "compiler_hooks/onnx_importer.h"
#include "prefetch/schedule.h"

namespace tierpool::hooks {

// Reads the model at `path`, puts its nodes in `order` (new position -> step of `imported`, the
// schedule ImportOnnx made from that model; prefetch/reorder.h gives such orders) and writes it
// to `out_path` (ReorderOnnxNodes and SaveOnnxModel, onnx_model.h).
Status WriteReorderedOnnx(const std::string& path, const OnnxImportOptions& options,
                          const prefetch::Schedule& imported,
                          const std::vector<std::uint32_t>& order, const std::string& out_path);

}  // namespace tierpool::hooks
