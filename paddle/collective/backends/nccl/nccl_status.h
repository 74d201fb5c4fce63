// NCCL results as absl::Status, and our dtypes and reductions as NCCL's.
//
// Every NCCL call in the nccl backend goes through PADDLE_NCCL_RETURN_IF_ERROR, so an error names
// the call, where it is, NCCL's text for the code (ncclGetErrorString) and NCCL's own last error
// (ncclGetLastError: "Duplicate GPU detected : rank 1 and rank 0 both on CUDA device 1000"), and
// carries a canonical code: kInvalidArgument for ncclInvalidArgument/ncclInvalidUsage,
// kUnavailable for ncclRemoteError and ncclSystemError (a peer or the network went away),
// kInternal otherwise.
//
// Note [ncclInProgress]: a communicator created with blocking = 0 returns ncclInProgress from
// calls that have not finished yet; that is not an error. The macro treats it as success, and the
// caller polls ncclCommGetAsyncError until it turns into ncclSuccess or an error (NcclComm::Issue).
#ifndef PADDLE_COLLECTIVE_BACKENDS_NCCL_NCCL_STATUS_H_
#define PADDLE_COLLECTIVE_BACKENDS_NCCL_NCCL_STATUS_H_

#include <nccl.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "paddle/collective/reduction.h"
#include "paddle/core/dtype.h"

namespace paddle {

// "NCCL call `ncclAllReduce(...)` failed at f.cc:12: invalid usage (run with NCCL_DEBUG=WARN
// for details); NCCL's last error: Duplicate GPU detected ...". `comm` may be null (the last
// error of the calling thread's most recent failure is then reported).
absl::Status NcclErrorToStatus(ncclResult_t result, absl::string_view expr, absl::string_view file,
                               int line, ncclComm_t comm = nullptr);

// NCCL's element type for `dtype`: float32/64, float16, bfloat16, int8, uint8, int32, int64.
// kInvalidArgument for bool (NCCL has none) or an invalid value.
absl::StatusOr<ncclDataType_t> NcclDataType(DType dtype);

// ncclSum, ncclAvg, ncclMin, ncclMax, ncclProd; kInvalidArgument for a value outside the enum.
absl::StatusOr<ncclRedOp_t> NcclRedOp(ReduceOp op);

}  // namespace paddle

// Returns a Status from the enclosing function if `expr` (an ncclResult_t) is neither ncclSuccess
// nor ncclInProgress (Note [ncclInProgress]). The second form names the communicator whose last
// error to attach.
#define PADDLE_NCCL_RETURN_IF_ERROR(expr) PADDLE_NCCL_RETURN_IF_ERROR_COMM(expr, nullptr)
#define PADDLE_NCCL_RETURN_IF_ERROR_COMM(expr, comm)                                              \
  do {                                                                                            \
    const ncclResult_t paddle_nccl_result_ = (expr);                                              \
    if (paddle_nccl_result_ != ncclSuccess && paddle_nccl_result_ != ncclInProgress) {            \
      return ::paddle::NcclErrorToStatus(paddle_nccl_result_, #expr, __FILE__, __LINE__, (comm)); \
    }                                                                                             \
  } while (0)

#endif  // PADDLE_COLLECTIVE_BACKENDS_NCCL_NCCL_STATUS_H_
