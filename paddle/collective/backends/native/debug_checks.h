// Cross-rank checks of collective calls: the native communicator's debug mode.
//
// Note [Collective debug checks]
// A collective that ranks call with different arguments (another count, dtype, root or reduce op,
// or another operation altogether) usually hangs, or worse, completes with garbage. With
// PADDLE_DEBUG_CHECKS=1 (or CommunicatorOptions::debug_checks) the native communicator first runs
// this check, on its operation thread, before every collective:
//   1. every rank encodes a fixed-size fingerprint of its call (kind, dtype, count, reduce op,
//      root, sequence number, a hash of any count vector, and whether the call failed this
//      rank's own argument checks) for each peer (alltoallv adds what it sends to and expects
//      from that peer);
//   2. it posts a receive from, and a send to, every other rank, all with one control tag (bit 63
//      set, Note [Message tags]); the tag holds no sequence number, so the k-th check of one rank
//      meets the k-th check of every other rank even when their sequence numbers have drifted,
//      which the check then reports instead of timing out;
//   3. it compares: all ranks must describe the same call; for alltoallv, what each peer sends
//      this rank must be what this rank expects from it, and the other way round;
//   4. it sends its verdict (one byte: agree or not) to every other rank, on the next tag, and
//      receives theirs.
// Every rank sees every fingerprint, so a mismatch fails on every rank with the same message,
// naming which ranks passed what; the verdicts tell the ranks that saw no problem themselves
// (alltoallv: the ranks outside a mismatched pair) to fail too. Because no rank leaves the check
// before every rank has read all fingerprints, a disagreement needs no abort: every rank fails
// the call with kInvalidArgument, consumes no other message, and the communicator stays usable,
// as after an argument error. Each rank sends 2(n-1) small messages per collective, so the check
// is for debugging, not for production runs; without it the always-on stamps of Note [Agreement
// check] (paddle/collective/call_stamp.h) still turn a mismatch into an error, but only the ranks
// that exchange data with a mismatched rank see both calls. Point-to-point operations are not
// checked. The
// communicators of all ranks must agree on the mode (checked when they are created).
#ifndef PADDLE_COLLECTIVE_BACKENDS_NATIVE_DEBUG_CHECKS_H_
#define PADDLE_COLLECTIVE_BACKENDS_NATIVE_DEBUG_CHECKS_H_

#include <cstdint>

#include "absl/status/status.h"
#include "paddle/collective/backends/native/collective_call.h"
#include "paddle/collective/transport/transport.h"
#include "paddle/core/deadline.h"

namespace paddle {

// Exchanges `call`'s fingerprint (operation `seq`) with every other rank of `transport` on
// `tag` (and the verdicts on `tag` + 1), within `deadline`, and compares them. `call_valid` is
// false when this rank's own argument checks rejected the call (it still takes part, so that the
// other ranks learn it). OK if all ranks agree. A disagreement is kInvalidArgument naming the
// ranks and their calls, with the transport intact. A failed or timed-out exchange is the
// transport's error (never kInvalidArgument) with rank, peer and operation context, and the
// transport is then aborted.
absl::Status CheckCallAcrossRanks(Transport& transport, uint64_t tag, const CollectiveCall& call,
                                  uint64_t seq, bool call_valid, const Deadline& deadline);

}  // namespace paddle

#endif  // PADDLE_COLLECTIVE_BACKENDS_NATIVE_DEBUG_CHECKS_H_
