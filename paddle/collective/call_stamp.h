// CallStamp: the fixed-size record of what one rank asked a collective to do, which every
// backend compares across ranks by default (Note [Agreement check]).
//
// Note [Agreement check]
// Ranks that call one collective with different arguments (another element count, dtype of the
// same size, root or reduce op, or another operation altogether) must fail, not return garbage,
// hang or crash. The full cross-rank comparison (Note [Collective debug checks]) costs 2(n-1)
// messages per operation, so it is opt-in; this check is always on and costs next to nothing
// because the stamp rides along with messages the operation exchanges anyway:
//   - over a transport (AlgorithmContext): before the first message an algorithm sends to a peer
//     in an operation, the context sends that peer this rank's stamp (kAgreementTag, 48 bytes;
//     Channel::SendPair hands both to the wire together, one sendmsg over TCP);
//     before the first message received from a peer is used, the context waits for that peer's
//     stamp (it left first on the same link, so it is already there) and compares. A receiver
//     that finds a mismatch fails and poisons the transport before it reduces or forwards the
//     peer's data, so every rank whose result depends on the mismatched data fails too: directly,
//     or because its own sender stopped (the poison cause, naming the mismatch, reaches it);
//   - over the node workspace (shm_collectives.cc): in every round a rank writes its stamp next to
//     its slot before it posts the slot's data, and every reader compares the stamp of each slot
//     it reads; one memcmp per peer per round;
//   - Gloo (gloo_communicator.cc): Gloo's messages cannot carry extra bytes and Gloo aborts the
//     process on a size mismatch, so the ranks exchange stamps with every peer (one round of tiny
//     messages) before the call is handed to Gloo, and all fail alike on a mismatch.
// What must agree: the operation, its sequence number, dtype, element count, root and reduce op,
// and a hash of any count vector every rank passes alike (allgatherv). Where counts legitimately
// differ per rank (alltoallv) the stamp a rank sends to a peer carries what it sends that peer
// and what it expects from it, and the peer checks them crosswise. Stamps that ride with messages
// are compared only by ranks that receive from each other, so over a transport every call also
// sends its stamp around the ring of all ranks (Note [Ring stamp] in
// algorithms/algorithm_context.h), compared when it has arrived and never waited for on the fast
// path: that catches a rank that moves no data (an empty tensor) and calls whose message
// patterns wait on each other in a cycle that crosses no mismatched pair (three ranks over TCP:
// a broadcast from rank 1 against a recursive-doubling allreduce), which otherwise ended at the
// timeout. A call that every rank completes (roots that differ in a ring broadcast) may return
// before the ring stamp is compared; one of the next calls fails then, and after a job's last
// call Communicator::Shutdown returns it. On the node workspace an empty call takes one round
// that only compares stamps. Point-to-point calls are not stamped:
// the transport already checks their sizes. Stamps are raw bytes in host order: every rank runs
// the same build.
#ifndef PADDLE_COLLECTIVE_CALL_STAMP_H_
#define PADDLE_COLLECTIVE_CALL_STAMP_H_

#include <cstdint>
#include <string>
#include <type_traits>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/types/optional.h"
#include "absl/types/span.h"
#include "paddle/collective/reduction.h"
#include "paddle/core/dtype.h"

namespace paddle {

// Stable values: they travel in stamps and debug-check fingerprints. Append, never renumber.
enum class OpKind : uint8_t {
  kAllreduce,
  kBroadcast,
  kReduce,
  kAllgather,
  kAllgatherv,
  kReduceScatter,
  kAlltoall,
  kAlltoallv,
  kBarrier,
  kSend,
  kRecv,
  kSplit,
};

// "allreduce", "reduce_scatter", ...; "invalid" outside the enum.
absl::string_view OpKindName(OpKind kind);
// The inverse of OpKindName; nullopt for any other name.
absl::optional<OpKind> OpKindFromName(absl::string_view name);

struct CallStamp {
  static constexpr uint8_t kNone = 0xff;  // no dtype / no reduce op

  uint64_t seq = 0;
  // Elements every rank must agree on (the tensor, a rank's block, ...); 0 where they differ.
  int64_t count = 0;
  uint64_t counts_hash = 0;  // HashCounts of a count vector every rank passes alike, or 0
  // Alltoallv, per peer: elements this rank sends the peer and expects from it; -1 otherwise.
  int64_t send_count = -1;
  int64_t recv_count = -1;
  int32_t root = -1;
  uint8_t kind = 0;  // an OpKind
  uint8_t dtype = kNone;
  uint8_t op = kNone;
  uint8_t reserved = 0;
};
static_assert(sizeof(CallStamp) == 48, "CallStamp travels as 48 raw bytes");
static_assert(std::is_trivially_copyable<CallStamp>::value, "CallStamp is copied with memcpy");

// FNV-1a over the values.
uint64_t HashCounts(absl::Span<const int64_t> counts);

// "allreduce #7 (float32 x 100, sum)", "alltoallv #3 (int32, sends 4, expects 2)".
std::string DescribeStamp(const CallStamp& stamp);

// Whether `theirs`, received from a peer, describes the same call as `mine` (the stamp this rank
// made for that peer): equal fields, alltoallv's pair counts crosswise.
bool StampsAgree(const CallStamp& mine, const CallStamp& theirs);

// The kInvalidArgument of a disagreement found by `rank`/`world_size` with `peer` (at
// `peer_address`, may be empty): both calls, the hint to fix it. `where` names the path that
// compared ("tcp transport", "node workspace").
absl::Status StampMismatchError(int rank, int world_size, int peer, absl::string_view peer_address,
                                const CallStamp& mine, const CallStamp& theirs,
                                absl::string_view where);

}  // namespace paddle

#endif  // PADDLE_COLLECTIVE_CALL_STAMP_H_
