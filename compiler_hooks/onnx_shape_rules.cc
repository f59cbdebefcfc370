#include "compiler_hooks/onnx_shape_rules.h"

#include <algorithm>
#include <cctype>
#include <map>

namespace tierpool::hooks {

namespace {

// One input's or the output's term: its letters, with the ellipsis (if any) at `ellipsis`.
struct Term {
  std::string letters;
  int ellipsis = -1;  // position in letters before which "..." stands
};

std::optional<Term> ParseTerm(const std::string& text) {
  Term t;
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text.compare(i, 3, "...") == 0) {
      if (t.ellipsis >= 0) return std::nullopt;
      t.ellipsis = static_cast<int>(t.letters.size());
      i += 2;
    } else if (std::isalpha(static_cast<unsigned char>(text[i]))) {
      t.letters += text[i];
    } else {
      return std::nullopt;
    }
  }
  return t;
}

// Broadcasts `d` into `into` (1 stretches); false if they disagree.
bool Merge(std::int64_t d, std::int64_t* into) {
  if (*into == d || d == 1) return true;
  if (*into == 1) {
    *into = d;
    return true;
  }
  return false;
}

}  // namespace

std::optional<std::vector<std::int64_t>> EinsumShape(
    const std::string& equation, const std::vector<std::vector<std::int64_t>>& shapes) {
  std::string eq;
  for (char c : equation) {
    if (c != ' ') eq += c;
  }
  const auto arrow = eq.find("->");
  const std::string lhs = eq.substr(0, arrow);
  std::vector<Term> inputs;
  for (std::size_t start = 0;;) {
    const auto comma = lhs.find(',', start);
    auto t = ParseTerm(lhs.substr(start, comma == std::string::npos ? comma : comma - start));
    if (!t) return std::nullopt;
    inputs.push_back(*t);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  if (inputs.size() != shapes.size()) return std::nullopt;
  std::map<char, std::int64_t> dim;
  std::map<char, int> count;
  std::vector<std::int64_t> ellipsis;  // broadcast over the inputs, right-aligned
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const Term& t = inputs[i];
    const auto& shape = shapes[i];
    const auto letters = static_cast<std::int64_t>(t.letters.size());
    const auto rank = static_cast<std::int64_t>(shape.size());
    const std::int64_t span = t.ellipsis >= 0 ? rank - letters : 0;
    if (span < 0 || (t.ellipsis < 0 && rank != letters)) return std::nullopt;
    for (std::int64_t k = 0, axis = 0; k < letters; ++k, ++axis) {
      if (k == t.ellipsis) axis += span;
      const char c = t.letters[static_cast<std::size_t>(k)];
      ++count[c];
      const std::int64_t d = shape[static_cast<std::size_t>(axis)];
      auto it = dim.find(c);
      if (it == dim.end()) {
        dim[c] = d;
      } else if (!Merge(d, &it->second)) {
        return std::nullopt;
      }
    }
    if (t.ellipsis >= 0) {
      std::vector<std::int64_t> e(shape.begin() + t.ellipsis, shape.begin() + t.ellipsis + span);
      if (e.size() > ellipsis.size())
        ellipsis.insert(ellipsis.begin(), e.size() - ellipsis.size(), 1);
      for (std::size_t k = 0; k < e.size(); ++k) {
        if (!Merge(e[k], &ellipsis[ellipsis.size() - e.size() + k])) return std::nullopt;
      }
    }
  }
  Term out;
  if (arrow != std::string::npos) {
    auto t = ParseTerm(eq.substr(arrow + 2));
    if (!t) return std::nullopt;
    out = *t;
  } else {  // implicit: the ellipsis, then the letters seen once, in alphabetical order
    out.ellipsis = 0;
    for (const auto& [c, n] : count) {
      if (n == 1) out.letters += c;
    }
  }
  std::vector<std::int64_t> shape;
  for (std::size_t k = 0; k <= out.letters.size(); ++k) {
    if (static_cast<int>(k) == out.ellipsis)
      shape.insert(shape.end(), ellipsis.begin(), ellipsis.end());
    if (k == out.letters.size()) break;
    auto it = dim.find(out.letters[k]);
    if (it == dim.end()) return std::nullopt;
    shape.push_back(it->second);
  }
  return shape;
}

int ApplyShapeRules(onnx::GraphProto* g,
                    const std::unordered_map<std::string, std::vector<std::int64_t>>& known,
                    std::map<std::string, std::string>* sized) {
  int added = 0;
  for (const auto& n : g->node()) {
    if (n.op_type() != "Einsum" || n.output_size() != 1 || known.count(n.output(0))) continue;
    std::vector<std::vector<std::int64_t>> shapes;
    for (const auto& in : n.input()) {
      auto it = known.find(in);
      if (it == known.end()) break;
      shapes.push_back(it->second);
    }
    if (shapes.size() != static_cast<std::size_t>(n.input_size())) continue;
    std::string equation;
    for (const auto& a : n.attribute()) {
      if (a.name() == "equation") equation = a.s();
    }
    auto shape = EinsumShape(equation, shapes);
    if (!shape) continue;
    // The output's element type is its first input's (Einsum's inputs and output share one).
    int elem = 0;
    for (const auto& vi : g->value_info()) {
      if (vi.name() == n.input(0)) elem = vi.type().tensor_type().elem_type();
    }
    for (const auto& vi : g->input()) {
      if (vi.name() == n.input(0)) elem = vi.type().tensor_type().elem_type();
    }
    for (const auto& init : g->initializer()) {
      if (init.name() == n.input(0)) elem = init.data_type();
    }
    onnx::ValueInfoProto* vi = nullptr;
    for (auto& v : *g->mutable_value_info()) {
      if (v.name() == n.output(0)) vi = &v;
    }
    if (vi == nullptr) {
      vi = g->add_value_info();
      vi->set_name(n.output(0));
    }
    auto* tt = vi->mutable_type()->mutable_tensor_type();
    if (elem != 0) tt->set_elem_type(elem);
    tt->clear_shape();
    for (auto d : *shape) tt->mutable_shape()->add_dim()->set_dim_value(d);
    (*sized)[n.output(0)] = n.op_type();
    ++added;
  }
  return added;
}

}  // namespace tierpool::hooks
