// LocalSgd: the allreduce world's answer to asynchronous training. Each rank takes optimizer
// steps on its own gradients and the ranks average their parameters every `period` (H) steps,
// so communication falls by H times; replicas drift apart between averages.
//
// Note [Local SGD schedule]
// - Warm-up (post-local SGD, Lin et al. 2020): for the first `warmup_steps` steps the ranks train
//   synchronously. With a DistributedDataParallel attached its gradient allreduce stays on (the
//   usual DDP step); without one, parameters are averaged after every step, which for SGD (with
//   momentum and weight decay: every term is linear in the gradient) is the synchronous update up
//   to rounding.
// - Then the ranks step locally: LocalSgd turns the DDP's gradient sync off (set_sync(false)) and
//   after every H-th local step averages parameters and floating-point buffers (batch-norm
//   statistics) by one allreduce of one flat float32 buffer (4 bytes x elements, the same bytes
//   as one gradient allreduce). Every rank receives the same reduced bytes, so right after an
//   average the replicas are bit-identical.
// - Global (outer) momentum, SlowMo (Wang et al. 2020): with outer_momentum b > 0 or outer_lr
//   a != 1, an average is treated as a pseudo-gradient d = x_last - x_avg of the parameters x_last
//   at the previous average; u <- b u + d, x <- x_last - a u. a = 1, b = 0 is plain averaging.
//   Every rank computes this from identical x_last, u and x_avg, so replicas stay identical.
//   Buffers always take the plain average.
// Optimizer state (momentum buffers, Adam moments) stays local, as in PyTorch's PostLocalSGD.
//
// What is given up (docs/local-sgd.md): between averages the replicas differ, so the model a
// rank holds is not the model the others hold; the result depends on H and the world size, not
// only on the global batch; a checkpoint should be written right after an average.
//
// Thread-safety: none; call from the training thread. Create and AfterStep are collectives.
#ifndef PADDLE_PARALLEL_LOCAL_SGD_H_
#define PADDLE_PARALLEL_LOCAL_SGD_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "paddle/collective/communicator.h"
#include "paddle/core/tensor.h"
#include "paddle/nn/module.h"
#include "paddle/parallel/distributed_data_parallel.h"

namespace paddle {

struct LocalSgdOptions {
  int64_t period = 4;           // H: local steps between averages (>= 1)
  int64_t warmup_steps = 0;     // synchronous steps before local ones start (>= 0)
  double outer_lr = 1.0;        // a (> 0)
  double outer_momentum = 0.0;  // b, in [0, 1)
  bool average_buffers = true;  // floating-point buffers (batch-norm statistics) too
};

class LocalSgd {
 public:
  // Collective: every rank of `comm` calls it with the same options; broadcasts rank 0's
  // parameters and buffers so the replicas start identical. `ddp`, if given, wraps `module` and
  // has its sync switched by the schedule. Parameters must be float32 on the CPU (kUnimplemented
  // naming the first that is not); bad options are kInvalidArgument naming the field.
  static absl::StatusOr<std::unique_ptr<LocalSgd>> Create(std::shared_ptr<nn::Module> module,
                                                          Communicator* comm,
                                                          const LocalSgdOptions& options,
                                                          DistributedDataParallel* ddp = nullptr);
  LocalSgd(const LocalSgd&) = delete;
  LocalSgd& operator=(const LocalSgd&) = delete;

  // Call after every optimizer step, on every rank. Averages when the schedule says so (Note
  // [Local SGD schedule]) and returns whether it did.
  absl::StatusOr<bool> AfterStep();

  // Collective: averages now unless the last step did (or no step was taken), so that every
  // rank holds the same model, e.g. before evaluating or saving at the end of training.
  absl::Status Synchronize();

  int64_t steps() const { return steps_; }
  int64_t averages() const { return averages_; }
  // Bytes this rank passed to allreduce for averaging so far.
  int64_t averaged_bytes() const { return averaged_bytes_; }
  bool in_warmup() const { return steps_ < options_.warmup_steps; }

 private:
  LocalSgd(std::shared_ptr<nn::Module> module, Communicator* comm, const LocalSgdOptions& options,
           DistributedDataParallel* ddp, std::vector<Tensor> tensors, int64_t elements,
           int64_t param_elements);
  absl::Status Average();

  std::shared_ptr<nn::Module> module_;
  Communicator* comm_;
  LocalSgdOptions options_;
  DistributedDataParallel* ddp_;
  std::vector<Tensor> tensors_;  // parameters, then averaged buffers (views of the live values)
  int64_t param_elements_;       // the parameters' share of flat_ (its front)
  std::vector<float> flat_;      // the allreduce buffer
  std::vector<float> last_;      // outer momentum only: values after the previous average
  std::vector<float> momentum_;  // outer momentum only: u
  int64_t steps_ = 0;
  int64_t averages_ = 0;
  int64_t averaged_bytes_ = 0;
  bool in_sync_ = true;  // no local step since the last average (or the start)
};

}  // namespace paddle

#endif  // PADDLE_PARALLEL_LOCAL_SGD_H_
