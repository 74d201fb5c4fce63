// CudaSupport without CUDA (`--config=nocuda` or no toolkit): CPU calls pass through untouched;
// a call with a CUDA tensor fails with kInvalidArgument.
#include "absl/strings/str_cat.h"
#include "paddle/collective/backends/native/cuda_support.h"

namespace paddle {

class CudaCall {};
class CudaSupport::Impl {};

CudaSupport::CudaSupport(const CudaSupportOptions& /*options*/) {}
CudaSupport::~CudaSupport() = default;

absl::Status CudaSupport::Prepare(OpKind kind, ReduceOp, int,
                                  const std::vector<CudaCallTensor>& tensors,
                                  std::shared_ptr<CudaCall>* call) {
  call->reset();
  // The same device check as with CUDA, so the same calls fail the same way.
  const absl::StatusOr<int> device = CudaDeviceOf(tensors);
  if (!device.ok()) return device.status();
  for (const CudaCallTensor& t : tensors) {
    if (t.tensor->device().is_cuda()) {
      return absl::InvalidArgumentError(absl::StrCat(
          OpKindName(kind), " got the tensor ", t.tensor->ToString(),
          ", not in CPU memory, but this build of the native backend has no CUDA support (built "
          "with --config=nocuda or without the CUDA toolkit); copy it to the CPU, or use a CUDA "
          "build (native or nccl backend)"));
    }
  }
  return absl::OkStatus();
}

absl::Status CudaSupport::Run(const AlgorithmContext&, CudaCall&,
                              const std::function<absl::Status()>& cpu_body) {
  return cpu_body();
}

std::string CudaSupport::PathDescription() const { return "staging (built without CUDA)"; }

}  // namespace paddle
