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
//
// Note [Saved tensor versions]: a backward closure computes with the tensors its forward saved
// (an input for mul, the output for relu). An in-place write to one of them between forward and
// backward (a Python `x += 1` under no_grad, an optimizer step) would silently give a gradient of
// values the forward never saw. So each recording site declares what it saved (SavedTensor: which
// input or output, and its storage's version then, Note [Version counters] in storage.h) and
// FunctionNode::Apply compares the versions before running the closure: one integer compare per
// saved tensor. A mismatch is a kFailedPrecondition naming the node, the saved tensor, its shape
// and both versions. Operations that save nothing (add, reshape, scale) declare nothing, and an
// in-place edit of their inputs is fine, as in PyTorch.
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

// A tensor a FunctionNode's closure computes with, as declared to Note [Saved tensor versions].
struct SavedTensor {
  // Records `tensor`'s version now. `what` names it for the error ("input x", "output"; a string
  // literal: it is not copied); `index` >= 0 is appended ("input 1").
  SavedTensor(const char* what, Tensor tensor, int index = -1)
      : what(what), index(index), version(tensor.version()), tensor(std::move(tensor)) {}

  const char* what;
  int index;
  uint64_t version;
  Tensor tensor;  // keeps the storage (and so its counter) alive
};

// The backward of a single-output operation as a function of the output's gradient. Saved
// tensors live in the closure and are freed with the graph; `saved` declares them (Note [Saved
// tensor versions]).
class FunctionNode final : public Node {
 public:
  using BackwardFn = std::function<absl::StatusOr<std::vector<Tensor>>(const Tensor& grad)>;

  FunctionNode(std::string name, BackwardFn backward, std::vector<SavedTensor> saved = {})
      : Node(std::move(name), 1), backward_(std::move(backward)), saved_(std::move(saved)) {}

  absl::StatusOr<std::vector<Tensor>> Apply(std::vector<Tensor> grads) override;
  void ReleaseSavedState() override {
    backward_ = nullptr;
    saved_.clear();
  }
  const std::vector<SavedTensor>& saved() const { return saved_; }

 private:
  BackwardFn backward_;  // null once released
  std::vector<SavedTensor> saved_;
};

}  // namespace paddle::autograd

#endif  // PADDLE_CORE_AUTOGRAD_NODE_H_
