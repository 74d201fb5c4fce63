// The pure-host part of choosing the CUDA IPC path (Note [CUDA IPC agreement] in
// cuda_ipc_workspace.h): the settings from the environment, this rank's own veto, and the
// votes the ranks exchange through the store. No CUDA here, so it builds and is tested anywhere.
#ifndef PADDLE_COLLECTIVE_INTRANODE_CUDA_IPC_AGREEMENT_H_
#define PADDLE_COLLECTIVE_INTRANODE_CUDA_IPC_AGREEMENT_H_

#include <cstddef>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace paddle {

constexpr char kCudaIpcEnvVar[] = "PADDLE_CUDA_IPC";             // 1 (default) or 0
constexpr char kCudaIpcBytesEnvVar[] = "PADDLE_CUDA_IPC_BYTES";  // per scratch buffer
constexpr size_t kDefaultCudaIpcBytes = size_t{64} << 20;

struct CudaIpcSettings {
  bool enabled = true;
  size_t buffer_bytes = kDefaultCudaIpcBytes;
};

// PADDLE_CUDA_IPC (a boolean; unset: 1) and PADDLE_CUDA_IPC_BYTES (a multiple of 4096 from
// 1 MiB to 4 GiB; unset: 64 MiB), as the settings table (paddle/core/settings.cc) declares them.
// kInvalidArgument naming the variable, its value and what is accepted.
absl::StatusOr<CudaIpcSettings> CudaIpcSettingsFromEnv();

// Why this rank cannot take the IPC path, before touching any device; "" if nothing stands in
// the way. `max_ranks` is what the reduction kernel handles (kMaxIpcRanks).
std::string LocalIpcVeto(const CudaIpcSettings& settings, int num_hosts, int world_size,
                         int max_ranks);

// A vote: "ok <payload>" or "no <reason>".
std::string OkVote(absl::string_view payload);
std::string NoVote(absl::string_view reason);

struct ParsedVote {
  bool ok = false;
  std::string payload;  // the payload of an ok vote, the reason of a no
};
// kInvalidArgument for text that is neither (a store shared with something else).
absl::StatusOr<ParsedVote> ParseVote(absl::string_view text);

// "" when every vote is ok; else "rank r: <reason>" of the lowest rank that said no (all ranks
// compute the same). votes[r] is rank r's parsed vote.
std::string FirstNo(const std::vector<ParsedVote>& votes);

}  // namespace paddle

#endif  // PADDLE_COLLECTIVE_INTRANODE_CUDA_IPC_AGREEMENT_H_
