// CreateNcclCommunicator in a build without CUDA (--config=nocuda or no toolkit).
#include "absl/status/status.h"
#include "paddle/collective/backends/nccl/nccl_communicator.h"

namespace paddle {

absl::StatusOr<std::unique_ptr<Communicator>> CreateNcclCommunicator(
    const CommunicatorOptions& options) {
  (void)options;
  return absl::FailedPreconditionError(
      "the nccl backend is not in this build (built without CUDA: --config=nocuda or no CUDA "
      "toolkit found); rebuild with CUDA or use the native or gloo backend");
}

}  // namespace paddle
