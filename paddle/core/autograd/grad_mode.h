// Whether operations record the autograd graph on this thread. Evaluation, optimizer updates and
// parameter initialisation run inside a NoGradGuard so they neither build graph nodes nor keep
// activations alive for a backward pass that will never come.
#ifndef PADDLE_CORE_AUTOGRAD_GRAD_MODE_H_
#define PADDLE_CORE_AUTOGRAD_GRAD_MODE_H_

namespace paddle::autograd {

class GradMode {
 public:
  static bool IsEnabled();
  static void SetEnabled(bool enabled);
};

// Disables recording for its scope on this thread, then restores the previous mode.
class NoGradGuard {
 public:
  NoGradGuard() : previous_(GradMode::IsEnabled()) { GradMode::SetEnabled(false); }
  ~NoGradGuard() { GradMode::SetEnabled(previous_); }
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool previous_;
};

}  // namespace paddle::autograd

#endif  // PADDLE_CORE_AUTOGRAD_GRAD_MODE_H_
