#include "compiler_hooks/onnx_fold.h"

#include <algorithm>
#include <cstring>
#include <optional>
#include <set>

namespace tierpool::hooks {

namespace {

// Small int64 tensors computed from shapes (Shape -> Gather -> Div -> Concat -> Slice ...).
// ONNX's shape inference cannot always follow such arithmetic; folding it to constants lets it.
struct IntConst {
  std::vector<std::int64_t> v;
  std::vector<std::int64_t> dims;       // empty: a scalar
  int type = onnx::TensorProto::INT64;  // or BOOL (Equal), INT32 (read from the graph)
};

std::optional<IntConst> ReadIntTensor(const onnx::TensorProto& t) {
  if (t.data_type() != onnx::TensorProto::INT64 && t.data_type() != onnx::TensorProto::INT32) {
    return std::nullopt;
  }
  IntConst c;
  c.type = onnx::TensorProto::INT64;  // folded results are written as INT64
  c.dims.assign(t.dims().begin(), t.dims().end());
  std::uint64_t n = Elements(c.dims);
  if (n > 64) return std::nullopt;
  if (t.has_raw_data()) {
    std::size_t width = t.data_type() == onnx::TensorProto::INT64 ? 8 : 4;
    if (t.raw_data().size() != n * width) return std::nullopt;
    for (std::uint64_t i = 0; i < n; ++i) {
      if (width == 8) {
        std::int64_t x;
        std::memcpy(&x, t.raw_data().data() + i * 8, 8);
        c.v.push_back(x);
      } else {
        std::int32_t x;
        std::memcpy(&x, t.raw_data().data() + i * 4, 4);
        c.v.push_back(x);
      }
    }
  } else if (t.data_type() == onnx::TensorProto::INT64) {
    c.v.assign(t.int64_data().begin(), t.int64_data().end());
  } else {
    c.v.assign(t.int32_data().begin(), t.int32_data().end());
  }
  if (c.v.size() != n) return std::nullopt;
  return c;
}

// Numpy broadcasting of two shapes; nullopt where they do not broadcast.
std::optional<std::vector<std::int64_t>> BroadcastDims(const std::vector<std::int64_t>& a,
                                                       const std::vector<std::int64_t>& b) {
  std::vector<std::int64_t> out(std::max(a.size(), b.size()));
  for (std::size_t i = 0; i < out.size(); ++i) {
    std::int64_t x = i < a.size() ? a[a.size() - 1 - i] : 1;
    std::int64_t y = i < b.size() ? b[b.size() - 1 - i] : 1;
    if (x != y && x != 1 && y != 1) return std::nullopt;
    out[out.size() - 1 - i] = x == 1 ? y : x;
  }
  return out;
}

std::optional<std::vector<std::int64_t>> UnsqueezeDims(const std::vector<std::int64_t>& in,
                                                       std::vector<std::int64_t> axes) {
  const auto rank = static_cast<std::int64_t>(in.size() + axes.size());
  for (auto& a : axes) {
    if (a < 0) a += rank;
    if (a < 0 || a >= rank) return std::nullopt;
  }
  std::vector<std::int64_t> out;
  std::size_t next = 0;
  for (std::int64_t i = 0; i < rank; ++i) {
    if (std::find(axes.begin(), axes.end(), i) != axes.end()) {
      out.push_back(1);
    } else if (next < in.size()) {
      out.push_back(in[next++]);
    } else {
      return std::nullopt;
    }
  }
  return out;
}

std::optional<std::vector<std::int64_t>> SqueezeDims(const std::vector<std::int64_t>& in,
                                                     std::vector<std::int64_t> axes) {
  const auto rank = static_cast<std::int64_t>(in.size());
  for (auto& a : axes) {
    if (a < 0) a += rank;
    if (a < 0 || a >= rank || in[static_cast<std::size_t>(a)] != 1) return std::nullopt;
  }
  std::vector<std::int64_t> out;
  for (std::int64_t i = 0; i < rank; ++i) {
    bool drop = axes.empty() ? in[static_cast<std::size_t>(i)] == 1
                             : std::find(axes.begin(), axes.end(), i) != axes.end();
    if (!drop) out.push_back(in[static_cast<std::size_t>(i)]);
  }
  return out;
}

// One round: evaluates what it can and adds the results as initializers. Returns how many.
// Row-major strides of a shape.
std::vector<std::int64_t> Strides(const std::vector<std::int64_t>& dims) {
  std::vector<std::int64_t> st(dims.size(), 1);
  for (std::size_t i = dims.size(); i-- > 1;) st[i - 1] = st[i] * dims[i];
  return st;
}

// ONNX Slice over a small tensor: any axes, negative and clamped bounds, any nonzero steps.
std::optional<IntConst> SliceConst(const IntConst& x, const std::vector<std::int64_t>& starts,
                                   const std::vector<std::int64_t>& ends,
                                   const std::vector<std::int64_t>& axes,
                                   const std::vector<std::int64_t>& steps) {
  const auto rank = static_cast<std::int64_t>(x.dims.size());
  if (starts.size() != ends.size() || axes.size() != starts.size() ||
      steps.size() != starts.size() || rank == 0) {
    return std::nullopt;
  }
  // The indices kept along each axis.
  std::vector<std::vector<std::int64_t>> keep(x.dims.size());
  for (std::size_t d = 0; d < x.dims.size(); ++d) {
    for (std::int64_t i = 0; i < x.dims[d]; ++i) keep[d].push_back(i);
  }
  for (std::size_t k = 0; k < axes.size(); ++k) {
    std::int64_t axis = axes[k] < 0 ? axes[k] + rank : axes[k];
    if (axis < 0 || axis >= rank || steps[k] == 0) return std::nullopt;
    const std::int64_t dim = x.dims[static_cast<std::size_t>(axis)];
    std::int64_t s = starts[k] < 0 ? starts[k] + dim : starts[k];
    std::int64_t e = ends[k] < 0 ? ends[k] + dim : ends[k];
    std::vector<std::int64_t> idx;
    if (steps[k] > 0) {
      s = std::clamp<std::int64_t>(s, 0, dim);
      e = std::clamp<std::int64_t>(e, 0, dim);
      for (std::int64_t i = s; i < e; i += steps[k]) idx.push_back(i);
    } else {
      s = std::clamp<std::int64_t>(s, -1, dim - 1);
      e = std::clamp<std::int64_t>(e, -1, dim - 1);
      for (std::int64_t i = s; i > e; i += steps[k]) idx.push_back(i);
    }
    keep[static_cast<std::size_t>(axis)] = idx;
  }
  IntConst out{{}, {}, x.type};
  for (const auto& k : keep) out.dims.push_back(static_cast<std::int64_t>(k.size()));
  if (Elements(out.dims) > 64) return std::nullopt;
  const auto st = Strides(x.dims);
  std::vector<std::size_t> pos(keep.size(), 0);
  for (std::uint64_t n = 0; n < Elements(out.dims); ++n) {
    std::int64_t flat = 0;
    for (std::size_t d = 0; d < keep.size(); ++d) flat += keep[d][pos[d]] * st[d];
    out.v.push_back(x.v[static_cast<std::size_t>(flat)]);
    for (std::size_t d = keep.size(); d-- > 0;) {  // the next index, last axis fastest
      if (++pos[d] < keep[d].size()) break;
      pos[d] = 0;
    }
  }
  return out;
}

// ONNX Transpose of a small tensor (no perm: the axes reversed).
std::optional<IntConst> TransposeConst(const IntConst& x, std::vector<std::int64_t> perm) {
  const std::size_t rank = x.dims.size();
  if (perm.empty()) {
    for (std::size_t i = rank; i-- > 0;) perm.push_back(static_cast<std::int64_t>(i));
  }
  if (perm.size() != rank) return std::nullopt;
  std::vector<std::int64_t> dims;
  for (auto p : perm) {
    if (p < 0 || p >= static_cast<std::int64_t>(rank)) return std::nullopt;
    dims.push_back(x.dims[static_cast<std::size_t>(p)]);
  }
  const auto in_st = Strides(x.dims);
  IntConst out{{}, dims, x.type};
  std::vector<std::int64_t> pos(rank, 0);
  for (std::uint64_t n = 0; n < Elements(dims); ++n) {
    std::int64_t flat = 0;
    for (std::size_t d = 0; d < rank; ++d)
      flat += pos[d] * in_st[static_cast<std::size_t>(perm[d])];
    out.v.push_back(x.v[static_cast<std::size_t>(flat)]);
    for (std::size_t d = rank; d-- > 0;) {
      if (++pos[d] < dims[d]) break;
      pos[d] = 0;
    }
  }
  return out;
}

// Expand: `x` broadcast to `shape` (numpy rules; the result at most 64 elements).
std::optional<IntConst> ExpandConst(const IntConst& x, const std::vector<std::int64_t>& shape) {
  auto dims = BroadcastDims(x.dims, shape);
  if (!dims || Elements(*dims) > 64) return std::nullopt;
  IntConst out{{}, *dims, x.type};
  const std::size_t rank = dims->size();
  std::vector<std::int64_t> pos(rank, 0);
  for (std::uint64_t n = 0; n < Elements(*dims); ++n) {
    // The source element: each of x's dims of 1 stays at 0.
    std::uint64_t at = 0;
    for (std::size_t d = rank - x.dims.size(); d < rank; ++d) {
      const std::int64_t xd = x.dims[d - (rank - x.dims.size())];
      at = at * static_cast<std::uint64_t>(xd) + static_cast<std::uint64_t>(xd == 1 ? 0 : pos[d]);
    }
    out.v.push_back(x.v[at]);
    for (std::size_t d = rank; d-- > 0;) {
      if (++pos[d] < (*dims)[d]) break;
      pos[d] = 0;
    }
  }
  return out;
}

// Split of a 1-D tensor into `outputs` parts: `sizes` (an input from opset 13, an attribute
// before) or as even as the count allows (the last part shorter).
std::optional<std::vector<IntConst>> SplitConst(const IntConst& x, std::int64_t axis, int outputs,
                                                std::vector<std::int64_t> sizes) {
  if (x.dims.size() != 1 || (axis != 0 && axis != -1) || outputs <= 0) return std::nullopt;
  const std::int64_t n = x.dims[0];
  if (sizes.empty()) {
    const std::int64_t each = (n + outputs - 1) / outputs;
    for (int i = 0; i < outputs; ++i) sizes.push_back(std::min(each, n - i * each));
  }
  std::int64_t total = 0;
  for (auto v : sizes) total += v < 0 ? -1 : v;
  if (static_cast<int>(sizes.size()) != outputs || total != n) return std::nullopt;
  std::vector<IntConst> parts;
  std::int64_t at = 0;
  for (auto v : sizes) {
    parts.push_back(
        IntConst{std::vector<std::int64_t>(x.v.begin() + at, x.v.begin() + at + v), {v}, x.type});
    at += v;
  }
  return parts;
}

}  // namespace

int FoldShapeArithmetic(onnx::GraphProto* g,
                        const std::unordered_map<std::string, std::vector<std::int64_t>>& shapes) {
  std::unordered_map<std::string, IntConst> k;
  std::set<std::string> have;
  for (const auto& init : g->initializer()) {
    have.insert(init.name());
    if (auto c = ReadIntTensor(init)) k[init.name()] = *c;
  }
  auto attr_i = [](const onnx::NodeProto& n, const char* name, std::int64_t def) {
    for (const auto& a : n.attribute()) {
      if (a.name() == name) return a.i();
    }
    return def;
  };
  int added = 0;
  auto emit = [&](const std::string& name, const IntConst& c) {
    k[name] = c;
    if (have.count(name)) return;
    auto* init = g->add_initializer();
    init->set_name(name);
    init->set_data_type(c.type);
    for (auto d : c.dims) init->add_dims(d);
    for (auto x : c.v) {
      if (c.type == onnx::TensorProto::BOOL) {
        init->add_int32_data(static_cast<std::int32_t>(x));
      } else {
        init->add_int64_data(x);
      }
    }
    have.insert(name);
    ++added;
  };
  for (const auto& n : g->node()) {
    if (n.output_size() == 0 || n.output(0).empty() || k.count(n.output(0))) continue;
    const std::string& op = n.op_type();
    auto in = [&](int i) -> const IntConst* {
      if (i >= n.input_size() || n.input(i).empty()) return nullptr;
      auto it = k.find(n.input(i));
      return it == k.end() ? nullptr : &it->second;
    };
    std::optional<IntConst> out;
    if (op == "Constant") {
      for (const auto& a : n.attribute()) {
        if (a.name() == "value" && a.has_t()) out = ReadIntTensor(a.t());
      }
    } else if (op == "ConstantOfShape" && in(0) && in(0)->dims.size() == 1) {
      // torch's export of expand(-1, ...) builds its target shape with these four.
      std::optional<IntConst> fill = IntConst{{0}, {}};
      for (const auto& a : n.attribute()) {
        if (a.name() == "value" && a.has_t()) fill = ReadIntTensor(a.t());
      }
      if (fill && fill->v.size() == 1 && Elements(in(0)->v) <= 64 &&
          std::all_of(in(0)->v.begin(), in(0)->v.end(), [](std::int64_t d) { return d >= 0; })) {
        out = IntConst{std::vector<std::int64_t>(Elements(in(0)->v), fill->v[0]), in(0)->v};
      }
    } else if (op == "Reshape" && in(0) && in(1)) {
      std::vector<std::int64_t> dims = in(1)->v;
      std::int64_t known = 1;
      int infer = -1;
      for (std::size_t i = 0; i < dims.size(); ++i) {
        if (dims[i] == 0 && i < in(0)->dims.size()) dims[i] = in(0)->dims[i];
        if (dims[i] == -1 && infer < 0) {
          infer = static_cast<int>(i);
        } else if (dims[i] > 0) {
          known *= dims[i];
        }
      }
      auto n_in = static_cast<std::int64_t>(in(0)->v.size());
      if (infer >= 0 && known > 0) dims[static_cast<std::size_t>(infer)] = n_in / known;
      if (static_cast<std::int64_t>(Elements(dims)) == n_in) out = IntConst{in(0)->v, dims};
    } else if (op == "Equal" && in(0) && in(1) && in(0)->v.size() == in(1)->v.size() &&
               BroadcastDims(in(0)->dims, in(1)->dims) &&
               Elements(*BroadcastDims(in(0)->dims, in(1)->dims)) == in(0)->v.size()) {
      IntConst c{{}, *BroadcastDims(in(0)->dims, in(1)->dims), onnx::TensorProto::BOOL};
      for (std::size_t i = 0; i < in(0)->v.size(); ++i)
        c.v.push_back(in(0)->v[i] == in(1)->v[i] ? 1 : 0);
      out = c;
    } else if (op == "Where" && in(0) && in(1) && in(2) && in(0)->type == onnx::TensorProto::BOOL &&
               in(1)->v.size() == in(0)->v.size() && in(2)->v.size() == in(0)->v.size() &&
               in(1)->dims.size() <= in(0)->dims.size() &&
               in(2)->dims.size() <= in(0)->dims.size()) {
      IntConst c{{}, in(0)->dims};
      for (std::size_t i = 0; i < in(0)->v.size(); ++i)
        c.v.push_back(in(0)->v[i] ? in(1)->v[i] : in(2)->v[i]);
      out = c;
    } else if (op == "Shape" && n.input_size() == 1) {
      auto it = shapes.find(n.input(0));
      if (it != shapes.end()) {
        IntConst c{it->second, {static_cast<std::int64_t>(it->second.size())}};
        std::int64_t r = static_cast<std::int64_t>(c.v.size());
        std::int64_t s = attr_i(n, "start", 0), e = attr_i(n, "end", r);
        if (s < 0) s += r;
        if (e < 0) e += r;
        s = std::clamp<std::int64_t>(s, 0, r);
        e = std::clamp<std::int64_t>(e, s, r);
        c.v = std::vector<std::int64_t>(c.v.begin() + s, c.v.begin() + e);
        c.dims = {e - s};
        out = c;
      }
    } else if (op == "Gather" && in(0) && in(1) && in(0)->dims.size() == 1 &&
               attr_i(n, "axis", 0) == 0) {
      IntConst c{{}, in(1)->dims};
      for (auto idx : in(1)->v) {
        if (idx < 0) idx += static_cast<std::int64_t>(in(0)->v.size());
        if (idx < 0 || idx >= static_cast<std::int64_t>(in(0)->v.size())) return added;
        c.v.push_back(in(0)->v[static_cast<std::size_t>(idx)]);
      }
      out = c;
    } else if ((op == "Identity" ||
                (op == "Cast" && attr_i(n, "to", 0) == onnx::TensorProto::INT64)) &&
               in(0)) {
      out = *in(0);
    } else if ((op == "Unsqueeze" || op == "Squeeze") && in(0)) {
      // Axes: an input from opset 13, an attribute before.
      std::vector<std::int64_t> axes;
      if (in(1)) {
        axes = in(1)->v;
      } else {
        for (const auto& a : n.attribute()) {
          if (a.name() == "axes") axes.assign(a.ints().begin(), a.ints().end());
        }
      }
      auto dims =
          op == "Unsqueeze" ? UnsqueezeDims(in(0)->dims, axes) : SqueezeDims(in(0)->dims, axes);
      if (dims) out = IntConst{in(0)->v, *dims, in(0)->type};
    } else if (op == "Concat" && n.input_size() > 0) {
      IntConst c;
      bool ok = true;
      for (int i = 0; i < n.input_size() && ok; ++i) {
        ok = in(i) != nullptr;
        if (ok) c.v.insert(c.v.end(), in(i)->v.begin(), in(i)->v.end());
      }
      c.dims = {static_cast<std::int64_t>(c.v.size())};
      if (ok) out = c;
    } else if (op == "Slice" && in(0) && in(1) && in(2)) {
      std::vector<std::int64_t> axes, steps(in(1)->v.size(), 1);
      if (in(3)) {
        axes = in(3)->v;
      } else {
        for (std::size_t i = 0; i < in(1)->v.size(); ++i)
          axes.push_back(static_cast<std::int64_t>(i));
      }
      if (in(4)) steps = in(4)->v;
      out = SliceConst(*in(0), in(1)->v, in(2)->v, axes, steps);
    } else if (op == "Expand" && in(0) && in(1)) {
      // torch's export of repeat_interleave expands its repeat counts like this.
      out = ExpandConst(*in(0), in(1)->v);
    } else if (op == "Split" && in(0)) {
      std::vector<std::int64_t> sizes = in(1) ? in(1)->v : std::vector<std::int64_t>{};
      for (const auto& a : n.attribute()) {
        if (a.name() == "split") sizes.assign(a.ints().begin(), a.ints().end());
      }
      if (auto parts = SplitConst(*in(0), attr_i(n, "axis", 0), n.output_size(), sizes)) {
        for (int i = 0; i < n.output_size(); ++i) {
          if (!n.output(i).empty()) emit(n.output(i), (*parts)[static_cast<std::size_t>(i)]);
        }
      }
      continue;
    } else if (op == "Transpose" && in(0)) {
      std::vector<std::int64_t> perm;
      for (const auto& a : n.attribute()) {
        if (a.name() == "perm") perm.assign(a.ints().begin(), a.ints().end());
      }
      out = TransposeConst(*in(0), perm);
    } else if ((op == "Add" || op == "Sub" || op == "Mul" || op == "Div" || op == "Mod") && in(0) &&
               in(1) && attr_i(n, "fmod", 0) == 0) {
      const IntConst &a = *in(0), &b = *in(1);
      std::size_t len = std::max(a.v.size(), b.v.size());
      auto dims = BroadcastDims(a.dims, b.dims);
      if (dims && Elements(*dims) == len && (a.v.size() == len || a.v.size() == 1) &&
          (b.v.size() == len || b.v.size() == 1)) {
        IntConst c{{}, *dims};
        for (std::size_t i = 0; i < len; ++i) {
          std::int64_t x = a.v[a.v.size() == 1 ? 0 : i], y = b.v[b.v.size() == 1 ? 0 : i];
          if ((op == "Div" || op == "Mod") && y == 0) return added;
          std::int64_t r = x % (y == 0 ? 1 : y);
          if (r != 0 && (r < 0) != (y < 0)) r += y;  // Mod takes the divisor's sign
          c.v.push_back(op == "Add"   ? x + y
                        : op == "Sub" ? x - y
                        : op == "Mul" ? x * y
                        : op == "Div" ? x / y
                                      : r);
        }
        out = c;
      }
    }
    if (!out) continue;
    if (op == "Constant") {
      k[n.output(0)] = *out;
    } else {
      emit(n.output(0), *out);
    }
  }
  return added;
}

}  // namespace tierpool::hooks
