// UCX status codes as absl::Status; see ucx_error.h.
#include "paddle/collective/transport/ucx/ucx_error.h"

#include "absl/strings/str_cat.h"

namespace paddle {

absl::StatusCode UcxStatusCode(ucs_status_t status) {
  switch (status) {
    case UCS_OK:
    case UCS_INPROGRESS:
      return absl::StatusCode::kOk;
    case UCS_ERR_CANCELED:
      return absl::StatusCode::kCancelled;
    case UCS_ERR_TIMED_OUT:
      return absl::StatusCode::kDeadlineExceeded;
    case UCS_ERR_UNREACHABLE:
    case UCS_ERR_CONNECTION_RESET:
    case UCS_ERR_ENDPOINT_TIMEOUT:
    case UCS_ERR_REJECTED:
    case UCS_ERR_NOT_CONNECTED:
    case UCS_ERR_IO_ERROR:
      return absl::StatusCode::kUnavailable;
    case UCS_ERR_MESSAGE_TRUNCATED:
    case UCS_ERR_INVALID_PARAM:
    case UCS_ERR_INVALID_ADDR:
      return absl::StatusCode::kInvalidArgument;
    case UCS_ERR_NO_MEMORY:
    case UCS_ERR_NO_RESOURCE:
    case UCS_ERR_EXCEEDS_LIMIT:
    case UCS_ERR_OUT_OF_RANGE:
      return absl::StatusCode::kResourceExhausted;
    case UCS_ERR_NO_DEVICE:
    case UCS_ERR_UNSUPPORTED:
      return absl::StatusCode::kFailedPrecondition;
    default:
      return absl::StatusCode::kInternal;
  }
}

absl::Status UcxError(ucs_status_t status, absl::string_view call, absl::string_view what) {
  if (status == UCS_OK || status == UCS_INPROGRESS) return absl::OkStatus();
  return absl::Status(UcxStatusCode(status),
                      absl::StrCat(what, ": ", call, ": ", ucs_status_string(status),
                                   " (UCS status ", static_cast<int>(status), ")"));
}

}  // namespace paddle
