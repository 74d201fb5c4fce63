// Argument checks of the communicators (native and Gloo), run on the caller's thread before an
// operation is queued, so that a bad call fails at once with a kInvalidArgument naming the sizes,
// dtypes and ranks involved, instead of failing halfway through an algorithm or hanging the other
// ranks.
//
// Each check returns a bare kInvalidArgument message; the communicator adds the rank, the
// operation and its sequence number (ErrorContext).
#ifndef PADDLE_COLLECTIVE_ARGUMENT_CHECKS_H_
#define PADDLE_COLLECTIVE_ARGUMENT_CHECKS_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "paddle/core/tensor.h"

namespace paddle {

// `tensor` (called `name` in messages: "tensor", "input", "output") is defined, in CPU memory,
// contiguous, and of a valid dtype.
absl::Status CheckTensor(const Tensor& tensor, absl::string_view name);
// The same, also accepting CUDA memory when `allow_cuda` (the native backend stages or moves it
// over CUDA IPC).
absl::Status CheckTensor(const Tensor& tensor, absl::string_view name, bool allow_cuda);

// `a` and `b` have the same dtype.
absl::Status CheckSameDType(const Tensor& a, absl::string_view a_name, const Tensor& b,
                            absl::string_view b_name);

// `tensor` has `expected` elements; `why` explains the number ("world size 4 x 16 input
// elements").
absl::Status CheckNumel(const Tensor& tensor, absl::string_view name, int64_t expected,
                        absl::string_view why);

// 0 <= rank < world_size; `what` is "root", "destination rank", ...
absl::Status CheckRankArgument(int rank, int world_size, absl::string_view what);

// One count per rank, none negative, the sum not overflowing; sets *total.
absl::Status CheckCountsArgument(const std::vector<int64_t>& counts, int world_size,
                                 absl::string_view name, int64_t* total);

// The memory of `a` and `b` does not overlap (both contiguous).
absl::Status CheckDisjoint(const Tensor& a, absl::string_view a_name, const Tensor& b,
                           absl::string_view b_name);

// True if `a` and `b` are contiguous views of exactly the same elements.
bool SameElements(const Tensor& a, const Tensor& b);

}  // namespace paddle

#endif  // PADDLE_COLLECTIVE_ARGUMENT_CHECKS_H_
