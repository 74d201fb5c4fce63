// UCX status codes as absl::Status. Every UCX call of the UCX transport goes through
// UCX_RETURN_IF_ERROR (or, where the code is not a function's own result, UcxError), so an error
// carries UCX's own text (ucs_status_string), the call that failed and what was being done.
#ifndef PADDLE_COLLECTIVE_TRANSPORT_UCX_UCX_ERROR_H_
#define PADDLE_COLLECTIVE_TRANSPORT_UCX_UCX_ERROR_H_

#include <ucs/type/status.h>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace paddle {

// The canonical code for a UCX status: peer loss (unreachable, reset, endpoint timeout) is
// kUnavailable, a timeout kDeadlineExceeded, a cancel kCancelled, truncation and bad parameters
// kInvalidArgument, missing memory or resources kResourceExhausted, anything else kInternal.
absl::StatusCode UcxStatusCode(ucs_status_t status);

// OK for UCS_OK (and UCS_INPROGRESS); else "<what>: <call>: <ucs_status_string> (UCS status N)".
absl::Status UcxError(ucs_status_t status, absl::string_view call, absl::string_view what);

}  // namespace paddle

// Evaluates `expr` (a ucs_status_t) and returns its error, naming the call and `what` (a
// string: what was being done), from the enclosing function.
#define UCX_RETURN_IF_ERROR(expr, what)                                            \
  do {                                                                             \
    ::absl::Status paddle_ucx_status_ = ::paddle::UcxError((expr), #expr, (what)); \
    if (!paddle_ucx_status_.ok()) return paddle_ucx_status_;                       \
  } while (0)

#endif  // PADDLE_COLLECTIVE_TRANSPORT_UCX_UCX_ERROR_H_
