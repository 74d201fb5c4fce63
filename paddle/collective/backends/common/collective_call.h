// CollectiveCall: what one rank asked its communicator to do, in the terms that every rank of the
// group must agree on (the kind of operation, dtype, element counts, root, reduce op).
//
// Every backend builds one per call with CallChecks, which also checks the call's arguments the
// same way in every backend. It names the operation in Work::Describe(), in errors and logs
// ("allreduce #17 (float32 x 1048576, sum)"), and it is what the debug checks (debug_checks.h)
// compare across ranks before an operation runs, and what its CallStamp (Note [Agreement check])
// summarises.
#ifndef PADDLE_COLLECTIVE_BACKENDS_COMMON_COLLECTIVE_CALL_H_
#define PADDLE_COLLECTIVE_BACKENDS_COMMON_COLLECTIVE_CALL_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "paddle/collective/call_stamp.h"
#include "paddle/collective/reduction.h"
#include "paddle/core/dtype.h"
#include "paddle/core/tensor.h"

namespace paddle {

// Point-to-point operations involve two ranks only, so they are numbered apart from the
// collectives (whose sequence numbers must be the same on every rank).
constexpr bool IsPointToPoint(OpKind kind) {
  return kind == OpKind::kSend || kind == OpKind::kRecv;
}

struct CollectiveCall {
  OpKind kind = OpKind::kBarrier;
  bool has_dtype = false;  // barrier and split move no tensor
  DType dtype = DType::kFloat32;
  // Elements: of the tensor (allreduce, broadcast, reduce, send, recv); of each rank's block
  // (allgather input, reduce_scatter output, alltoall block); of the whole output (allgatherv) or
  // input (alltoallv).
  int64_t count = 0;
  bool has_op = false;
  ReduceOp op = ReduceOp::kSum;
  int root = -1;     // broadcast and reduce: the root; send and recv: the peer
  uint32_t tag = 0;  // send and recv
  // allgatherv: per-rank counts; alltoallv: send counts; split: the new group's ranks.
  std::vector<int64_t> counts;
  std::vector<int64_t> recv_counts;  // alltoallv
  int64_t bytes = 0;                 // what this rank moves (its largest tensor), for errors

  // "allreduce #17 (float32 x 1048576, sum)", "send #3 (float32 x 10 to rank 2, tag 7)".
  std::string Describe(uint64_t seq) const;
  // The same without the sequence number: "allreduce (float32 x 1048576, sum)".
  std::string Describe() const;
  // What the ranks compare by default (Note [Agreement check]); alltoallv's pair counts are
  // filled in per peer by the AlgorithmContext.
  CallStamp Stamp(uint64_t seq) const;
};

// The argument checks of every Communicator method (argument_checks.h), run on the caller's
// thread: each describes the call and sets *args to OK or to the first bare kInvalidArgument
// (the backend adds rank, operation and sequence number). The rules are the same everywhere:
// tensors accepted by the backend's `check_tensor`, equal dtypes, element counts that fit the
// world size, valid ranks and reduce ops, and outputs that do not overlap inputs (except an
// allgather(v) input that is exactly this rank's block of the output).
class CallChecks {
 public:
  // How the backend accepts a tensor: CPU only, CPU or CUDA, CUDA on its device.
  using TensorCheck = std::function<absl::Status(const Tensor& tensor, absl::string_view name)>;
  CallChecks(int rank, int world_size, TensorCheck check_tensor)
      : rank_(rank), size_(world_size), check_tensor_(std::move(check_tensor)) {}

  CollectiveCall Allreduce(const Tensor& tensor, ReduceOp op, absl::Status* args) const;
  CollectiveCall Broadcast(const Tensor& tensor, int root, absl::Status* args) const;
  CollectiveCall Reduce(const Tensor& tensor, int root, ReduceOp op, absl::Status* args) const;
  CollectiveCall Allgather(const Tensor& input, const Tensor& output, absl::Status* args) const;
  CollectiveCall Allgatherv(const Tensor& input, const Tensor& output,
                            const std::vector<int64_t>& counts, absl::Status* args) const;
  CollectiveCall ReduceScatter(const Tensor& input, const Tensor& output, ReduceOp op,
                               absl::Status* args) const;
  CollectiveCall Alltoall(const Tensor& input, const Tensor& output, absl::Status* args) const;
  CollectiveCall Alltoallv(const Tensor& input, const Tensor& output,
                           const std::vector<int64_t>& send_counts,
                           const std::vector<int64_t>& recv_counts, absl::Status* args) const;
  CollectiveCall Barrier() const;
  // Send (is_send) to or Recv from `peer`, another rank.
  CollectiveCall PointToPoint(bool is_send, const Tensor& tensor, int peer, uint32_t tag,
                              absl::Status* args) const;
  // Split's rank list: not empty, sorted, unique, every entry a rank.
  CollectiveCall Split(const std::vector<int>& ranks, absl::Status* args) const;

  // Where this rank's block starts in an allgather(v) output, and whether the input is exactly
  // that block (in place); valid once the call's checks passed.
  size_t BlockOffset(const Tensor& input, const std::vector<int64_t>* counts) const;

 private:
  absl::Status CheckPair(const Tensor& input, const Tensor& output) const;

  const int rank_;
  const int size_;
  const TensorCheck check_tensor_;
};

// "[1, 2, 3]", shortened to the first and last few entries when long.
std::string CountsToString(const std::vector<int64_t>& counts);

// The error of a call made after Communicator::Shutdown, in every backend's words:
// kFailedPrecondition naming the rank, the operation `op` (#`seq`; -1: none) and `what` it was
// ("allreduce #3 (float32 x 4, sum)"; empty: nothing more to say).
absl::Status ShutDownError(int rank, int world_size, absl::string_view op, int64_t seq,
                           absl::string_view what);

}  // namespace paddle

#endif  // PADDLE_COLLECTIVE_BACKENDS_COMMON_COLLECTIVE_CALL_H_
