// Reducer: averages parameter gradients over the ranks of a Communicator, overlapping the
// allreduces with the backward pass. The engine of DistributedDataParallel (paddle/parallel).
//
// Gradients live in buckets (bucket_assigner.h): each bucket is one flat contiguous tensor and
// every parameter's grad() is a view into its bucket (Note [Gradients as views] in
// paddle/core/autograd/variable.h), so accumulation writes straight into the bucket and nothing is
// copied in or out. A grad-ready hook per parameter (Note [Gradient ready hooks]) counts the
// bucket's pending gradients; the bucket's allreduce (ReduceOp::kAvg) is launched when the count
// reaches zero.
//
// Note [Bucket order]: buckets are launched strictly in index order: a ready bucket waits until
// every bucket before it was launched. The communicator runs collectives in call order and matches
// them across ranks by that order, so every rank must issue the same allreduces in the same order
// even when gradients become ready in a different order on different ranks.
//
// One iteration: PrepareForBackward(), the backward pass (hooks fire on its thread), then
// FinalizeBackward(), which launches what is left, waits for every allreduce within the timeout
// and leaves every grad() holding the average over ranks. With set_sync(false) the hooks only
// record use: gradients accumulate locally and the next synced iteration reduces the sum.
//
// Note [Bucket rebuild]: after the first synced iteration the buckets are laid out again, once,
// from the order in which gradients actually became ready (rank 0's order, broadcast, so every rank
// gets the same layout). Gradient values are copied into the new buckets.
//
// Note [Unused parameters]: a parameter whose hook never fired since the last synced iteration is
// unused. With find_unused_parameters=false that is an error in FinalizeBackward (a bucket
// holding it would never be launched: failing at once beats hanging). With
// find_unused_parameters=true, FinalizeBackward first allgathers a per-parameter "used" byte from
// every rank; if ranks disagree every rank fails naming those parameters and ranks, otherwise the
// unused parameters' gradient slots are zeroed and their buckets count as ready. Because that
// agreement has to precede the first bucket's allreduce, in this mode all buckets are launched in
// FinalizeBackward (no overlap with the backward pass): the price of the option.
//
// Note [Sparse parameters]: parameters marked sparse (Variable::set_sparse; nn::Embedding with
// sparse = true) stay out of the buckets and their hooks: after the buckets' allreduces complete,
// FinalizeBackward exchanges their sparse gradients in registration order (Note [Sparse exchange]
// in sparse_exchange.h), allgathering ids and rows or, when cheaper, allreducing the dense table.
// They must be on the CPU. Their use is not tracked (Note [Unused parameters] does not apply):
// a sparse parameter no rank touched is simply left without a gradient.
//
// Note [Gradient compression]: with compression fp16 or bf16, a float32 bucket is converted into a
// 16-bit buffer at launch, allreduced with kAvg in that dtype (the communicator sums and divides
// once, in float32, per its avg rule) and converted back in FinalizeBackward. kAvg rather than
// dividing first keeps small gradients out of the half-precision subnormal range; summing
// world-size values of the typical gradient magnitude does not approach the fp16 maximum. Other
// dtypes are reduced uncompressed.
//
// Note [Reducer devices]: all parameters must be on one device, and the buckets live there: CUDA
// gradients get CUDA buckets (CudaAllocator memory; the gradients are views into them as on the
// CPU). A ready bucket's allreduce is issued from the hook as soon as it is ready, so on the GPU it
// overlaps the rest of the backward pass: the NCCL communicator orders its own stream after the
// legacy default stream (Note [NCCL streams]), where the gradient kernels run (ops::cuda's
// CurrentStream(), which must stay the legacy default stream for this ordering). Compression
// converts on the device. The small host-side collectives (unused-parameter agreement, the
// rebuild's order broadcast) are staged through the device, since NCCL takes CUDA tensors only.
#ifndef PADDLE_PARALLEL_REDUCER_REDUCER_H_
#define PADDLE_PARALLEL_REDUCER_REDUCER_H_

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "paddle/collective/communicator.h"
#include "paddle/collective/store/store.h"
#include "paddle/core/autograd/variable.h"
#include "paddle/parallel/reducer/bucket_assigner.h"

