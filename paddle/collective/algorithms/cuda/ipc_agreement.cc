// Settings, veto and votes of the CUDA IPC path; see ipc_agreement.h.
#include "paddle/collective/algorithms/cuda/ipc_agreement.h"

#include <cstdint>
#include <cstdlib>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace paddle {
namespace {

std::string Env(const char* name) {
  const char* value = std::getenv(name);
  return value == nullptr ? std::string() : std::string(value);
}

}  // namespace

absl::StatusOr<CudaIpcSettings> CudaIpcSettingsFromValues(absl::string_view enabled,
                                                          absl::string_view bytes) {
  CudaIpcSettings settings;
  const std::string flag = absl::AsciiStrToLower(absl::StripAsciiWhitespace(enabled));
  if (flag.empty() || flag == "1" || flag == "true" || flag == "on" || flag == "yes") {
    settings.enabled = true;
  } else if (flag == "0" || flag == "false" || flag == "off" || flag == "no") {
    settings.enabled = false;
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        kCudaIpcEnvVar, "=", enabled, " is not a boolean; use 1 (the CUDA IPC path where ",
        "possible) or 0 (always stage CUDA tensors through host memory)"));
  }
  const absl::string_view size = absl::StripAsciiWhitespace(bytes);
  if (!size.empty()) {
    uint64_t value = 0;
    if (!absl::SimpleAtoi(size, &value) || value < kMinCudaIpcBytes || value > kMaxCudaIpcBytes ||
        value % 4096 != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          kCudaIpcBytesEnvVar, "=", bytes, " is not a multiple of 4096 from ", kMinCudaIpcBytes,
          " to ", kMaxCudaIpcBytes, " (bytes per device scratch buffer; each rank has two)"));
    }
    settings.buffer_bytes = static_cast<size_t>(value);
  }
  return settings;
}

absl::StatusOr<CudaIpcSettings> CudaIpcSettingsFromEnvironment() {
  return CudaIpcSettingsFromValues(Env(kCudaIpcEnvVar), Env(kCudaIpcBytesEnvVar));
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
