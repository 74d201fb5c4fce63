// NcclComm: non-blocking init, issue, split, abort and destroy of one ncclComm_t; see
// Note [NCCL non-blocking mode] in nccl_comm.h.
#include "paddle/collective/backends/nccl/nccl_comm.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "paddle/collective/backends/nccl/nccl_status.h"
#include "paddle/core/cuda/cuda_status.h"
#include "paddle/core/status.h"

namespace paddle {
namespace {

// Polls start fast (a collective on a warm communicator finishes in microseconds) and back off
// to this, which bounds how late an abort request or a deadline is noticed.
constexpr absl::Duration kMaxPollInterval = absl::Milliseconds(1);

ncclConfig_t NonBlockingConfig() {
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  return config;
}

}  // namespace

ScopedCudaDevice::ScopedCudaDevice(int device) {
  status_ = [&]() -> absl::Status {
    PADDLE_CUDA_RETURN_IF_ERROR(cudaGetDevice(&previous_));
    if (previous_ != device) PADDLE_CUDA_RETURN_IF_ERROR(cudaSetDevice(device));
    return absl::OkStatus();
  }();
}

ScopedCudaDevice::~ScopedCudaDevice() {
  int current = -1;
  if (previous_ >= 0 && cudaGetDevice(&current) == cudaSuccess && current != previous_) {
    (void)cudaSetDevice(previous_);
  }
}

absl::StatusOr<std::shared_ptr<NcclComm>> NcclComm::Init(const ncclUniqueId& id, int rank, int size,
                                                         int device, absl::Duration timeout,
                                                         const std::string& who) {
  ScopedCudaDevice on_device(device);
  if (!on_device.status().ok()) return on_device.status();
  const absl::Time start = absl::Now();
  ncclConfig_t config = NonBlockingConfig();
  ncclComm_t comm = nullptr;
  const ncclResult_t result = ncclCommInitRankConfig(&comm, size, id, rank, &config);
  if (result != ncclSuccess && result != ncclInProgress) {
    absl::Status status =
        NcclErrorToStatus(result, "ncclCommInitRankConfig", __FILE__, __LINE__, comm);
    if (comm != nullptr) (void)ncclCommAbort(comm);
    return Annotate(status, absl::StrCat("creating the NCCL communicator of ", who));
  }
  std::shared_ptr<NcclComm> out(new NcclComm(comm, device));
  absl::Status status;
  {
    std::lock_guard<std::mutex> lock(out->mu_);
    status = out->PollLocked(comm, start + timeout, "ncclCommInitRankConfig");
  }
  if (status.ok()) return out;
  out->Abort();
  if (absl::IsDeadlineExceeded(status)) {
    return absl::DeadlineExceededError(absl::StrCat(
        "NCCL communicator init of ", who, " did not finish within the connect timeout (waited ",
        absl::FormatDuration(absl::Now() - start), " of ", absl::FormatDuration(timeout),
        "); every rank must create its communicator at about the same time, each on its own "
        "GPU; raise PADDLE_CONNECT_TIMEOUT_S if init is slow (NCCL_DEBUG=INFO shows where it "
        "waits). The communicator was aborted"));
  }
  return Annotate(status, absl::StrCat("creating the NCCL communicator of ", who));
}

NcclComm::~NcclComm() { Abort(); }

absl::Status NcclComm::PollLocked(ncclComm_t comm, absl::Time deadline, const char* what) {
  absl::Duration interval = absl::Microseconds(2);
  for (;;) {
    ncclResult_t state = ncclSuccess;
    PADDLE_NCCL_RETURN_IF_ERROR_COMM(ncclCommGetAsyncError(comm, &state), comm);
    if (state == ncclSuccess) return absl::OkStatus();
    if (state != ncclInProgress) {
      return NcclErrorToStatus(state, absl::StrCat(what, " (asynchronous error)"), __FILE__,
                               __LINE__, comm);
    }
    if (abort_requested_.load()) {
      return absl::AbortedError(absl::StrCat(what, " interrupted: the communicator is aborting"));
    }
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat(what, " still in progress at its deadline"));
    }
    absl::SleepFor(interval);
    interval = std::min(interval * 2, kMaxPollInterval);
  }
}

