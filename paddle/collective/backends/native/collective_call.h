// CollectiveCall: what one rank asked its communicator to do, in the terms that every rank of the
// group must agree on (the kind of operation, dtype, element counts, root, reduce op).
//
// The native communicator builds one per call. It names the operation in Work::Describe(), in
// errors and logs ("allreduce #17 (float32 x 1048576, sum)"), and it is what the debug checks
// (debug_checks.h) compare across ranks before an operation runs, and what its CallStamp (Note
// [Agreement check]) summarises.
#ifndef PADDLE_COLLECTIVE_BACKENDS_NATIVE_COLLECTIVE_CALL_H_
#define PADDLE_COLLECTIVE_BACKENDS_NATIVE_COLLECTIVE_CALL_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "paddle/collective/call_stamp.h"
#include "paddle/collective/reduction.h"
#include "paddle/core/dtype.h"

namespace paddle {

// Point-to-point operations involve two ranks only, so they are numbered apart from the
// collectives (whose sequence numbers must be the same on every rank).
constexpr bool IsPointToPoint(OpKind kind) {
  return kind == OpKind::kSend || kind == OpKind::kRecv;
}

struct CollectiveCall {
  OpKind kind = OpKind::kBarrier;
  bool has_dtype = false;  // barrier and split move no tensor
  DType dtype = DType::kFloat32;
  // Elements: of the tensor (allreduce, broadcast, reduce, send, recv); of each rank's block
  // (allgather input, reduce_scatter output, alltoall block); of the whole output (allgatherv) or
  // input (alltoallv).
  int64_t count = 0;
  bool has_op = false;
  ReduceOp op = ReduceOp::kSum;
  int root = -1;     // broadcast and reduce: the root; send and recv: the peer
  uint32_t tag = 0;  // send and recv
  // allgatherv: per-rank counts; alltoallv: send counts; split: the new group's ranks.
  std::vector<int64_t> counts;
  std::vector<int64_t> recv_counts;  // alltoallv

  // "allreduce #17 (float32 x 1048576, sum)", "send #3 (float32 x 10 to rank 2, tag 7)".
  std::string Describe(uint64_t seq) const;
  // The same without the sequence number: "allreduce (float32 x 1048576, sum)".
  std::string Describe() const;
  // What the ranks compare by default (Note [Agreement check]); alltoallv's pair counts are
  // filled in per peer by the AlgorithmContext.
  CallStamp Stamp(uint64_t seq) const;
};

// "[1, 2, 3]", shortened to the first and last few entries when long.
std::string CountsToString(const std::vector<int64_t>& counts);

}  // namespace paddle

#endif  // PADDLE_COLLECTIVE_BACKENDS_NATIVE_COLLECTIVE_CALL_H_
