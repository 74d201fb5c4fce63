// Argument checks of the communicators.
#include "paddle/collective/argument_checks.h"

#include <limits>

#include "absl/strings/str_cat.h"

namespace paddle {

absl::Status CheckTensor(const Tensor& tensor, absl::string_view name) {
  return CheckTensor(tensor, name, /*allow_cuda=*/false);
}

absl::Status CheckTensor(const Tensor& tensor, absl::string_view name, bool allow_cuda) {
  if (!tensor.defined()) {
    return absl::InvalidArgumentError(
        absl::StrCat(name,
                     " is undefined (a default-constructed Tensor); pass a tensor, e.g. "
                     "Tensor::Empty({0}, dtype) for no elements"));
  }
  if (!tensor.device().is_cpu() && !(allow_cuda && tensor.device().is_cuda())) {
    return absl::InvalidArgumentError(absl::StrCat(
        name, " ", tensor.ToString(),
        (allow_cuda ? " is neither in CPU nor in CUDA memory"
                    : " is not in CPU memory; the Gloo backend moves CPU tensors only: copy it to "
                      "the CPU or use the native or nccl backend for GPU tensors")));
  }
  if (!tensor.is_contiguous()) {
    return absl::InvalidArgumentError(absl::StrCat(
        name, " ", tensor.ToString(), " with strides ", ShapeToString(tensor.strides()),
        " is not contiguous; call Contiguous() first (and copy the result back if it must land "
        "in the original)"));
  }
  if (DTypeSize(tensor.dtype()) == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, " has the invalid dtype value ", static_cast<int>(tensor.dtype())));
  }
  return absl::OkStatus();
}

absl::Status CheckSameDType(const Tensor& a, absl::string_view a_name, const Tensor& b,
                            absl::string_view b_name) {
  if (a.dtype() == b.dtype()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(a_name, " is ", DTypeName(a.dtype()), " but ",
                                                 b_name, " is ", DTypeName(b.dtype()),
                                                 "; both must have the same dtype"));
}

absl::Status CheckNumel(const Tensor& tensor, absl::string_view name, int64_t expected,
                        absl::string_view why) {
  if (tensor.numel() == expected) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(name, " ", tensor.ToString(), " has ",
                                                 tensor.numel(), " elements but must have ",
                                                 expected, " (", why, ")"));
}

absl::Status CheckRankArgument(int rank, int world_size, absl::string_view what) {
  if (rank >= 0 && rank < world_size) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      what, " ", rank, " is not a rank of this group: ", "valid ranks are 0..", world_size - 1));
}

absl::Status CheckCountsArgument(const std::vector<int64_t>& counts, int world_size,
                                 absl::string_view name, int64_t* total) {
  if (counts.size() != static_cast<size_t>(world_size)) {
    return absl::InvalidArgumentError(absl::StrCat(
        name, " has ", counts.size(), " entries; it needs one per rank (", world_size, ")"));
  }
  int64_t sum = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    if (counts[i] < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, "[", i, "] is negative (", counts[i], ")"));
    }
    if (counts[i] > std::numeric_limits<int64_t>::max() - sum) {
      return absl::InvalidArgumentError(absl::StrCat("the sum of ", name, " overflows int64"));
    }
    sum += counts[i];
  }
  *total = sum;
  return absl::OkStatus();
}

absl::Status CheckDisjoint(const Tensor& a, absl::string_view a_name, const Tensor& b,
                           absl::string_view b_name) {
  if (a.nbytes() == 0 || b.nbytes() == 0) return absl::OkStatus();
  const char* a_begin = static_cast<const char*>(a.data());
  const char* b_begin = static_cast<const char*>(b.data());
  if (a_begin + a.nbytes() <= b_begin || b_begin + b.nbytes() <= a_begin) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(
      absl::StrCat(a_name, " and ", b_name,
                   " share memory; this operation needs separate input and output buffers"));
}

bool SameElements(const Tensor& a, const Tensor& b) {
  return a.data() == b.data() && a.nbytes() == b.nbytes();
}

}  // namespace paddle
