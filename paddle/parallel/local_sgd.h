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
//   as one gradient allreduce), sparse tables by their touched rows (Note [Local SGD of sparse
//   tables]). Every rank receives the same reduced bytes, so right after an average the replicas
//   are bit-identical.
// - Global (outer) momentum, SlowMo (Wang et al. 2020): with outer_momentum b > 0 or outer_lr
//   a != 1, an average is treated as a pseudo-gradient d = x_last - x_avg of the parameters x_last
//   at the previous average; u <- b u + d, x <- x_last - a u. a = 1, b = 0 is plain averaging.
//   Every rank computes this from identical x_last, u and x_avg, so replicas stay identical.
//   Buffers always take the plain average.
// Optimizer state (momentum buffers, Adam moments) stays local, as in PyTorch's PostLocalSGD.
//
// Note [Local SGD of sparse tables]: an embedding table marked sparse (Variable::set_sparse, Note
// [Sparse gradients] in paddle/core/autograd/sparse_rows.h) changes between averages only in the
// rows its sparse gradients named, so only those rows need averaging.
// - Precondition: right after an average the replicas are identical (above), and until the next
//   one a rank writes to the table only through optimizer steps on sparse gradients, which update
//   the named rows alone (Note [Lazy sparse updates] in paddle/optim/optimizer.h: SGD, Adam and
//   Adagrad apply momentum and weight decay to touched rows only). Then a row no rank touched is
//   still identical everywhere and its average is itself. Weight decay over the whole table, a
//   max-norm pass or loading values would break this; LocalSgd sees such writes by the table's
//   version counter (Note [Version counters] in paddle/core/storage.h): AfterStep expects one
//   version step per optimizer step that had a sparse gradient, and any other change makes the
//   next average of that table dense (correct, only more bytes). Writes that bypass the counter
//   cannot be seen.
// - AfterStep records the ids of the table's sparse gradient, which the optimizer step leaves in
//   place (call AfterStep before the next ZeroGrad; a gradient already dropped means dense, as
//   above). Synchronous warm-up steps under DDP record nothing: the replicas stay identical.
// - Average, after the dense parameters' allreduce, on every rank in the same order:
//   1. one Allgather of every table's count of touched ids (int64 [tables] per rank);
//   2. per table with E > 0 ids over all ranks, the choice below; sparse: one Allgatherv of each
//      rank's sorted unique ids, the union U (sorted, the same on every rank), then one
//      Allreduce(avg) of the U rows, each rank contributing its current values; dense: one
//      Allreduce(avg) of the whole table. Every rank receives the same bytes either way, so the
//      replicas are bit-identical after it, as for dense parameters.
// - The choice, in the spirit of Note [Sparse or dense] (paddle/parallel/reducer/
//   sparse_exchange.h) but for this exchange: sparse sends 8 E bytes of ids and at most
//   2 min(E, num_rows) dim 4 bytes of rows (U is unknown until the ids are gathered), dense
//   2 num_rows dim 4 (the (W - 1) / W ring factors cancel). Sparse is taken only when its bound
//   is lower, so a table never costs more than its dense average plus the counts; ranks touching
//   the same rows can make it dense when the union alone would have been cheaper.
// - With outer momentum or an outer learning rate (b > 0 or a != 1) every table is averaged
//   densely with the other parameters: for b > 0 a row nobody touched still moves (u <- b u,
//   x <- x_last - a u), so the touched rows do not bound what changes; a != 1 alone would allow a
//   row-wise update but is not worth a second SlowMo path. `sparse_tables = false` forces the
//   dense path as well (the reference the tests compare against).
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
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "paddle/collective/communicator.h"
#include "paddle/core/autograd/variable.h"
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
  // Note [Local SGD of sparse tables]: average 2-D parameters marked sparse by the rows touched
  // since the last average; false: with the dense parameters.
  bool sparse_tables = true;
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
  // Bytes this rank sent for averaging so far, ring model: 2 (W - 1) / W x the allreduced bytes,
  // (W - 1) / W x the allgathered bytes (all ranks' together).
  int64_t averaged_bytes() const { return averaged_bytes_; }
  bool in_warmup() const { return steps_ < options_.warmup_steps; }

 private:
  // A table averaged by its touched rows (Note [Local SGD of sparse tables]).
  struct SparseTable {
    std::string name;
    autograd::Variable var;
    Tensor value;                  // var.data(): [num_rows, dim] float32
    std::vector<bool> marked;      // [num_rows]: in `touched`
    std::vector<int64_t> touched;  // ids touched since the last average, unique
    uint64_t version = 0;          // value.version() when last accounted for
    bool unknown_writes = false;   // changed other than by a sparse step: average densely
  };

  LocalSgd(std::shared_ptr<nn::Module> module, Communicator* comm, const LocalSgdOptions& options,
           DistributedDataParallel* ddp, std::vector<Tensor> tensors, int64_t elements,
           int64_t param_elements, std::vector<SparseTable> tables);
  void RecordTouchedRows(bool synchronous_step);
  absl::Status Average();
  absl::Status AverageDense(const std::string& what);
  absl::Status AverageTables(const std::string& what);

  std::shared_ptr<nn::Module> module_;
  Communicator* comm_;
  LocalSgdOptions options_;
  DistributedDataParallel* ddp_;
  std::vector<Tensor> tensors_;  // dense parameters, then averaged buffers (live values)
  int64_t param_elements_;       // the parameters' share of flat_ (its front)
  std::vector<SparseTable> tables_;
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
