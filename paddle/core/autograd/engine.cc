// Dependency counting, then a ready queue ordered by sequence number.
#include "paddle/core/autograd/engine.h"

#include <queue>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "paddle/core/status.h"

namespace paddle::autograd {
namespace {

absl::StatusOr<Tensor> OnesLike(const Tensor& t) {
  if (!t.device().is_cpu()) {  // Note [Gradient arithmetic on devices]
    if (t.dtype() != DType::kFloat32) {
      return absl::InvalidArgumentError(
          absl::StrCat("backward from a ", t.ToString(), " root; need a float32 root"));
    }
    ASSIGN_OR_RETURN(Tensor ones, CloneGradient(t));
    RETURN_IF_ERROR(FillGradient(&ones, 1.0f));
    return ones;
  }
  ASSIGN_OR_RETURN(Tensor ones, Tensor::Empty(t.shape(), t.dtype()));
  switch (t.dtype()) {
    case DType::kFloat32:
      for (int64_t i = 0; i < ones.numel(); ++i) ones.data<float>()[i] = 1.0f;
      return ones;
    case DType::kFloat64:
      for (int64_t i = 0; i < ones.numel(); ++i) ones.data<double>()[i] = 1.0;
      return ones;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("backward from a ", DTypeName(t.dtype()), " root; need a float root"));
  }
}

struct ByLatest {
  bool operator()(Node* a, Node* b) const { return a->sequence_nr() < b->sequence_nr(); }
};

}  // namespace

absl::Status RunBackward(const Variable& root, const Tensor& grad, bool retain_graph) {
  if (!root.defined() || !root.requires_grad()) {
    return absl::FailedPreconditionError(
        "backward from a Variable that does not require a gradient (no parameter that "
        "requires one was used to compute it, or it was computed under NoGradGuard)");
  }
  Tensor root_grad = grad;
  if (!root_grad.defined()) {
    if (root.data().numel() != 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("backward without a gradient needs a one-element root (a loss), got ",
                       root.data().ToString()));
    }
    ASSIGN_OR_RETURN(root_grad, OnesLike(root.data()));
  }
  Edge root_edge = root.GradientEdge();

  // How many gradients each node waits for.
  std::unordered_map<Node*, int> dependencies;
  std::vector<Node*> stack{root_edge.node.get()};
  dependencies[root_edge.node.get()] = 0;
  while (!stack.empty()) {
    Node* node = stack.back();
    stack.pop_back();
    for (const Edge& edge : node->next_edges()) {
      if (!edge.valid()) continue;
      auto [it, inserted] = dependencies.try_emplace(edge.node.get(), 0);
      ++it->second;
      if (inserted) stack.push_back(edge.node.get());
    }
  }

  std::unordered_map<Node*, std::vector<Tensor>> buffers;
  buffers[root_edge.node.get()].resize(root_edge.node->num_inputs());
  buffers[root_edge.node.get()][root_edge.input_nr] = root_grad;
  std::priority_queue<Node*, std::vector<Node*>, ByLatest> ready;
  ready.push(root_edge.node.get());

  while (!ready.empty()) {
    Node* node = ready.top();
    ready.pop();
    std::vector<Tensor> inputs = std::move(buffers[node]);
    buffers.erase(node);
    bool any = false;
    for (const Tensor& t : inputs) any = any || t.defined();
    std::vector<Tensor> outputs;
    if (any) {
      absl::StatusOr<std::vector<Tensor>> result = node->Apply(std::move(inputs));
      if (!result.ok()) {
        return absl::Status(result.status().code(),
                            absl::StrCat("backward of ", node->name(), " (node #",
                                         node->sequence_nr(), "): ", result.status().message()));
      }
      outputs = std::move(*result);
    }
    if (!retain_graph) node->ReleaseSavedState();  // Note [Freed graphs]
    const std::vector<Edge>& edges = node->next_edges();
    if (any && outputs.size() != edges.size() && !edges.empty()) {
      return absl::InternalError(absl::StrCat("backward of ", node->name(), " returned ",
                                              outputs.size(), " gradients for ", edges.size(),
                                              " inputs"));
    }
    for (size_t i = 0; i < edges.size(); ++i) {
      const Edge& edge = edges[i];
      if (!edge.valid()) continue;
      Node* next = edge.node.get();
      if (any && outputs[i].defined()) {
        std::vector<Tensor>& buffer = buffers[next];
        if (buffer.empty()) buffer.resize(next->num_inputs());
        Tensor& slot = buffer[edge.input_nr];
        if (!slot.defined()) {
          slot = std::move(outputs[i]);
        } else {
          // A new tensor: the first gradient may be shared with another consumer.
          ASSIGN_OR_RETURN(slot, AddTensors(slot, outputs[i]));
        }
      }
      if (--dependencies[next] == 0) {
        if (buffers.find(next) == buffers.end()) buffers[next].resize(next->num_inputs());
        ready.push(next);
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace paddle::autograd
