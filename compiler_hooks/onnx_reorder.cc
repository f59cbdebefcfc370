#include "compiler_hooks/onnx_reorder.h"

#include <onnx/onnx_pb.h>

#include <algorithm>
#include <queue>
#include <string>
#include <unordered_map>
#include <utility>

#include "compiler_hooks/onnx_model.h"

namespace tierpool::hooks {

Result<onnx::ModelProto> ReorderOnnxNodes(const onnx::ModelProto& model,
                                          const prefetch::Schedule& imported,
                                          const std::vector<std::uint32_t>& order) {
  const auto& graph = model.graph();
  const int nodes = graph.node_size();
  auto name = [&](int i) {
    const auto& n = graph.node(i);
    return n.name().empty() ? n.op_type() + " node " + std::to_string(i) : n.name();
  };
  const auto steps = static_cast<std::uint32_t>(imported.steps_size());
  if (order.size() != steps) {
    return Status::InvalidArgument("the order has " + std::to_string(order.size()) +
                                   " steps; the schedule " + std::to_string(steps));
  }
  std::unordered_map<std::string, int> producer;  // value name -> node making it
  for (int i = 0; i < nodes; ++i) {
    for (const auto& o : graph.node(i).output()) {
      if (!o.empty() && !producer.emplace(o, i).second) {
        return Status::InvalidArgument("value '" + o + "' is made by two nodes");
      }
    }
  }
  // Each step's node, from the tensors it makes.
  std::vector<int> node_of(steps, -1);
  for (const auto& t : imported.tensors()) {
    if (t.def_step() < 0) continue;
    auto it = producer.find(t.name());
    if (it == producer.end()) {
      return Status::InvalidArgument("tensor '" + t.name() +
                                     "' of the schedule is made by no node " +
                                     "of the model (a schedule imported from another model?)");
    }
    const auto step = static_cast<std::uint32_t>(t.def_step());
    if (node_of[step] >= 0 && node_of[step] != it->second) {
      return Status::InvalidArgument("step '" + imported.steps(static_cast<int>(step)).name() +
                                     "' makes the outputs of two nodes");
    }
    node_of[step] = it->second;
  }
  // Priority per node: a step's new position; nodes that are no step go first once ready.
  constexpr std::int64_t kNoStep = -1;
  std::vector<std::int64_t> priority(static_cast<std::size_t>(nodes), kNoStep);
  std::vector<std::uint32_t> position(steps);
  for (std::uint32_t p = 0; p < steps; ++p) {
    if (order[p] >= steps) return Status::InvalidArgument("the order names a step out of range");
    position[order[p]] = p;
  }
  for (std::uint32_t step = 0; step < steps; ++step) {
    const int node = node_of[step];
    if (node < 0) {
      return Status::InvalidArgument("step '" + imported.steps(static_cast<int>(step)).name() +
                                     "' makes no tensor, so no node of the model is known as it");
    }
    if (priority[static_cast<std::size_t>(node)] != kNoStep) {
      return Status::InvalidArgument("node '" + name(node) + "' is two steps");
    }
    priority[static_cast<std::size_t>(node)] = position[step];
  }
  // Kahn's algorithm over the model's own edges, by priority.
  std::vector<std::vector<int>> next(static_cast<std::size_t>(nodes));
  std::vector<int> waiting(static_cast<std::size_t>(nodes), 0);
  for (int i = 0; i < nodes; ++i) {
    std::vector<int> from;
    for (const auto& in : graph.node(i).input()) {
      auto it = in.empty() ? producer.end() : producer.find(in);
      if (it != producer.end()) from.push_back(it->second);
    }
    std::sort(from.begin(), from.end());
    from.erase(std::unique(from.begin(), from.end()), from.end());
    for (int f : from) {
      if (f == i) return Status::InvalidArgument("node '" + name(i) + "' reads itself");
      next[static_cast<std::size_t>(f)].push_back(i);
    }
    waiting[static_cast<std::size_t>(i)] = static_cast<int>(from.size());
  }
  using Key = std::pair<std::int64_t, int>;
  std::priority_queue<Key, std::vector<Key>, std::greater<>> ready;
  for (int i = 0; i < nodes; ++i) {
    if (waiting[static_cast<std::size_t>(i)] == 0)
      ready.push({priority[static_cast<std::size_t>(i)], i});
  }
  std::vector<int> node_order;
  node_order.reserve(static_cast<std::size_t>(nodes));
  std::int64_t next_position = 0;
  while (!ready.empty()) {
    const int node = ready.top().second;
    ready.pop();
    const std::int64_t p = priority[static_cast<std::size_t>(node)];
    if (p != kNoStep) {
      if (p != next_position) {
        // The step due now waits on a node outside the schedule's edges.
        const int due = node_of[order[static_cast<std::size_t>(next_position)]];
        return Status::FailedPrecondition(
            "node '" + name(due) + "' cannot run at position " + std::to_string(next_position) +
            " of the new order: it depends, through a value import folded, on a node that "
            "runs later (node '" +
            name(node) + "' is next that can)");
      }
      ++next_position;
    }
    node_order.push_back(node);
    for (int j : next[static_cast<std::size_t>(node)]) {
      if (--waiting[static_cast<std::size_t>(j)] == 0)
        ready.push({priority[static_cast<std::size_t>(j)], j});
    }
  }
  if (static_cast<int>(node_order.size()) != nodes) {
    return Status::InvalidArgument("the model's nodes form a cycle");
  }
  onnx::ModelProto out = model;
  auto* out_nodes = out.mutable_graph()->mutable_node();
  for (int i = 0; i < nodes; ++i)
    *out_nodes->Mutable(i) = graph.node(node_order[static_cast<std::size_t>(i)]);
  return out;
}

Status WriteReorderedOnnx(const std::string& path, const OnnxImportOptions& options,
                          const prefetch::Schedule& imported,
                          const std::vector<std::uint32_t>& order, const std::string& out_path) {
  auto model = LoadOnnxModel(path, options.max_file_bytes);
  if (!model.ok()) return model.status();
  auto reordered = ReorderOnnxNodes(*model, imported, order);
  if (!reordered.ok()) return reordered.status();
  return SaveOnnxModel(*reordered, path, out_path);
}

}  // namespace tierpool::hooks
