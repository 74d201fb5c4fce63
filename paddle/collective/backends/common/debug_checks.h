// Cross-rank checks of collective calls: the debug mode of every backend, over a PeerExchange
// (DebugCheckCommunicator's own TCP transport; Gloo's buffers carry its always-on stamps).
//
// Note [Collective debug checks]
// A collective that ranks call with different arguments (another count, dtype, root or reduce op,
// or another operation altogether) usually hangs, or worse, completes with garbage. With
// PADDLE_DEBUG_CHECKS=1 (or CommunicatorOptions::debug_checks) Communicator::Create puts a
// DebugCheckCommunicator (debug_check_communicator.h) over the backend, which runs this check on
// the caller's thread before every collective and Split:
//   1. every rank encodes a fixed-size fingerprint of its call (kind, dtype, count, reduce op,
//      root, sequence number, a hash of any count vector, and whether the call failed this
//      rank's own argument checks) for each peer (alltoallv adds what it sends to and expects
//      from that peer);
//   2. it sends it to, and receives one from, every other rank over the check channel, a TCP
//      transport of its own beside the backend's links; the tag holds no sequence number, so the
//      k-th check of one rank meets the k-th check of every other rank even when their sequence
//      numbers have drifted, which the check then reports instead of timing out;
//   3. it compares: all ranks must describe the same call; for alltoallv, what each peer sends
//      this rank must be what this rank expects from it, and the other way round;
//   4. it sends its verdict (one byte: agree or not) to every other rank, in a second round, and
//      receives theirs.
// Every rank sees every fingerprint, so a mismatch fails on every rank with the same message,
// naming which ranks passed what; the verdicts tell the ranks that saw no problem themselves
// (alltoallv: the ranks outside a mismatched pair) to fail too. Because no rank leaves the check
// before every rank has read all fingerprints, a disagreement needs no abort: every rank fails
// the call with kInvalidArgument, consumes no other message, the call reaches no backend, and
// the communicator stays usable, as after an argument error. Each rank sends 2(n-1) small
// messages per collective and waits for every rank to make its call, so the check is for
// debugging, not for production runs; without it the always-on stamps of Note [Agreement check]
// (paddle/collective/call_stamp.h) still turn a mismatch into an error, but only the ranks that
// exchange data with a mismatched rank see both calls. Point-to-point operations are not
// checked. The communicators of all ranks must agree on the mode (checked when they are created:
// Note [Debug checks on every rank] in paddle/collective/communicator.cc).
#ifndef PADDLE_COLLECTIVE_BACKENDS_COMMON_DEBUG_CHECKS_H_
#define PADDLE_COLLECTIVE_BACKENDS_COMMON_DEBUG_CHECKS_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "paddle/collective/backends/common/collective_call.h"
#include "paddle/collective/transport/transport.h"
#include "paddle/core/deadline.h"

namespace paddle {

// The narrow channel the check needs: rounds of one fixed-size message to and from every peer.
class PeerExchange {
 public:
  virtual ~PeerExchange() = default;
  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  // Round `round` (0: fingerprints, 1: verdicts): sends out[p] to and receives (*in)[p] from every
  // other rank p, `bytes` each, within `deadline`. A failure is the channel's error with rank,
  // peer and operation context, never kInvalidArgument; the channel is then aborted, and it is
  // done with the buffers when this returns. `what` names the message in errors.
  virtual absl::Status ExchangeWithAll(int round, const char* what, size_t bytes,
                                       const std::vector<std::vector<uint8_t>>& out,
                                       std::vector<std::vector<uint8_t>>* in,
                                       const CollectiveCall& call, uint64_t seq,
                                       const Deadline& deadline) = 0;
};

// A PeerExchange over `transport`, round r on tag `tag` + r.
class TransportExchange final : public PeerExchange {
 public:
  TransportExchange(Transport& transport, uint64_t tag) : transport_(transport), tag_(tag) {}
  int rank() const override { return transport_.rank(); }
  int world_size() const override { return transport_.world_size(); }
  absl::Status ExchangeWithAll(int round, const char* what, size_t bytes,
                               const std::vector<std::vector<uint8_t>>& out,
                               std::vector<std::vector<uint8_t>>* in, const CollectiveCall& call,
                               uint64_t seq, const Deadline& deadline) override;

 private:
  Transport& transport_;
  const uint64_t tag_;
};

// Exchanges `call`'s fingerprint (operation `seq`) with every other rank of `exchange`, within
// `deadline`, and compares them. `call_valid` is false when this rank's own argument checks
// rejected the call (it still takes part, so that the other ranks learn it). OK if all ranks
// agree. A disagreement is kInvalidArgument naming the ranks and their calls, with the channel
// intact. A failed or timed-out exchange is the channel's error (never kInvalidArgument).
absl::Status CheckCallAcrossRanks(PeerExchange& exchange, const CollectiveCall& call, uint64_t seq,
                                  bool call_valid, const Deadline& deadline);

}  // namespace paddle

#endif  // PADDLE_COLLECTIVE_BACKENDS_COMMON_DEBUG_CHECKS_H_
