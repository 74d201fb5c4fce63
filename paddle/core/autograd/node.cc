// Node bookkeeping: names, creation order, and the single-output FunctionNode.
#include "paddle/core/autograd/node.h"

#include <atomic>

#include "absl/strings/str_cat.h"

namespace paddle::autograd {
namespace {
std::atomic<uint64_t> next_sequence_nr{0};
}  // namespace

Node::Node(std::string name, int num_inputs)
    : name_(std::move(name)),
      num_inputs_(num_inputs),
      sequence_nr_(next_sequence_nr.fetch_add(1, std::memory_order_relaxed)) {}

absl::StatusOr<std::vector<Tensor>> FunctionNode::Apply(std::vector<Tensor> grads) {
  // A node only runs when at least one gradient reached it; a single-output node therefore
  // always has a defined gradient here.
  if (!backward_) {  // Note [Freed graphs]
    return absl::FailedPreconditionError(absl::StrCat(
        "trying to run backward through the graph a second time: what ", name(),
        " saved for backward was freed when the first backward pass ran through it; pass "
        "retain_graph=True to the first backward to run backward through the same graph again"));
  }
  for (const SavedTensor& s : saved_) {  // Note [Saved tensor versions]
    const uint64_t now = s.tensor.version();
    if (now == s.version) continue;
    return absl::FailedPreconditionError(absl::StrCat(
        "one of the tensors ", name(), " saved for backward, its ", s.what,
        s.index >= 0 ? absl::StrCat(" ", s.index) : std::string(), " (", s.tensor.ToString(),
        "), was modified by an in-place operation: it is at version ", now, ", ", name(),
        " saved it at version ", s.version,
        ". Run backward before changing it (an optimizer step between forward and backward "
        "changes every parameter), or change a clone() of it"));
  }
  return backward_(grads[0]);
}

}  // namespace paddle::autograd