namespace paddle {

enum class Compression { kNone, kFp16, kBf16 };
absl::string_view CompressionName(Compression compression);  // "none", "fp16", "bf16"
absl::StatusOr<Compression> ParseCompression(absl::string_view name);

// PADDLE_STALL_WARNING_S in seconds (default 60; 0 turns the stall inspector off); kInvalidArgument
// naming the variable when it is set to anything but a finite number >= 0.
absl::StatusOr<absl::Duration> StallWarningFromEnv();

struct ReducerOptions {
  int64_t first_bucket_bytes = int64_t{1} << 20;
  int64_t bucket_bytes = int64_t{25} << 20;
  Compression compression = Compression::kNone;
  bool find_unused_parameters = false;
  absl::Duration timeout = absl::ZeroDuration();  // zero: the communicator's
  // Note [Stall inspector]: how long a bucket may wait before the reducer reports which ranks
  // have not reached it (zero: never; unset: StallWarningFromEnv()), and the group's store it
  // compares notes through (without one the report only says what this rank waits for).
  std::optional<absl::Duration> stall_warning;
  std::shared_ptr<Store> store;
};

// One bucket's allreduce, for timelines. `completed` is when FinalizeBackward saw it finish.
struct BucketSpan {
  int bucket = 0;
  int64_t bytes = 0;  // bytes on the wire (after compression)
  absl::Time launched;
  absl::Time completed;
};
using BucketCallback = std::function<void(const BucketSpan&)>;

struct ReducerStats {
  int64_t synced_iterations = 0;
  // Summed over synced iterations: from PrepareForBackward to the end of FinalizeBackward, and
  // the part of FinalizeBackward spent waiting for communication.
  absl::Duration iteration_time;
  absl::Duration comm_wait_time;
  int64_t bytes_reduced = 0;  // bucket bytes on the wire, summed
  bool rebuilt = false;
  // Note [Sparse parameters], summed over synced iterations: bytes this rank sent for them (ring
  // model, sparse_exchange.h), their entries over all ranks, and dense fallbacks.
  int64_t sparse_bytes_sent = 0;
  int64_t sparse_entries = 0;
  int64_t sparse_dense_fallbacks = 0;
  // comm_wait_time / iteration_time (0 before the first synced iteration).
  double CommWaitFraction() const;
};

class Reducer {
 public:
  using NamedParameter = std::pair<std::string, autograd::Variable>;

  // `params` in registration order; each must require a gradient. `comm` outlives the Reducer.
  // Existing gradients are copied into the buckets. Sparse parameters: Note [Sparse parameters].
  static absl::StatusOr<std::unique_ptr<Reducer>> Create(std::vector<NamedParameter> params,
                                                         Communicator* comm,
                                                         const ReducerOptions& options);
  // Removes the hooks (gradients stay valid: they share the buckets' storage) and stops the stall
  // inspector's thread.
  ~Reducer();
  Reducer(const Reducer&) = delete;
  Reducer& operator=(const Reducer&) = delete;

  // Before each backward pass: resets the per-iteration counters.
  absl::Status PrepareForBackward();
  // After it: see the file comment. On error the gradients are unspecified.
  absl::Status FinalizeBackward();

  void set_sync(bool sync) { sync_ = sync; }
  bool sync() const { return sync_; }
  void set_bucket_callback(BucketCallback callback) { callback_ = std::move(callback); }

  const ReducerStats& stats() const { return stats_; }
  // The last stall report (Note [Stall inspector]); empty if none. Safe while a backward pass runs.
  std::string last_stall_report() const;
  int num_buckets() const { return static_cast<int>(buckets_.size()); }
  // Parameter names per bucket, in reduction order.
  std::vector<std::vector<std::string>> BucketNames() const;
  // One line per bucket: "bucket 0: float32, 2 params, 5160 bytes [fc3.bias, fc3.weight]".
  std::string DescribeLayout() const;

 private:
  struct Bucket;
  struct Param {
    std::string name;
    autograd::Variable var;
    int hook = -1;
    int bucket = -1;
    int64_t offset = 0;  // elements into the bucket
  };

  Reducer(std::vector<NamedParameter> params, Communicator* comm, ReducerOptions options);
  absl::Status Build(const BucketLayout& layout);
  void OnGradReady(int64_t index);
  void MarkBucketReady(int bucket);
  void LaunchReadyBuckets();
  absl::Status CheckUnused();
  absl::Status WaitAll();
  // Waits for bucket `b`'s allreduce, under the stall inspector's watch.
  absl::Status WaitBucket(int b);
  // The stall inspector's thread (Note [Stall inspector]).
  void WatchForStalls();
  // The report for a wait on bucket `b` (`bucket`: its DescribeBucket) of `iteration`; compares
  // notes through the store from the second report of a wait on.
  std::string ReportStall(int b, const std::string& bucket, int64_t iteration,
                          absl::Duration waited, bool compare) const;
  absl::Status Rebuild();
  std::string DescribeBucket(int bucket) const;

  Communicator* comm_;
  ReducerOptions options_;
  Device device_ = Device::Cpu();  // Note [Reducer devices]
  std::vector<Param> params_;
  std::vector<NamedParameter> sparse_params_;  // Note [Sparse parameters]
  std::vector<std::unique_ptr<Bucket>> buckets_;
  BucketCallback callback_;
  ReducerStats stats_;
  bool sync_ = true;
  bool prepared_ = false;
  int next_launch_ = 0;
  std::vector<bool> ready_;     // this iteration
  std::vector<bool> used_;      // since the last synced iteration
  std::vector<int64_t> order_;  // ready order of the current iteration, until rebuilt
  absl::Status hook_error_;
  absl::Time prepared_at_;

  // Note [Stall inspector]: what the training thread waits for, as the inspector's thread sees it.
  mutable std::mutex stall_mu_;
  std::condition_variable stall_cv_;
  bool stall_stop_ = false;
  int stall_bucket_ = -1;  // the bucket being waited for; -1: none
  int64_t stall_iteration_ = 0;
  uint64_t stall_wait_ = 0;  // counts the waits, so the inspector tells one from the next
  absl::Time stall_since_;
  std::string last_stall_report_;
  std::thread stall_thread_;  // running while options_.stall_warning > 0
};

}  // namespace paddle

#endif  // PADDLE_PARALLEL_REDUCER_REDUCER_H_
