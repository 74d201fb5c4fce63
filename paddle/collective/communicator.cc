// Communicator::Create, the one place that knows every backend, and the backend names. It also
// puts the debug-check layer (backends/common/debug_check_communicator.h) over every
// communicator it makes while the debug checks are on, so every backend gets them alike.
#include "paddle/collective/communicator.h"

#include <optional>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "paddle/collective/argument_checks.h"
#include "paddle/collective/backends/common/collective_call.h"
#include "paddle/collective/backends/common/debug_check_communicator.h"
#include "paddle/collective/backends/gloo/gloo_communicator.h"
#include "paddle/collective/backends/native/native_communicator.h"
#include "paddle/collective/backends/nccl/nccl_communicator.h"
#include "paddle/collective/store/store.h"
#include "paddle/core/settings.h"
#include "paddle/core/status.h"

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

absl::StatusOr<std::unique_ptr<Communicator>> CreateBackend(const CommunicatorOptions& options) {
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

// The tensors each backend's own CallChecks accept, so that the debug checks call a call rejected
// exactly where the backend will: native CPU or CUDA memory (staged, or over CUDA IPC), Gloo CPU
// memory only, NCCL CUDA memory (which device is the backend's to check).
CallChecks::TensorCheck AcceptedTensors(Backend backend) {
  switch (backend) {
    case Backend::kGloo:
      return [](const Tensor& t, absl::string_view name) { return CheckTensor(t, name); };
    case Backend::kNccl:
      return [](const Tensor& t, absl::string_view name) -> absl::Status {
        RETURN_IF_ERROR(CheckTensor(t, name, /*allow_cuda=*/true));
        if (t.device().is_cuda()) return absl::OkStatus();
        return absl::InvalidArgumentError(absl::StrCat(name, " is not in CUDA memory"));
      };
    case Backend::kNative:
      break;
  }
  return [](const Tensor& t, absl::string_view name) { return CheckTensor(t, name, true); };
}

// Note [Debug checks on every rank]
// A rank without the debug checks never joins the others' checks, so the ranks of a group must
// all run with them or all without. Every rank publishes its mode before the backend connects;
// the backend is up only once every rank has joined it, so then every key exists. Each rank
// compares its mode with rank 0's, and a rank with the checks on also with every other rank's, so
// that it fails at once, naming the ranks without them, instead of waiting for a check channel
// they never join.
std::string ModeKey(const CommunicatorOptions& options, int rank) {
  return absl::StrCat(options.store_prefix, "/debug_checks/mode/", rank);
}

std::string ModeText(bool on) { return on ? "debug_checks=1" : "debug_checks=0"; }

absl::Status AgreeOnDebugChecks(const CommunicatorOptions& options, bool on) {
  const std::string where =
      absl::StrCat("communicator of rank ", options.rank, "/", options.world_size);
  const std::string mine = ModeText(on);
  std::vector<int> differ;
  for (int r = 0; r < options.world_size; ++r) {
    if (r == options.rank || (r != 0 && !on)) continue;
    absl::StatusOr<std::string> theirs =
        options.store->Get(ModeKey(options, r), options.connect_timeout);
    if (!theirs.ok()) {
      return Annotate(theirs.status(),
                      absl::StrCat(where, ": reading rank ", r, "'s debug-check mode"));
    }
    if (*theirs != mine) differ.push_back(r);
  }
  if (differ.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      where, ": ", differ.size() == 1 ? "rank " : "ranks ", absl::StrJoin(differ, ", "),
      differ.size() == 1 ? " runs" : " run", " with ", ModeText(!on), " but this rank with ", mine,
      "; set PADDLE_DEBUG_CHECKS (or CommunicatorOptions.debug_checks) alike on every rank"));
}

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
  ASSIGN_OR_RETURN(std::optional<bool> debug_env, BoolSetting("PADDLE_DEBUG_CHECKS"));
  const bool debug_checks = options.debug_checks || debug_env.value_or(false);
  // One rank has no one to disagree with (and may have no store).
  const bool group = options.world_size > 1 && options.store != nullptr;
  if (group) {
    RETURN_IF_ERROR(
        Annotate(options.store->Set(ModeKey(options, options.rank), ModeText(debug_checks)),
                 absl::StrCat("communicator of rank ", options.rank, "/", options.world_size,
                              ": publishing its debug-check mode")));
  }
  ASSIGN_OR_RETURN(std::unique_ptr<Communicator> comm, CreateBackend(options));
  if (!group) return comm;
  if (absl::Status agreed = AgreeOnDebugChecks(options, debug_checks); !agreed.ok()) {
    comm->Abort(agreed);
    return agreed;
  }
  if (!debug_checks) return comm;
  return DebugCheckCommunicator::Wrap(std::move(comm), options, AcceptedTensors(options.backend),
                                      absl::StrCat(options.store_prefix, "/debug_checks"));
}

}  // namespace paddle
