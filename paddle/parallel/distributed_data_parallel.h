// DistributedDataParallel: data-parallel training of one nn::Module replicated on every rank of a
// Communicator.
//
// Create() checks that every rank built the same model (Note [Model agreement]) and copies rank 0's
// parameters and buffers to every rank, so all replicas start identical. Each rank then runs the
// forward pass on its own slice of the batch; Backward() runs the backward pass while a Reducer
// (paddle/parallel/reducer/reducer.h) averages the gradients over ranks in buckets, so after it
// every replica holds the same gradient and the same optimizer step keeps them identical. With
// equal local batches and a loss that is a mean over the local batch, that average equals the
// gradient of the whole batch on one process.
//
// Note [Model agreement]: every rank describes its parameters and buffers ("name dtype [shape]",
// in order), and the ranks allgather a 64-bit hash of the description. If any hash differs, the
// ranks allgather the descriptions themselves and every rank fails with the first differences
// (entry, name, and what each rank has), instead of reducing mismatched buckets.
//
// Sparse parameters (nn::Embedding with sparse = true) are averaged outside the buckets, by
// allgather of the touched rows or a dense allreduce when that is cheaper (Note [Sparse
// parameters] in paddle/parallel/reducer/reducer.h); after Backward() their sparse_grad() holds
// the average. They must be on the CPU.
//
// Note [DDP devices]: the module may live on the CPU or on one CUDA device (Module::To before
// Create). With CUDA parameters the broadcast runs on them directly and the model-agreement
// collectives copy their small host tensors to that device first, so a CUDA-only communicator
// (backend=nccl) works; the Reducer keeps its buckets on that device (Note [Reducer devices]).
#ifndef PADDLE_PARALLEL_DISTRIBUTED_DATA_PARALLEL_H_
#define PADDLE_PARALLEL_DISTRIBUTED_DATA_PARALLEL_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "paddle/collective/communicator.h"
#include "paddle/core/autograd/variable.h"
#include "paddle/nn/module.h"
#include "paddle/parallel/reducer/reducer.h"

namespace paddle {

struct DdpOptions {
  // The reducer's bucket caps (Note [Bucket caps]); 0: the "bucket" line of PADDLE_TUNING_PARAMS's
  // file when it has one (Note [Tuned bucket caps]), else 1 MiB for the first and 25 MiB after.
  int64_t first_bucket_bytes = 0;
  int64_t bucket_bytes = 0;
  std::string compression = "none";  // "none" | "fp16" | "bf16" (Note [Gradient compression])
  bool find_unused_parameters = false;
  absl::Duration timeout = absl::ZeroDuration();  // zero: the communicator's
  // The stall inspector (Note [Stall inspector] in paddle/parallel/reducer/reducer.cc); unset:
  // PADDLE_STALL_WARNING_S.
  std::optional<absl::Duration> stall_warning;
  std::shared_ptr<Store> store;  // the group's store, to name the ranks that are missing
};

class DistributedDataParallel {
 public:
  // Collective: every rank of `comm` calls it. `comm` outlives the result.
  static absl::StatusOr<std::unique_ptr<DistributedDataParallel>> Create(
      std::shared_ptr<nn::Module> module, Communicator* comm, const DdpOptions& options = {});

  absl::StatusOr<autograd::Variable> Forward(const autograd::Variable& x);
  // loss.Backward(), then the gradients' reduction: afterwards every parameter's grad() holds the
  // average over ranks (or, with sync off, this rank's accumulated gradient).
  absl::Status Backward(const autograd::Variable& loss);
  // Backward() in two halves, for a backward pass started elsewhere (Python's loss.backward()):
  // PrepareForBackward() before it (again is harmless), FinalizeBackward() after it succeeds.
  absl::Status PrepareForBackward() { return reducer_->PrepareForBackward(); }
  absl::Status FinalizeBackward() { return reducer_->FinalizeBackward(); }
  // Off: gradient accumulation without communication; the next synced Backward reduces the sum.
  void set_sync(bool sync) { reducer_->set_sync(sync); }
  // Called for every bucket's allreduce (for timelines; see Reducer::set_bucket_callback).
  void set_bucket_callback(BucketCallback callback) {
    reducer_->set_bucket_callback(std::move(callback));
  }

  nn::Module& module() { return *module_; }
  const Reducer& reducer() const { return *reducer_; }

 private:
  DistributedDataParallel(std::shared_ptr<nn::Module> module, std::unique_ptr<Reducer> reducer)
      : module_(std::move(module)), reducer_(std::move(reducer)) {}

  std::shared_ptr<nn::Module> module_;
  std::unique_ptr<Reducer> reducer_;
};

}  // namespace paddle

#endif  // PADDLE_PARALLEL_DISTRIBUTED_DATA_PARALLEL_H_
