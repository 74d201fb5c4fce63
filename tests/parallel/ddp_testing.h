// Test support for the Reducer and DistributedDataParallel: a group of communicators of any backend
// with ranks as threads, synthetic Fashion-MNIST-shaped batches from Philox, a model with a
// skippable layer, and one training loop used both for the single-process reference and for
// every rank of a data-parallel run.
#ifndef TESTS_PARALLEL_DDP_TESTING_H_
#define TESTS_PARALLEL_DDP_TESTING_H_

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "paddle/collective/communicator.h"
#include "paddle/nn/layers.h"
#include "paddle/nn/module.h"
#include "paddle/parallel/distributed_data_parallel.h"

namespace paddle::ddptest {

// `n` communicators of `backend` over one HashStore, created and destroyed on one thread per rank.
class Group {
 public:
  static absl::StatusOr<std::unique_ptr<Group>> Create(int n, Backend backend,
                                                       absl::Duration timeout = absl::Seconds(120));
  ~Group();
  int size() const { return static_cast<int>(comms_.size()); }
  // Runs body(rank, communicator) on one thread per rank; each rank's status.
  std::vector<absl::Status> Run(const std::function<absl::Status(int, Communicator&)>& body);

 private:
  Group() = default;
  std::vector<std::unique_ptr<Communicator>> comms_;
};

// "" when all are OK, else "rank r: status" lines.
std::string Failures(const std::vector<absl::Status>& statuses);

// Rows [begin, end) of global batch `step`: x [rows, 1, 28, 28] standard normal, labels int64 in
// [0, 10); the same (seed, step) always gives the same global batch.
struct Batch {
  Tensor x;
  Tensor labels;
};
Batch MakeBatch(uint64_t seed, int step, int64_t batch, int64_t begin, int64_t end);

// flatten, Linear 784-hidden, ReLU, [Linear hidden-hidden if use_skip], Linear hidden-10.
class SkipModel : public nn::Module {
 public:
  SkipModel(int64_t hidden, bool use_skip);
  absl::StatusOr<autograd::Variable> Forward(const autograd::Variable& x) override;
  bool use_skip = false;

 private:
  std::shared_ptr<nn::Linear> fc1_, skip_, out_;
};

struct TrainConfig {
  // Model for `rank` (rank -1: the single-process reference).
  std::function<std::shared_ptr<nn::Module>(int rank)> make_model;
  std::string optimizer = "sgd";  // "sgd" | "lars"
  int steps = 3;
  int64_t batch = 12;     // global; every rank gets batch / world rows
  int micro_batches = 1;  // per rank per step: all but the last with sync off
  uint64_t data_seed = 5;
};

// Trains without DDP on the whole batch; the final parameters by name.
absl::StatusOr<std::map<std::string, Tensor>> TrainReference(const TrainConfig& config);

// One rank's part of a data-parallel run; the final parameters by name. `ddp_out` (if set)
// receives the wrapper for inspection.
absl::StatusOr<std::map<std::string, Tensor>> TrainRank(
    const TrainConfig& config, const DdpOptions& options, int rank, Communicator& comm,
    std::unique_ptr<DistributedDataParallel>* ddp_out = nullptr);

// OK if every element satisfies |got - want| <= rtol * |want| + atol; else the worst element.
// Also reports the largest relative difference seen through *max_rel if set.
absl::Status CompareParams(const std::map<std::string, Tensor>& got,
                           const std::map<std::string, Tensor>& want, double rtol, double atol,
                           double* max_abs = nullptr);

}  // namespace paddle::ddptest

#endif  // TESTS_PARALLEL_DDP_TESTING_H_
