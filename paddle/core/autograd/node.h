// A node of the autograd graph: the backward of one recorded operation.
//
// The forward pass records, for every operation with an input that requires a gradient, a Node
// whose `next_edges` say where the gradient of each input goes: the Node that produced that input,
// or the AccumulateGrad node of a leaf (a parameter). The engine (engine.h) runs the nodes in
// reverse order of creation once all gradients for a node have arrived.
//
// Note [Freed graphs]: a backward pass frees the graph it ran through unless asked to retain it
// (PyTorch's retain_graph): each node, once applied, drops what it saved for backward (the
// closure of a FunctionNode and the tensors it captured), so the memory of the forward pass is
// returned as soon as the backward pass is past it. Running backward through such a node again
// is a kFailedPrecondition naming the node, instead of a silent second accumulation.
// AccumulateGrad nodes save nothing and stay usable; leaves keep their gradients.
#ifndef PADDLE_CORE_AUTOGRAD_NODE_H_
#define PADDLE_CORE_AUTOGRAD_NODE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "paddle/core/tensor.h"

namespace paddle::autograd {

class Node;

// Where a gradient goes: input `input_nr` of `node`. An edge without a node drops the gradient
// (the input did not require one).
struct Edge {
  std::shared_ptr<Node> node;
  int input_nr = 0;
  bool valid() const { return node != nullptr; }
};

class Node {
 public:
  Node(std::string name, int num_inputs);
  virtual ~Node() = default;
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;

  // `grads` holds one gradient per input of this node (an output of the forward operation);
  // undefined tensors stand for zero. Returns one gradient per next edge (undefined = none).
  virtual absl::StatusOr<std::vector<Tensor>> Apply(std::vector<Tensor> grads) = 0;
  // See Note [Freed graphs]: drops what the node saved for backward; Apply then fails.
  virtual void ReleaseSavedState() {}

  const std::string& name() const { return name_; }
  int num_inputs() const { return num_inputs_; }
  // Creation order on this process; the engine runs later nodes first.
  uint64_t sequence_nr() const { return sequence_nr_; }
  const std::vector<Edge>& next_edges() const { return next_edges_; }
  void set_next_edges(std::vector<Edge> edges) { next_edges_ = std::move(edges); }

 private:
  std::string name_;
  int num_inputs_;
  uint64_t sequence_nr_;
  std::vector<Edge> next_edges_;
};

// The backward of a single-output operation as a function of the output's gradient. Saved
// tensors live in the closure and are freed with the graph.
class FunctionNode final : public Node {
 public:
  using BackwardFn = std::function<absl::StatusOr<std::vector<Tensor>>(const Tensor& grad)>;

  FunctionNode(std::string name, BackwardFn backward)
      : Node(std::move(name), 1), backward_(std::move(backward)) {}

  absl::StatusOr<std::vector<Tensor>> Apply(std::vector<Tensor> grads) override;
  void ReleaseSavedState() override { backward_ = nullptr; }

 private:
  BackwardFn backward_;  // null once released
};

}  // namespace paddle::autograd

#endif  // PADDLE_CORE_AUTOGRAD_NODE_H_
