#include "compiler_hooks/onnx_importer.h"

#include "compiler_hooks/onnx_model.h"

#include "compiler_hooks/onnx_fold.h"
#include "compiler_hooks/onnx_shape_rules.h"
#include "compiler_hooks/onnx_tied.h"

#include <onnx/defs/schema.h>
#include <onnx/onnx_pb.h>
#include <onnx/shape_inference/implementation.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <unordered_map>
#include <unordered_set>

namespace tierpool::hooks {

namespace {

using prefetch::Schedule;

// Bytes per element; 0 for types the schedule cannot size.
std::uint64_t ElementBytes(int type) {
  switch (type) {
    case onnx::TensorProto::BOOL:
    case onnx::TensorProto::INT8:
    case onnx::TensorProto::UINT8:
      return 1;
    case onnx::TensorProto::INT16:
    case onnx::TensorProto::UINT16:
    case onnx::TensorProto::FLOAT16:
    case onnx::TensorProto::BFLOAT16:
      return 2;
    case onnx::TensorProto::INT32:
    case onnx::TensorProto::UINT32:
    case onnx::TensorProto::FLOAT:
      return 4;
    case onnx::TensorProto::INT64:
    case onnx::TensorProto::UINT64:
    case onnx::TensorProto::DOUBLE:
    case onnx::TensorProto::COMPLEX64:
      return 8;
    case onnx::TensorProto::COMPLEX128:
      return 16;
    default:
      return 0;
  }
}

std::string TypeName(int type) {
  return onnx::TensorProto_DataType_Name(static_cast<onnx::TensorProto_DataType>(type));
}

struct Value {
  std::vector<std::int64_t> shape;
  int elem_type = 0;
  bool known = false;
};

Value FromType(const onnx::TypeProto& t) {
  Value v;
  if (!t.has_tensor_type()) return v;
  v.elem_type = t.tensor_type().elem_type();
  if (!t.tensor_type().has_shape()) return v;
  v.known = true;
  for (const auto& d : t.tensor_type().shape().dim()) {
    if (!d.has_dim_value() || d.dim_value() < 0) {
      v.known = false;
      break;
    }
    v.shape.push_back(d.dim_value());
  }
  return v;
}

double Flops(const onnx::NodeProto& node, const std::vector<const Value*>& in,
             const std::vector<const Value*>& out) {
  const std::string& op = node.op_type();
  auto shape = [](const Value* v) { return v ? v->shape : std::vector<std::int64_t>{}; };
  if ((op == "MatMul" || op == "MatMulInteger") && in.size() >= 2 && !out.empty() && out[0]) {
    auto a = shape(in[0]);
    if (a.empty()) return 0;
    // out = A @ B: every output element is a K-long dot product.
    return 2.0 * static_cast<double>(Elements(out[0]->shape)) * static_cast<double>(a.back());
  }
  if (op == "Gemm" && in.size() >= 2 && !out.empty() && out[0]) {
    auto a = shape(in[0]);
    if (a.size() != 2) return 0;
    std::int64_t k = a[1];
    for (const auto& attr : node.attribute()) {
      if (attr.name() == "transA" && attr.i() != 0) k = a[0];
    }
    return 2.0 * static_cast<double>(Elements(out[0]->shape)) * static_cast<double>(k);
  }
  if ((op == "Conv" || op == "ConvTranspose") && in.size() >= 2 && in[1] && !out.empty() &&
      out[0]) {
    // Each output element: C_in/group * kernel multiply-adds; W is [C_out, C_in/group, k...].
    auto w = in[1]->shape;
    if (w.size() < 3) return 0;
    std::uint64_t per = 1;
    for (std::size_t i = 1; i < w.size(); ++i) per *= static_cast<std::uint64_t>(w[i]);
    const Value* big = op == "Conv" ? out[0] : in[0];
    return 2.0 * static_cast<double>(Elements(big->shape)) * static_cast<double>(per);
  }
  if ((op == "Attention" || op == "MultiHeadAttention") && !in.empty() && in[0] &&
      in[0]->shape.size() == 3) {
    // Q K^T and the weighted sum: 4 * batch * seq^2 * hidden.
    auto q = in[0]->shape;
    return 4.0 * static_cast<double>(q[0]) * static_cast<double>(q[1]) * static_cast<double>(q[1]) *
           static_cast<double>(q[2]);
  }
  return 0;  // memory-bound: timed by its bytes
}

std::unordered_map<std::string, Value> CollectShapes(const onnx::GraphProto& g) {
  std::unordered_map<std::string, Value> values;
  for (const auto& vi : g.input()) values[vi.name()] = FromType(vi.type());
  for (const auto& vi : g.value_info()) values[vi.name()] = FromType(vi.type());
  for (const auto& vi : g.output()) values[vi.name()] = FromType(vi.type());
  for (const auto& init : g.initializer()) {
    Value v;
    v.elem_type = init.data_type();
    v.known = true;
    v.shape.assign(init.dims().begin(), init.dims().end());
    values[init.name()] = v;
  }
  return values;
}

}  // namespace

Result<onnx::ModelProto> LoadOnnxModel(const std::string& path, std::uint64_t max_bytes) {
  std::error_code ec;
  auto file_size = std::filesystem::file_size(path, ec);
  if (ec) return Status::NotFound("cannot read " + path + ": " + ec.message());
  if (file_size > max_bytes) return Status::InvalidArgument(path + " is too large");
  onnx::ModelProto model;
  std::ifstream in(path, std::ios::binary);
  if (!model.ParseFromIstream(&in)) return Status::InvalidArgument(path + " is not an ONNX model");
  return model;
}

Status SaveOnnxModel(const onnx::ModelProto& model, const std::string& source,
                     const std::string& path) {
  auto external = [](const onnx::TensorProto& t) {
    return t.data_location() == onnx::TensorProto::EXTERNAL;
  };
  const bool has_external =
      std::any_of(model.graph().initializer().begin(), model.graph().initializer().end(), external);
  if (has_external) {
    std::error_code ec;
    auto from =
        std::filesystem::weakly_canonical(std::filesystem::absolute(source).parent_path(), ec);
    auto to = std::filesystem::weakly_canonical(std::filesystem::absolute(path).parent_path(), ec);
    if (from != to) {
      return Status::InvalidArgument(source + " keeps its weights in external data files, named " +
                                     "relative to its directory: write the new model into " +
                                     from.string() + " too");
    }
  }
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out || !model.SerializeToOstream(&out) || !out.flush()) {
    return Status::IoError("cannot write " + path);
  }
  return Status::Ok();
}

