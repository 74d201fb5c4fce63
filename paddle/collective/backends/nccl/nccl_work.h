// NcclWork: the Work of one NCCL operation, done when the CUDA event recorded after it on the
// communicator's stream has completed.
//
// Completion comes from whichever sees it first: Wait() polling the event (cudaEventQuery) and
// the communicator's asynchronous error, or the communicator's watchdog (which also fails it when
// the communicator is aborted). The first Complete() wins; later ones are ignored.
#ifndef PADDLE_COLLECTIVE_BACKENDS_NCCL_NCCL_WORK_H_
#define PADDLE_COLLECTIVE_BACKENDS_NCCL_NCCL_WORK_H_

#include <cuda_runtime_api.h>

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "paddle/collective/backends/nccl/nccl_comm.h"
#include "paddle/collective/work.h"

namespace paddle {

class NcclWork : public Work {
 public:
  // `end` (owned; may be null for a Work completed at once) is recorded after the operation.
  NcclWork(std::string description, uint64_t seq, int rank, int size,
           std::shared_ptr<NcclComm> comm, cudaEvent_t end);
  ~NcclWork() override;
  NcclWork(const NcclWork&) = delete;
  NcclWork& operator=(const NcclWork&) = delete;

  absl::Status Wait(absl::Duration timeout = absl::InfiniteDuration()) override;
  bool IsCompleted() const override;
  absl::Status status() const override;
  std::string Describe() const override { return description_; }
  uint64_t seq() const override { return seq_; }

  // Completes with `status` unless completed already; true if this call completed it.
  bool Complete(absl::Status status);
  // Queries the end event once; completes the Work (OK, or CUDA's error) if the event is done or
  // failed. True if the Work is complete.
  bool Poll();

 private:
  const std::string description_;
  const uint64_t seq_;
  const int rank_;
  const int size_;
  const std::shared_ptr<NcclComm> comm_;
  const cudaEvent_t end_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;    // guarded by mu_
  absl::Status status_;  // guarded by mu_
};

}  // namespace paddle

#endif  // PADDLE_COLLECTIVE_BACKENDS_NCCL_NCCL_WORK_H_
