// Grad mode is per thread, as in PyTorch: a data-loader or communication thread never changes
// whether the training thread records.
#include "paddle/core/autograd/grad_mode.h"

namespace paddle::autograd {
namespace {
thread_local bool grad_enabled = true;
}  // namespace

bool GradMode::IsEnabled() { return grad_enabled; }
void GradMode::SetEnabled(bool enabled) { grad_enabled = enabled; }

}  // namespace paddle::autograd
