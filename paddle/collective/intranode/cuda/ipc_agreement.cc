// Settings, veto and votes of the CUDA IPC path; see ipc_agreement.h.
#include "paddle/collective/intranode/cuda/ipc_agreement.h"

#include <cstdint>
#include <optional>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "paddle/core/settings.h"
#include "paddle/core/status.h"

namespace paddle {

absl::StatusOr<CudaIpcSettings> CudaIpcSettingsFromEnv() {
  CudaIpcSettings settings;
  ASSIGN_OR_RETURN(std::optional<bool> enabled, BoolSetting(kCudaIpcEnvVar));
  settings.enabled = enabled.value_or(true);
  ASSIGN_OR_RETURN(std::optional<int64_t> bytes, IntSetting(kCudaIpcBytesEnvVar));
  if (bytes.has_value()) settings.buffer_bytes = static_cast<size_t>(*bytes);
  return settings;
}

std::string LocalIpcVeto(const CudaIpcSettings& settings, int num_hosts, int world_size,
                         int max_ranks) {
  if (!settings.enabled) return absl::StrCat(kCudaIpcEnvVar, "=0");
  if (world_size < 2) return "a world of one rank has no peer to share memory with";
  if (num_hosts != 1) {
    return absl::StrCat("the ranks run on ", num_hosts, " hosts; CUDA IPC needs one host");
  }
  if (world_size > max_ranks) {
    return absl::StrCat(world_size, " ranks is more than the ", max_ranks,
                        " the IPC reduction kernel reads at once");
  }
  return std::string();
}

std::string OkVote(absl::string_view payload) { return absl::StrCat("ok ", payload); }
std::string NoVote(absl::string_view reason) { return absl::StrCat("no ", reason); }

absl::StatusOr<ParsedVote> ParseVote(absl::string_view text) {
  ParsedVote vote;
  if (absl::StartsWith(text, "ok ") || text == "ok") {
    vote.ok = true;
  } else if (!absl::StartsWith(text, "no ")) {
    return absl::InvalidArgumentError(
        absl::StrCat("CUDA IPC vote \"", text.substr(0, 80),
                     "\" is neither \"ok ...\" nor \"no ...\"; is the store prefix shared?"));
  }
  vote.payload = std::string(text.size() > 3 ? text.substr(3) : absl::string_view());
  return vote;
}

std::string FirstNo(const std::vector<ParsedVote>& votes) {
  for (size_t r = 0; r < votes.size(); ++r) {
    if (!votes[r].ok) return absl::StrCat("rank ", r, ": ", votes[r].payload);
  }
  return std::string();
}

}  // namespace paddle
