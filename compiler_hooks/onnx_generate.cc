#include "compiler_hooks/onnx_generate.h"

#include "compiler_hooks/onnx_model.h"

#include <algorithm>
#include <cctype>
#include <unordered_map>
#include <vector>

namespace tierpool::hooks {

namespace {

using prefetch::Schedule;

std::string Lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

bool Contains(const std::string& name, const char* part) {
  return Lower(name).find(part) != std::string::npos;
}

// The dimension names the calls set, found in the graph's inputs.
struct CacheLayout {
  std::vector<std::string> past;        // graph inputs, in order
  std::vector<std::string> present;     // graph outputs, in order
  std::string past_dim;                 // the cache's sequence dimension
  std::string tokens_dim;               // the token input's sequence dimension
  std::vector<std::string> total_dims;  // past + tokens
};

Result<CacheLayout> FindCache(const onnx::ModelProto& model, const std::string& path,
                              const OnnxGenerateOptions& o) {
  const auto& g = model.graph();
  std::unordered_map<std::string, bool> initializer;
  for (const auto& init : g.initializer()) initializer[init.name()] = true;
  CacheLayout c;
  const onnx::ValueInfoProto* tokens = nullptr;
  std::vector<const onnx::ValueInfoProto*> others;
  for (const auto& in : g.input()) {
    if (initializer.count(in.name())) continue;
    if (Contains(in.name(), "past")) {
      c.past.push_back(in.name());
      continue;
    }
    auto type = in.type().tensor_type().elem_type();
    bool integer = type == onnx::TensorProto::INT64 || type == onnx::TensorProto::INT32;
    if (tokens == nullptr && integer && in.type().tensor_type().shape().dim_size() >= 2) {
      tokens = &in;
    } else {
      others.push_back(&in);
    }
  }
  for (const auto& out : g.output()) {
    if (Contains(out.name(), "present")) c.present.push_back(out.name());
  }
  if (c.past.empty() || c.past.size() != c.present.size()) {
    return Status::InvalidArgument(
        path + " has " + std::to_string(c.past.size()) + " cache inputs (named past*) and " +
        std::to_string(c.present.size()) +
        " cache outputs (named present*); a decoder export for --generate has one of each per "
        "cached tensor");
  }
  auto symbolic = [](const onnx::ValueInfoProto& v, int from) {
    std::vector<std::string> names;
    const auto& dims = v.type().tensor_type().shape().dim();
    for (int i = from; i < dims.size(); ++i) {
      if (dims[i].has_dim_param()) names.push_back(dims[i].dim_param());
    }
    return names;
  };
  for (const auto& in : g.input()) {
    if (in.name() != c.past[0]) continue;
    auto names = symbolic(in, 1);
    if (names.empty()) {
      return Status::InvalidArgument("cache input '" + in.name() +
                                     "' has no symbolic sequence dimension");
    }
    c.past_dim = names[0];
  }
  if (tokens == nullptr) {
    return Status::InvalidArgument(path + " has no integer token input (B x T) besides its cache");
  }
  auto tn = symbolic(*tokens, 1);
  if (tn.empty()) {
    return Status::InvalidArgument("token input '" + tokens->name() +
                                   "' has no symbolic sequence dimension");
  }
  c.tokens_dim = tn[0];
  for (const auto* v : others) {
    for (const auto& name : symbolic(*v, 1)) {
      if (name != c.past_dim && name != c.tokens_dim && !o.import.dims.count(name) &&
          std::find(c.total_dims.begin(), c.total_dims.end(), name) == c.total_dims.end()) {
        c.total_dims.push_back(name);
      }
    }
  }
  return c;
}

// Appends one call's schedule to `out`. Weights are shared by name; the call's past inputs are
// `past_ids` (the previous call's present tensors) unless this is the first call.
Status Splice(const Schedule& call, const std::string& label, const CacheLayout& cache, bool first,
              bool decode_only, std::unordered_map<std::string, std::uint32_t>* weights,
              std::vector<std::uint32_t>* past_ids, Schedule* out) {
  const auto base = static_cast<std::uint32_t>(out->steps_size());
  std::vector<std::uint32_t> global(static_cast<std::size_t>(call.tensors_size()));
  std::vector<std::uint32_t> present_ids(cache.present.size()), this_past(cache.past.size());
  for (int i = 0; i < call.tensors_size(); ++i) {
    const auto& t = call.tensors(i);
    auto past = std::find(cache.past.begin(), cache.past.end(), t.name());
    auto present = std::find(cache.present.begin(), cache.present.end(), t.name());
    std::uint32_t id;
    if (t.kind() == schedule::WEIGHT && weights->count(t.name())) {
      id = weights->at(t.name());
    } else if (past != cache.past.end() && !first) {
      id = (*past_ids)[static_cast<std::size_t>(past - cache.past.begin())];
      if (out->tensors(static_cast<int>(id)).size_bytes() != t.size_bytes()) {
        return Status::InvalidArgument(
            label + ": cache input '" + t.name() + "' takes " + std::to_string(t.size_bytes()) +
            " bytes, but the previous call's matching output made " +
            std::to_string(out->tensors(static_cast<int>(id)).size_bytes()) +
            " (are past* inputs and present* outputs in the same order?)");
      }
    } else {
      id = static_cast<std::uint32_t>(out->tensors_size());
      auto* n = out->add_tensors();
      *n = t;
      n->set_id(id);
      n->clear_use_steps();
      n->clear_update_steps();
      if (t.def_step() >= 0) n->set_def_step(static_cast<std::int32_t>(base) + t.def_step());
      if (t.kind() == schedule::WEIGHT) {
        (*weights)[t.name()] = id;
      } else {
        n->set_name(label + "/" + t.name());
      }
      if (present != cache.present.end()) n->set_kind(schedule::KV_CACHE);
      if (past != cache.past.end() && decode_only) {  // arrives in step 0 (see below)
        n->set_kind(schedule::KV_CACHE);
        n->set_def_step(0);
        n->set_name("prompt/" + t.name());
      } else if (past != cache.past.end()) {
        n->set_kind(schedule::INPUT);
      }
    }
    global[static_cast<std::size_t>(i)] = id;
    if (past != cache.past.end())
      this_past[static_cast<std::size_t>(past - cache.past.begin())] = id;
    if (present != cache.present.end()) {
      present_ids[static_cast<std::size_t>(present - cache.present.begin())] = id;
    }
    auto* g = out->mutable_tensors(static_cast<int>(id));
    for (auto u : t.use_steps()) g->add_use_steps(base + u);
    for (auto u : t.update_steps()) g->add_update_steps(base + u);
  }
  for (const auto& st : call.steps()) {
    auto* n = out->add_steps();
    *n = st;
    n->set_name(label + "/" + st.name());
  }
  // A serving engine appends each new token to its (paged) cache in place: the Concat that
  // makes a present from its past is timed as that append, not as a copy of the whole cache.
  for (std::size_t i = 0; i < present_ids.size(); ++i) {
    const auto& present = out->tensors(static_cast<int>(present_ids[i]));
    const auto& past = out->tensors(static_cast<int>(this_past[i]));
    if (present.def_step() < 0) continue;
    auto* step = out->mutable_steps(present.def_step());
    const auto& uses = past.use_steps();
    if (step->op_type() == "Concat" &&
        std::find(uses.begin(), uses.end(), static_cast<std::uint32_t>(present.def_step())) !=
            uses.end() &&
        present.size_bytes() >= past.size_bytes()) {
      step->set_bytes_touched(2 * (present.size_bytes() - past.size_bytes()));
    }
  }
  *past_ids = std::move(present_ids);
  return Status::Ok();
}

}  // namespace

Result<Schedule> GenerateFromOnnx(const std::string& path, const OnnxGenerateOptions& o) {
  if (o.prompt < 1 || o.new_tokens < 0 || o.prefill_chunk < 0) {
    return Status::InvalidArgument("--generate needs PROMPT >= 1 and NEW_TOKENS >= 0");
  }
  // Read once; each call imports its own copy (import fixes dimensions in the model).
  auto model = LoadOnnxModel(path, o.import.max_file_bytes);
  if (!model.ok()) return model.status();
  auto cache = FindCache(*model, path, o);
  if (!cache.ok()) return cache.status();
  struct Call {
    std::string label;
    std::int64_t past, tokens;
  };
  std::vector<Call> calls;
  const std::int64_t chunk = o.prefill_chunk > 0 ? o.prefill_chunk : o.prompt;
  if (!o.decode_only) {
    for (std::int64_t start = 0; start < o.prompt; start += chunk) {
      if (static_cast<std::int64_t>(calls.size()) >= o.max_calls) break;
      std::int64_t n = std::min(chunk, o.prompt - start);
      calls.push_back(
          {n == o.prompt ? "prefill" : "prefill" + std::to_string(start / chunk), start, n});
    }
  }
  for (std::int64_t i = 0; i < o.new_tokens; ++i) {
    if (static_cast<std::int64_t>(calls.size()) >= o.max_calls) break;
    calls.push_back({"decode" + std::to_string(i), o.prompt + i, 1});
  }
  if (calls.empty())
    return Status::InvalidArgument("nothing to import: --decode-only with 0 new tokens");
  if (static_cast<std::int64_t>(calls.size()) >= o.max_calls) {
    return Status::InvalidArgument("--generate unrolls into more than " +
                                   std::to_string(o.max_calls) +
                                   " calls; use --prefill-chunk or fewer tokens");
  }
  Schedule out;
  std::unordered_map<std::string, std::uint32_t> weights;
  std::vector<std::uint32_t> past_ids;
  for (std::size_t i = 0; i < calls.size(); ++i) {
    const auto& c = calls[i];
    OnnxImportOptions io = o.import;
    io.dims[cache->past_dim] = c.past;
    io.dims[cache->tokens_dim] = c.tokens;
    for (const auto& d : cache->total_dims) io.dims[d] = c.past + c.tokens;
    auto s = ImportOnnxModel(*model, path, io);
    if (!s.ok()) {
      return Status(s.status().code(), c.label + " (" + cache->past_dim + "=" +
                                           std::to_string(c.past) + ", " + cache->tokens_dim + "=" +
                                           std::to_string(c.tokens) + "): " + s.status().message());
    }
    if (i == 0) {
      out.set_format_version(1);
      out.set_name(s->name() + "-generate-" + std::to_string(o.prompt) + "-" +
                   std::to_string(o.new_tokens));
      out.set_source(s->source());
      out.set_repeats(s->repeats());
      if (o.decode_only) {
        // The prompt's cache arrives (from a prefill node, in disaggregated serving) in a
        // first step, and lives as long as it is used, like every other cache tensor.
        auto* arrive = out.add_steps();
        arrive->set_name("prompt/cache_arrives");
        arrive->set_op_type("sync");
      }
    }
    TIERPOOL_RETURN_IF_ERROR(
        Splice(*s, c.label, *cache, i == 0, o.decode_only, &weights, &past_ids, &out));
  }
  TIERPOOL_RETURN_IF_ERROR(prefetch::Validate(out));
  return out;
}

}  // namespace tierpool::hooks
