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
  return backward_(grads[0]);
}

}  // namespace paddle::autograd
