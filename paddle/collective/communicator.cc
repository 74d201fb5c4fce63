// Communicator::Create, the one place that knows every backend, and the backend names.
#include "paddle/collective/communicator.h"

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "paddle/collective/backends/gloo/gloo_communicator.h"
#include "paddle/collective/backends/native/native_communicator.h"
#include "paddle/collective/backends/nccl/nccl_communicator.h"

namespace paddle {
namespace {

struct BackendNames {
  Backend backend;
  absl::string_view name;
};

constexpr BackendNames kBackendNames[] = {
    {Backend::kNative, "native"},
    {Backend::kGloo, "gloo"},
    {Backend::kNccl, "nccl"},
};

}  // namespace

absl::string_view BackendName(Backend backend) {
  for (const BackendNames& entry : kBackendNames) {
    if (entry.backend == backend) return entry.name;
  }
  return "invalid";
}

absl::StatusOr<Backend> ParseBackend(absl::string_view name) {
  const absl::string_view stripped = absl::StripAsciiWhitespace(name);
  for (const BackendNames& entry : kBackendNames) {
    if (absl::EqualsIgnoreCase(stripped, entry.name)) return entry.backend;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown communicator backend \"", name,
      "\"; expected native (our own algorithms over TCP), gloo (libgloo) or nccl (GPU)"));
}

absl::StatusOr<std::unique_ptr<Communicator>> Communicator::Create(
    const CommunicatorOptions& options) {
  switch (options.backend) {
    case Backend::kNative:
      return CreateNativeCommunicator(options);
    case Backend::kGloo:
      return CreateGlooCommunicator(options);
    case Backend::kNccl:
      return CreateNcclCommunicator(options);
  }
  return absl::InvalidArgumentError(
      absl::StrCat("invalid backend value ", static_cast<int>(options.backend)));
}

}  // namespace paddle