absl::Status NcclComm::Issue(absl::Time deadline,
                             const std::function<ncclResult_t(ncclComm_t)>& issue) {
  std::lock_guard<std::mutex> lock(mu_);
  if (comm_ == nullptr || abort_requested_.load()) {
    return absl::AbortedError("the NCCL communicator was aborted");
  }
  ScopedCudaDevice on_device(device_);
  if (!on_device.status().ok()) return on_device.status();
  const ncclResult_t result = issue(comm_);
  if (result != ncclSuccess && result != ncclInProgress) {
    return NcclErrorToStatus(result, "issuing the operation", __FILE__, __LINE__, comm_);
  }
  if (result == ncclSuccess) return absl::OkStatus();
  return PollLocked(comm_, deadline, "the operation");
}

absl::Status NcclComm::AsyncError() {
  std::unique_lock<std::mutex> lock(mu_, std::try_to_lock);
  if (!lock.owns_lock() || comm_ == nullptr) return absl::OkStatus();
  ncclResult_t state = ncclSuccess;
  PADDLE_NCCL_RETURN_IF_ERROR_COMM(ncclCommGetAsyncError(comm_, &state), comm_);
  return NcclErrorToStatus(state, "ncclCommGetAsyncError (asynchronous error)", __FILE__, __LINE__,
                           comm_);
}

absl::StatusOr<std::shared_ptr<NcclComm>> NcclComm::Split(int color, int key, absl::Time deadline,
                                                          const std::string& who) {
  std::lock_guard<std::mutex> lock(mu_);
  if (comm_ == nullptr || abort_requested_.load()) {
    return absl::AbortedError("the NCCL communicator was aborted");
  }
  ScopedCudaDevice on_device(device_);
  if (!on_device.status().ok()) return on_device.status();
  ncclConfig_t config = NonBlockingConfig();
  ncclComm_t child = nullptr;
  PADDLE_NCCL_RETURN_IF_ERROR_COMM(ncclCommSplit(comm_, color, key, &child, &config), comm_);
  absl::Status status = PollLocked(comm_, deadline, "ncclCommSplit");
  if (status.ok() && child != nullptr)
    status = PollLocked(child, deadline, "ncclCommSplit (child)");
  if (!status.ok()) {
    if (child != nullptr) (void)ncclCommAbort(child);
    return Annotate(status, absl::StrCat("splitting the NCCL communicator for ", who));
  }
  if (child == nullptr) return std::shared_ptr<NcclComm>();
  return std::shared_ptr<NcclComm>(new NcclComm(child, device_));
}

void NcclComm::Abort() {
  abort_requested_.store(true);
  std::lock_guard<std::mutex> lock(mu_);
  if (comm_ == nullptr) return;
  ScopedCudaDevice on_device(device_);
  (void)ncclCommAbort(comm_);  // nothing to do about a failure: the handle is gone either way
  comm_ = nullptr;
}

absl::Status NcclComm::Destroy(absl::Time deadline) {
  absl::Status status;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (comm_ == nullptr) return absl::OkStatus();
    ScopedCudaDevice on_device(device_);
    status = [&]() -> absl::Status {
      PADDLE_NCCL_RETURN_IF_ERROR_COMM(ncclCommFinalize(comm_), comm_);
      RETURN_IF_ERROR(PollLocked(comm_, deadline, "ncclCommFinalize"));
      PADDLE_NCCL_RETURN_IF_ERROR_COMM(ncclCommDestroy(comm_), comm_);
      return absl::OkStatus();
    }();
    if (status.ok()) comm_ = nullptr;
  }
  if (!status.ok()) Abort();
  return status;
}

}  // namespace paddle