namespace {

// What ONNX's shape inference takes on trust, checked first: an opset of the default domain
// that this ONNX library knows, and a graph in order (every value a node reads is a graph input,
// an initializer or an earlier node's output, and no value is made twice). Fuzzing found a Shape
// node reading an undefined value under opset 91 that crashed inference inside libonnx.
Status CheckGraphStructure(const onnx::ModelProto& model, const std::string& path) {
  const auto& ranges = onnx::OpSchemaRegistry::DomainToVersionRange::Instance().Map();
  const auto [lowest, highest] = ranges.at(onnx::ONNX_DOMAIN);
  bool default_domain = false;
  for (const auto& opset : model.opset_import()) {
    if (!opset.domain().empty() && opset.domain() != "ai.onnx") continue;
    default_domain = true;
    if (opset.version() < lowest || opset.version() > highest) {
      return Status::InvalidArgument(path + ": opset " + std::to_string(opset.version()) +
                                     " of the default domain is not one " +
                                     "this ONNX library knows (" + std::to_string(lowest) + " to " +
                                     std::to_string(highest) +
                                     "); export at an opset in that range");
    }
  }
  if (!default_domain) {
    return Status::InvalidArgument(path + ": the model imports no opset of the default domain");
  }
  const auto& graph = model.graph();
  std::unordered_set<std::string> defined;
  for (const auto& input : graph.input()) defined.insert(input.name());
  for (const auto& init : graph.initializer()) defined.insert(init.name());
  for (int i = 0; i < graph.node_size(); ++i) {
    const auto& node = graph.node(i);
    const std::string where =
        "node " + std::to_string(i) + " '" + node.name() + "', op " + node.op_type();
    for (const auto& in : node.input()) {
      if (!in.empty() && defined.count(in) == 0) {
        return Status::InvalidArgument(path + ": " + where + " reads '" + in +
                                       "', which nothing before it defines (graph not in order?)");
      }
    }
    for (const auto& out : node.output()) {
      if (!out.empty() && !defined.insert(out).second) {
        return Status::InvalidArgument(path + ": " + where + " makes '" + out +
                                       "', which is already defined");
      }
    }
  }
  return Status::Ok();
}

}  // namespace

Result<Schedule> ImportOnnx(const std::string& path, const OnnxImportOptions& options) {
  auto model = LoadOnnxModel(path, options.max_file_bytes);
  if (!model.ok()) return model.status();
  return ImportOnnxModel(std::move(*model), path, options);
}

