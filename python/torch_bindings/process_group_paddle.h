// ProcessGroupPaddle: torch.distributed's ProcessGroup on top of our native Communicator.
//
// `import paddle.torch` registers it as backend "paddle"; torch then creates one per process group
// (the default group and each new_group) from the c10d store it rendezvoused on, which we wrap as
// one of our Stores (torch_store.h). Every c10d call becomes one or a few Communicator calls:
//
//   allreduce, broadcast, reduce, barrier, send, recv      direct, in place
//   _allgather_base, _reduce_scatter_base, alltoall_base   direct (uneven splits: Alltoallv)
//   allreduce_coalesced, allgather, allgather_coalesced,
//   reduce_scatter (uneven: padded blocks), alltoall      through one flat staging tensor
//   gather, scatter                                        Alltoallv with the root's counts only
//   BAND, BOR, BXOR                                        Allgather, then a local fold
//   recv from any source                                   refused (Note [No receive from any
//                                                          source])
//
// Note [Torch tensor lifetime]: a contiguous CPU tensor is handed to the communicator without a
// copy, as a paddle::Tensor view whose release callback holds a reference to the at::Tensor, so
// the memory lives until the communicator has finished with it however the caller drops its
// handles. A non-contiguous tensor is copied into a contiguous one first and, for outputs, copied
// back when the operation completes (as gloo does for its staging buffers).
//
// Note [Torch work completion]: each ProcessGroupPaddle owns one completion thread. Operations are
// queued to it in call order; it waits for each one's paddle Works (a waiting thread also drives
// the native engine), runs the copy-back step, then completes the c10d Work and its Future (DDP's
// comm hooks chain on the Future). Errors, ours or a peer's, become std::runtime_error, which
// Python sees as RuntimeError with our message (rank, peer, operation, bytes, time waited).
//
// Argument errors that the communicator or this file detect before anything is sent (unsupported
// dtype or reduce op, sizes that do not add up, a CUDA tensor) are thrown by the call itself.
// Timeouts: init_process_group(timeout=) is every operation's timeout; an option's own timeout
// wins for that call.
#ifndef PYTHON_TORCH_BINDINGS_PROCESS_GROUP_PADDLE_H_
#define PYTHON_TORCH_BINDINGS_PROCESS_GROUP_PADDLE_H_

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "paddle/collective/communicator.h"

namespace paddle::torch_ext {

class WorkPaddle;

class ProcessGroupPaddle : public c10d::ProcessGroup {
 public:
  // Connects to the group's other ranks through `store` (blocks until all have, within
  // `timeout`). Throws std::runtime_error with our message on failure.
  static c10::intrusive_ptr<ProcessGroupPaddle> Create(c10::intrusive_ptr<c10d::Store> store,
                                                       int rank, int size,
                                                       std::chrono::milliseconds timeout);

  ProcessGroupPaddle(int rank, int size, std::shared_ptr<Store> store,
                     std::unique_ptr<Communicator> comm);
  ~ProcessGroupPaddle() override;

  const std::string getBackendName() const override { return "paddle"; }

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(
      std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors,
                                        const c10d::ReduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(std::vector<std::vector<at::Tensor>>& outputs,
                                                     std::vector<at::Tensor>& inputs,
                                                     const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs,
                                        std::vector<at::Tensor>& inputs,
                                        const c10d::GatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputs,
                                         std::vector<std::vector<at::Tensor>>& inputs,
                                         const c10d::ScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(
      at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input,
                                               std::vector<int64_t>& output_splits,
                                               std::vector<int64_t>& input_splits,
                                               const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputs,
                                          std::vector<at::Tensor>& inputs,
                                          const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dst, int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int src, int tag) override;
  // Always throws (Note [No receive from any source]).
  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& tensors, int tag) override;

 private:
  // One queued operation (Note [Torch work completion]).
  struct Pending {
    std::vector<std::shared_ptr<paddle::Work>> works;
    std::function<void()> finish;  // copy-back; runs only if every Work succeeded
    c10::intrusive_ptr<WorkPaddle> work;
  };

  // Throws at once if a Work already failed (an argument error), else queues the operation.
  c10::intrusive_ptr<c10d::Work> Launch(c10d::OpType type,
                                        std::vector<std::shared_ptr<paddle::Work>> works,
                                        std::vector<at::Tensor> outputs,
                                        std::function<void()> finish = {});
  void CompletionLoop();
  // Note [Bitwise reductions]: Allgathers contiguous `buf` into `rows` ([size, numel]); throws
  // unless `buf` is integral or bool.
  std::shared_ptr<paddle::Work> GatherRows(const at::Tensor& buf, const c10d::ReduceOp& op,
                                           std::chrono::milliseconds timeout,
                                           const std::string& where, at::Tensor* rows);
  // Reduce-scatters `flat` (size_ blocks of `block` elements) into `output` (<= block elements).
  c10::intrusive_ptr<c10d::Work> ReduceScatterFlat(c10d::OpType type, const at::Tensor& flat,
                                                   at::Tensor& output, int64_t block,
                                                   const c10d::ReduceScatterOptions& opts,
                                                   const std::string& where);

  std::shared_ptr<Store> store_;  // outlives comm_, which may use it until destroyed
  std::unique_ptr<Communicator> comm_;

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Pending> pending_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread completer_;
};

}  // namespace paddle::torch_ext

#endif  // PYTHON_TORCH_BINDINGS_PROCESS_GROUP_PADDLE_H_
