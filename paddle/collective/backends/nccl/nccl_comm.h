// NcclComm: one ncclComm_t in non-blocking mode, and the only code that touches it.
//
// Note [NCCL non-blocking mode]. The communicator is created with ncclConfig_t.blocking = 0, so
// no NCCL call blocks the host: init, collectives issued while connections are still being set
// up, finalize and split may return ncclInProgress, and the caller polls ncclCommGetAsyncError
// until it says ncclSuccess or an error. That is what lets every step here have a deadline (NCCL's
// blocking init waits forever for a rank that never comes). NCCL requires that nothing else is
// issued on the communicator while it is in progress, so Issue() polls to the end before
// returning, holding the lock that serializes every use of the handle.
//
// Aborting (ncclCommAbort) frees the handle, so it must not race with another call on it: Abort()
// first raises a flag that makes a polling Issue() give up within a poll interval, then takes the
// lock. ncclCommGetAsyncError from the watchdog and Work::Wait only try the lock (a busy lock
// means an Issue() is polling the same state anyway).
#ifndef PADDLE_COLLECTIVE_BACKENDS_NCCL_NCCL_COMM_H_
#define PADDLE_COLLECTIVE_BACKENDS_NCCL_NCCL_COMM_H_

#include <nccl.h>

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace paddle {

// Makes `device` current on this thread for the scope and restores the previous one.
class ScopedCudaDevice {
 public:
  explicit ScopedCudaDevice(int device);
  ~ScopedCudaDevice();
  ScopedCudaDevice(const ScopedCudaDevice&) = delete;
  ScopedCudaDevice& operator=(const ScopedCudaDevice&) = delete;
  const absl::Status& status() const { return status_; }

 private:
  int previous_ = -1;
  absl::Status status_;
};

class NcclComm {
 public:
  // ncclCommInitRankConfig (non-blocking) on `device`, polled until `deadline`; on timeout the
  // half-made communicator is aborted and the error is kDeadlineExceeded naming `who` ("rank 1/4
  // on cuda:0"), the time waited and what to check.
  static absl::StatusOr<std::shared_ptr<NcclComm>> Init(const ncclUniqueId& id, int rank, int size,
                                                        int device, absl::Duration timeout,
                                                        const std::string& who);

  ~NcclComm();  // aborts the handle if Destroy() did not run
  NcclComm(const NcclComm&) = delete;
  NcclComm& operator=(const NcclComm&) = delete;

  int device() const { return device_; }

  // Calls `issue(comm)` (NCCL calls on the handle, e.g. a group of sends and receives) with the
  // device current, then polls until they are no longer in progress. kAborted once aborted;
  // kDeadlineExceeded if still in progress at `deadline` (the caller then aborts).
  absl::Status Issue(absl::Time deadline, const std::function<ncclResult_t(ncclComm_t)>& issue);

  // The communicator's asynchronous error as a Status (NCCL's text and last error); OK while
  // healthy, in progress, aborted, or when another thread holds the handle.
  absl::Status AsyncError();

  // ncclCommSplit (collective over this communicator): members pass `color` >= 0, others
  // NCCL_SPLIT_NOCOLOR and get nullptr. The new communicator is polled until `deadline`.
  absl::StatusOr<std::shared_ptr<NcclComm>> Split(int color, int key, absl::Time deadline,
                                                  const std::string& who);

  // ncclCommAbort, once; later calls and calls after Destroy() do nothing. Safe from any thread.
  void Abort();
  bool aborted() const { return abort_requested_.load(); }

  // ncclCommFinalize polled until `deadline`, then ncclCommDestroy; aborts instead if finalizing
  // fails or takes too long (and returns why).
  absl::Status Destroy(absl::Time deadline);

 private:
  NcclComm(ncclComm_t comm, int device) : device_(device), comm_(comm) {}
  // Polls ncclCommGetAsyncError on `comm` until not in progress, `deadline`, or an abort request.
  // mu_ held.
  absl::Status PollLocked(ncclComm_t comm, absl::Time deadline, const char* what);

  const int device_;
  std::atomic<bool> abort_requested_{false};
  std::mutex mu_;
  ncclComm_t comm_;  // guarded by mu_; null once aborted or destroyed
};

}  // namespace paddle

#endif  // PADDLE_COLLECTIVE_BACKENDS_NCCL_NCCL_COMM_H_
