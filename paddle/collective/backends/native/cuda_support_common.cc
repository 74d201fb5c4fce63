// The pure-host helpers of cuda_support.h, built with and without CUDA.
#include <algorithm>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "paddle/collective/backends/native/cuda_support.h"

namespace paddle {

bool IsIpcCapable(OpKind kind) {
  return kind == OpKind::kAllreduce || kind == OpKind::kBroadcast || kind == OpKind::kAllgather ||
         kind == OpKind::kReduceScatter;
}

absl::StatusOr<int> CudaDeviceOf(const std::vector<CudaCallTensor>& tensors) {
  int device = -1;
  const Tensor* first = nullptr;
  for (const CudaCallTensor& t : tensors) {
    if (!t.tensor->device().is_cuda()) continue;
    if (first == nullptr) {
      first = t.tensor;
      device = t.tensor->device().index;
    } else if (t.tensor->device().index != device) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensors ", first->ToString(), " and ", t.tensor->ToString(),
                       " are on different CUDA devices; one call moves tensors of one device"));
    }
  }
  return device;
}

std::vector<StagingRange> PlanStaging(const std::vector<uintptr_t>& begins,
                                      const std::vector<size_t>& bytes,
                                      const std::vector<CudaTensorRole>& roles) {
  std::vector<size_t> order(begins.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return begins[a] != begins[b] ? begins[a] < begins[b] : a < b;
  });
  std::vector<StagingRange> ranges;
  for (size_t i : order) {
    const uintptr_t end = begins[i] + bytes[i];
    // Zero-byte tensors get a range of their own; others join the last range they overlap.
    if (ranges.empty() || bytes[i] == 0 || ranges.back().begin == ranges.back().end ||
        begins[i] >= ranges.back().end) {
      ranges.push_back(StagingRange{begins[i], end, false, false, {}});
    }
    StagingRange& r = ranges.back();
    r.end = std::max(r.end, end);
    r.download = r.download || roles[i] != CudaTensorRole::kOutput;
    r.upload = r.upload || roles[i] != CudaTensorRole::kInput;
    r.members.push_back(i);
  }
  return ranges;
}

}  // namespace paddle
