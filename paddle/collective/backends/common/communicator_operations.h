// PADDLE_COMMUNICATOR_OPERATIONS: the declarations of Communicator's operations (communicator.h),
// Allreduce to Abort, as overrides, for the public section of a class inside namespace paddle.
//
// Every backend (native, Gloo, NCCL) and the debug-check layer implements all thirteen, so their
// signatures stood written out four times, each copy free to drift from the interface in its
// defaults. One list keeps them identical to Communicator's, defaults included (a caller holding
// the concrete type gets the defaults of one holding a Communicator), and each still says
// `override`, so the compiler checks it against the interface. rank(), size(), backend() and the
// destructor stay in each class: their bodies are the backend's own.
#ifndef PADDLE_COLLECTIVE_BACKENDS_COMMON_COMMUNICATOR_OPERATIONS_H_
#define PADDLE_COLLECTIVE_BACKENDS_COMMON_COMMUNICATOR_OPERATIONS_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "paddle/collective/communicator.h"

#define PADDLE_COMMUNICATOR_OPERATIONS                                                           \
  std::shared_ptr<Work> Allreduce(Tensor tensor, ReduceOp op, CallOptions call = {}) override;   \
  std::shared_ptr<Work> Broadcast(Tensor tensor, int root, CallOptions call = {}) override;      \
  std::shared_ptr<Work> Reduce(Tensor tensor, int root, ReduceOp op, CallOptions call = {})      \
      override;                                                                                  \
  std::shared_ptr<Work> Allgather(Tensor input, Tensor output, CallOptions call = {}) override;  \
  std::shared_ptr<Work> Allgatherv(Tensor input, Tensor output, std::vector<int64_t> counts,     \
                                   CallOptions call = {}) override;                              \
  std::shared_ptr<Work> ReduceScatter(Tensor input, Tensor output, ReduceOp op,                  \
                                      CallOptions call = {}) override;                           \
  std::shared_ptr<Work> Alltoall(Tensor input, Tensor output, CallOptions call = {}) override;   \
  std::shared_ptr<Work> Alltoallv(Tensor input, Tensor output, std::vector<int64_t> send_counts, \
                                  std::vector<int64_t> recv_counts, CallOptions call = {})       \
      override;                                                                                  \
  std::shared_ptr<Work> Barrier(CallOptions call = {}) override;                                 \
  std::shared_ptr<Work> Send(Tensor tensor, int dst, uint32_t tag = 0, CallOptions call = {})    \
      override;                                                                                  \
  std::shared_ptr<Work> Recv(Tensor tensor, int src, uint32_t tag = 0, CallOptions call = {})    \
      override;                                                                                  \
  absl::StatusOr<std::unique_ptr<Communicator>> Split(std::vector<int> ranks) override;          \
  void Abort(const absl::Status& cause) override

#endif  // PADDLE_COLLECTIVE_BACKENDS_COMMON_COMMUNICATOR_OPERATIONS_H_
