// The backward pass: runs the graph recorded in the forward pass from a root Variable.
//
// Every node runs exactly once, after all gradients flowing into it have been summed. Among the
// nodes that are ready, the one created last runs first (the highest sequence number), so
// gradients become ready in reverse order of the forward pass: the order the data-parallel
// reducer's buckets are laid out in (Note [Gradient ready hooks] in variable.h). Runs on the
// calling thread; a failing node stops the pass with an error naming the node. Unless
// `retain_graph`, every node the pass reaches drops its saved state once it has run (Note [Freed
// graphs] in node.h), and a later pass through it fails naming the node.
#ifndef PADDLE_CORE_AUTOGRAD_ENGINE_H_
#define PADDLE_CORE_AUTOGRAD_ENGINE_H_

#include "absl/status/status.h"
#include "paddle/core/autograd/variable.h"

namespace paddle::autograd {

// `grad` is the gradient of the root; undefined means 1 for a one-element root.
absl::Status RunBackward(const Variable& root, const Tensor& grad = Tensor(),
                         bool retain_graph = false);

}  // namespace paddle::autograd

#endif  // PADDLE_CORE_AUTOGRAD_ENGINE_H_