Result<Schedule> ImportOnnxModel(onnx::ModelProto model, const std::string& path,
                                 const OnnxImportOptions& options) {
  if (options.batch < 1) return Status::InvalidArgument("--batch must be >= 1");
  if (!model.has_graph() || model.graph().node_size() == 0) {
    return Status::InvalidArgument(path + ": the ONNX graph has no nodes");
  }
  TIERPOOL_RETURN_IF_ERROR(CheckGraphStructure(model, path));
  auto* graph = model.mutable_graph();
  std::set<std::string> initializer_names;
  for (const auto& init : graph->initializer()) initializer_names.insert(init.name());

  // Fix symbolic dimensions of the inputs, so shape inference can size everything.
  std::set<std::string> data_inputs(options.data_inputs.begin(), options.data_inputs.end());
  for (auto& input : *graph->mutable_input()) {
    if (initializer_names.count(input.name())) continue;
    if (!input.type().has_tensor_type() || !input.type().tensor_type().has_shape()) {
      return Status::InvalidArgument("graph input '" + input.name() + "' has no shape");
    }
    auto* dims = input.mutable_type()->mutable_tensor_type()->mutable_shape()->mutable_dim();
    for (int i = 0; i < dims->size(); ++i) {
      auto* d = dims->Mutable(i);
      if (d->has_dim_value()) continue;
      data_inputs.insert(input.name());
      std::string param = d->has_dim_param() ? d->dim_param() : "";
      auto given = options.dims.find(param);
      if (given != options.dims.end()) {
        d->set_dim_value(given->second);
      } else if (i == 0) {
        d->set_dim_value(options.batch);
      } else {
        return Status::InvalidArgument(
            "graph input '" + input.name() + "' has symbolic dimension " + std::to_string(i) +
            (param.empty() ? "" : " ('" + param + "')") + "; give its size with --dim " +
            (param.empty() ? "NAME" : param) + "=N");
      }
    }
  }
  // Graphs exported without weights: with no symbolic input, the first input is the data.
  if (data_inputs.empty()) {
    for (const auto& input : graph->input()) {
      if (!initializer_names.count(input.name())) {
        data_inputs.insert(input.name());
        break;
      }
    }
  }
  for (const auto& node : graph->node()) {
    if (node.op_type() == "Loop" || node.op_type() == "If" || node.op_type() == "Scan") {
      return Status::Unimplemented("node '" + node.name() + "': control-flow op " + node.op_type() +
                                   " is not supported (export a flat graph)");
    }
  }
  // Shape inference, then folding of shape arithmetic it could not follow, until nothing new.
  // Then our own rules for what it leaves unsized (ONNX 1.12's Einsum infers a rank only).
  std::set<std::string> folded;
  std::map<std::string, std::string> ruled;  // value -> the op whose rule of ours sized it
  std::unordered_map<std::string, Value> values;
  // Each round sizes at least one more value or stops, so it ends within one round per node; a
  // deep dynamic graph needs about two per layer (ViT-H/14: 32 layers).
  for (int round = 0; round <= graph->node_size(); ++round) {
    try {
      onnx::ShapeInferenceOptions opts{/*check_type=*/false, /*error_mode=*/1,
                                       /*enable_data_propagation=*/true};
      std::unordered_map<std::string, onnx::TensorShapeProto> shape_data;
      onnx::shape_inference::InferShapes(model, onnx::OpSchemaRegistry::Instance(), opts,
                                         &shape_data);
    } catch (const std::exception& e) {
      return Status::InvalidArgument(path + ": ONNX shape inference failed: " + e.what());
    }
    values = CollectShapes(*graph);
    int before = graph->initializer_size();
    std::unordered_map<std::string, std::vector<std::int64_t>> known;
    for (const auto& [name, v] : values) {
      if (v.known) known.emplace(name, v.shape);
    }
    const int folded_now = FoldShapeArithmetic(graph, known);
    for (int i = before; i < graph->initializer_size(); ++i)
      folded.insert(graph->initializer(i).name());
    if (folded_now == 0 && ApplyShapeRules(graph, known, &ruled) == 0) break;
  }
  // The folded values are ours, not the model's: they are not weights.
  for (const auto& name : folded) values.erase(name);
  values = CollectShapes(*graph);

  Schedule s;
  s.set_format_version(1);
  s.set_name(graph->name().empty() ? std::filesystem::path(path).stem().string() : graph->name());
  s.set_source("onnx:" + path);
  s.set_repeats(options.repeats);
  std::unordered_map<std::string, std::uint32_t> tensor_of;
  std::set<std::string> outputs;
  for (const auto& o : graph->output()) outputs.insert(o.name());

  auto add_tensor = [&](const std::string& name, int def, schedule::TensorKind kind,
                        const std::string& where) -> Result<std::uint32_t> {
    auto it = values.find(name);
    if (it == values.end() || !it->second.known) {
      return Status::InvalidArgument(
          "cannot size value '" + name + "' (" + where +
          "): shape inference left its shape unknown; give symbolic input dimensions with "
          "--batch or --dim NAME=N");
    }
    std::uint64_t elem = ElementBytes(it->second.elem_type);
    if (elem == 0) {
      return Status::Unimplemented("value '" + name + "' (" + where + ") has element type " +
                                   TypeName(it->second.elem_type) + ", which has no fixed size");
    }
    auto* t = s.add_tensors();
    auto id = static_cast<std::uint32_t>(s.tensors_size() - 1);
    t->set_id(id);
    t->set_name(name);
    t->set_size_bytes(Elements(it->second.shape) * elem);
    t->set_dtype(TypeName(it->second.elem_type));
    for (auto d : it->second.shape) t->add_shape(d);
    t->set_kind(kind);
    t->set_def_step(def);
    if (auto r = ruled.find(name); r != ruled.end()) t->set_shape_rule(r->second);
    tensor_of[name] = id;
    return id;
  };

  // Weights and inputs exist before the first step. A tied weight's copy (an output projection's
  // transpose of the embedding) is the weight it repeats: its readers use that tensor.
  const auto tied = TiedInitializers(*graph);
  for (const auto& init : graph->initializer()) {
    if (folded.count(init.name())) {
      auto r = add_tensor(init.name(), -1, schedule::OTHER, "folded shape value");
      if (!r.ok()) return r.status();
      continue;
    }
    if (auto t = tied.find(init.name()); t != tied.end() && tensor_of.count(t->second)) {
      tensor_of[init.name()] = tensor_of[t->second];
      continue;
    }
    auto r = add_tensor(init.name(), -1, schedule::WEIGHT, "initializer");
    if (!r.ok()) return r.status();
  }
  for (const auto& input : graph->input()) {
    if (tensor_of.count(input.name())) continue;
    auto kind = data_inputs.count(input.name()) ? schedule::INPUT : schedule::WEIGHT;
    auto r = add_tensor(input.name(), -1, kind, "graph input");
    if (!r.ok()) return r.status();
  }
  for (int i = 0; i < graph->node_size(); ++i) {
    const auto& node = graph->node(i);
    std::string where =
        "node " + std::to_string(i) + " '" + node.name() + "', op " + node.op_type();
    // A node whose every output was folded into a constant ran at import: no step, and its
    // outputs stay the folded tensors added above (adding them again gave two tensors of one
    // name).
    const bool all_folded =
        std::all_of(node.output().begin(), node.output().end(),
                    [&](const std::string& o) { return o.empty() || folded.count(o) != 0; });
    if (all_folded && node.output_size() > 0) continue;
    const auto step_id = static_cast<std::uint32_t>(s.steps_size());
    auto* step = s.add_steps();
    step->set_name(node.name().empty() ? node.op_type() + "_" + std::to_string(i) : node.name());
    step->set_op_type(node.op_type());
    std::vector<const Value*> in, out;
    std::uint64_t bytes = 0;
    std::set<std::uint32_t> used;
    for (const auto& name : node.input()) {
      if (name.empty()) {
        in.push_back(nullptr);
        continue;
      }
      auto it = tensor_of.find(name);
      if (it == tensor_of.end()) {
        return Status::InvalidArgument(where + " reads '" + name +
                                       "', which nothing before it defines (graph not in order?)");
      }
      in.push_back(&values[name]);
      if (used.insert(it->second).second) {
        s.mutable_tensors(static_cast<int>(it->second))->add_use_steps(step_id);
        bytes += s.tensors(static_cast<int>(it->second)).size_bytes();
      }
    }
    for (const auto& name : node.output()) {
      if (name.empty()) continue;
      if (folded.count(name)) {  // a constant now, defined before the schedule
        out.push_back(&values[name]);
        continue;
      }
      auto r = add_tensor(name, static_cast<int>(step_id),
                          outputs.count(name) ? schedule::OUTPUT : schedule::ACTIVATION, where);
      if (!r.ok()) return r.status();
      out.push_back(&values[name]);
      bytes += s.tensors(static_cast<int>(*r)).size_bytes();
    }
    step->set_bytes_touched(bytes);
    step->set_flops(Flops(node, in, out));
  }
  TIERPOOL_RETURN_IF_ERROR(prefetch::Validate(s));
  return s;
}

}  // namespace tierpool::hooks
