// The settings of a native communicator that every rank of a group must agree on (transport,
// algorithm, debug checks, piece and slot sizes), resolved from CommunicatorOptions and the
// environment, and the transport they choose (Note [Transport choice] in the .cc).
#ifndef PADDLE_COLLECTIVE_BACKENDS_NATIVE_COMMUNICATOR_SETTINGS_H_
#define PADDLE_COLLECTIVE_BACKENDS_NATIVE_COMMUNICATOR_SETTINGS_H_

#include <cstddef>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "paddle/collective/algorithms/algorithm_context.h"
#include "paddle/collective/algorithms/algorithm_selector.h"
#include "paddle/collective/backends/native/topology.h"
#include "paddle/collective/communicator.h"
#include "paddle/collective/intranode/node_workspace.h"
#include "paddle/collective/transport/transport.h"

namespace paddle {

inline constexpr char kTransportEnvVar[] = "PADDLE_TRANSPORT";
inline constexpr char kPieceBytesEnvVar[] = "PADDLE_PIECE_BYTES";
inline constexpr char kTuningParamsEnvVar[] = "PADDLE_TUNING_PARAMS";

// The settings every rank of a group must agree on, resolved from options and environment.
struct Settings {
  std::string transport;  // "auto", "tcp", "shm" or "ucx" (Note [Transport choice])
  AlgorithmSelector selector;
  // Piece size of the pipelined and segmented algorithms and slot size of the node workspace;
  // 0 ("auto") until AgreeOnTuning fills them in (Note [Sizes when ranks outnumber cores]).
  size_t piece_bytes = 0;
  size_t slot_bytes = 0;
  // PADDLE_TUNING_PARAMS's file, read when no algorithm is forced; rank 0 picks its link for the
  // transport in AgreeOnTuning (Note [Tuned allreduce]).
  std::shared_ptr<const TuningParams> tuning_params;

  // Whether ranks on one host share a node workspace: not with transport=tcp.
  bool shared_memory() const { return transport != "tcp"; }

  // "transport=auto algorithm=auto piece_bytes=auto slot_bytes=524288": what
  // rank 0 publishes.
  std::string Describe() const {
    auto size = [](size_t bytes) { return bytes == 0 ? std::string("auto") : absl::StrCat(bytes); };
    return absl::StrCat("transport=", transport, " algorithm=",
                        selector.forced().has_value() ? AlgorithmName(*selector.forced()) : "auto",
                        " piece_bytes=", size(piece_bytes), " slot_bytes=", size(slot_bytes));
  }
};

// What rank 0 chooses for its group from its own host (Note [Sizes when ranks outnumber cores]
// in the .cc): piece and slot sizes and the allreduce table.
struct HostTuning {
  size_t piece_bytes = 0;
  size_t slot_bytes = 0;
  AllreduceTable allreduce_table = AllreduceTable::kCorePerRank;
};

// The automatic choice for `local_size` ranks on a host whose ranks may use `cores` cores.
HostTuning AutomaticTuning(int local_size, int cores);

// Fills in what `settings` leaves automatic (piece and slot sizes; the allreduce table unless an
// algorithm is forced): rank 0 chooses (AutomaticTuning for its host's local size and its cores)
// and publishes its choice under `key`; the other ranks read it, so every rank cuts messages and
// picks algorithms alike even when hosts differ. With `settings->tuning_params`, rank 0 also
// publishes the link the selector follows (Note [Tuned allreduce]). Errors name the key; a
// missing key fails after `timeout`.
absl::Status AgreeOnTuning(Store* store, const std::string& key, int rank, int world_size,
                           int local_size, absl::Duration timeout, Settings* settings);

// From `options`, then PADDLE_TRANSPORT, PADDLE_ALGO, PADDLE_PIECE_BYTES,
// PADDLE_SHM_SLOT_BYTES and PADDLE_TUNING_PARAMS (its file read and checked here); kInvalidArgument
// naming the option or variable that is wrong.
absl::StatusOr<Settings> ResolveSettings(const CommunicatorOptions& options);

// The transport `settings` choose for `topology` (Note [Transport choice]).
absl::StatusOr<std::unique_ptr<Transport>> CreateGroupTransport(const Settings& settings,
                                                                const Topology& topology,
                                                                const TransportOptions& options);

}  // namespace paddle

#endif  // PADDLE_COLLECTIVE_BACKENDS_NATIVE_COMMUNICATOR_SETTINGS_H_
