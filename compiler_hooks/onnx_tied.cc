#include "compiler_hooks/onnx_tied.h"

#include <cstdint>
#include <cstring>
#include <map>
#include <utility>
#include <vector>

namespace tierpool::hooks {

namespace {

std::size_t ElementWidth(int type) {
  switch (type) {
    case onnx::TensorProto::FLOAT:
    case onnx::TensorProto::INT32:
      return 4;
    case onnx::TensorProto::DOUBLE:
    case onnx::TensorProto::INT64:
      return 8;
    case onnx::TensorProto::FLOAT16:
    case onnx::TensorProto::BFLOAT16:
      return 2;
    default:
      return 0;
  }
}

// A 2-D initializer whose bytes are inline and not all one value.
bool Candidate(const onnx::TensorProto& t) {
  const std::size_t w = ElementWidth(t.data_type());
  if (t.dims_size() != 2 || w == 0 || !t.has_raw_data()) return false;
  const auto rows = static_cast<std::uint64_t>(t.dims(0)),
             cols = static_cast<std::uint64_t>(t.dims(1));
  const std::string& raw = t.raw_data();
  if (rows * cols < 2 || raw.size() != rows * cols * w) return false;
  for (std::size_t i = w; i < raw.size(); i += w) {
    if (std::memcmp(raw.data(), raw.data() + i, w) != 0) return true;
  }
  return false;
}

bool Transposed(const onnx::TensorProto& a, const onnx::TensorProto& b) {
  const std::size_t w = ElementWidth(a.data_type());
  const auto rows = static_cast<std::uint64_t>(a.dims(0)),
             cols = static_cast<std::uint64_t>(a.dims(1));
  const char* x = a.raw_data().data();
  const char* y = b.raw_data().data();
  for (std::uint64_t r = 0; r < rows; ++r) {
    for (std::uint64_t c = 0; c < cols; ++c) {
      if (std::memcmp(x + (r * cols + c) * w, y + (c * rows + r) * w, w) != 0) return false;
    }
  }
  return true;
}

}  // namespace

std::unordered_map<std::string, std::string> TiedInitializers(const onnx::GraphProto& g) {
  // By element type and the unordered pair of dims: only such tensors can repeat each other.
  std::map<std::tuple<int, std::int64_t, std::int64_t>, std::vector<const onnx::TensorProto*>>
      groups;
  for (const auto& t : g.initializer()) {
    if (!Candidate(t)) continue;
    groups[{t.data_type(), std::min(t.dims(0), t.dims(1)), std::max(t.dims(0), t.dims(1))}]
        .push_back(&t);
  }
  std::unordered_map<std::string, std::string> copies;
  for (const auto& [key, ts] : groups) {
    for (std::size_t i = 1; i < ts.size(); ++i) {
      for (std::size_t j = 0; j < i; ++j) {
        const onnx::TensorProto &copy = *ts[i], &first = *ts[j];
        if (copies.count(first.name())) continue;  // map onto the first of a family only
        const bool same_shape = copy.dims(0) == first.dims(0) && copy.dims(1) == first.dims(1);
        const bool equal =
            same_shape ? copy.raw_data() == first.raw_data() : Transposed(copy, first);
        if (equal) {
          copies[copy.name()] = first.name();
          break;
        }
      }
    }
  }
  return copies;
}

}  // namespace tierpool::hooks
