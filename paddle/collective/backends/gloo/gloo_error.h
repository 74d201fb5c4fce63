// Gloo's exceptions turned into absl::Status with the context a user needs.
//
// Gloo reports every failure by throwing (gloo::IoException for a peer that closed or a timeout,
// gloo::EnforceNotMet for a refused call), with text that names a socket address but no rank,
// operation or sequence number ("Read error [127.0.0.1]:1956: Connection reset by peer", "Timed
// out waiting 5000ms for recv operation to complete"). Every call into Gloo goes through
// CallGloo, which catches whatever it throws, keeps Gloo's own text, and adds this rank, the peer
// (found by the address Gloo printed), the operation, its sequence number, the bytes, the time
// waited against the timeout, and what to change. Note [Gloo errors] in gloo_error.cc lists the
// mapping to canonical codes.
#ifndef PADDLE_COLLECTIVE_BACKENDS_GLOO_GLOO_ERROR_H_
#define PADDLE_COLLECTIVE_BACKENDS_GLOO_GLOO_ERROR_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/time/time.h"
#include "paddle/core/deadline.h"

namespace paddle {

// The addresses under which Gloo's messages on one rank may name each peer: names[r] for peer r,
// the address of r's end of our connection first (Note [Gloo peer addresses]).
using GlooPeerNames = std::vector<std::vector<std::string>>;

// Who is calling Gloo for what, for the error message.
struct GlooCallInfo {
  int rank = -1;
  int world_size = 0;
  std::string op;    // "allreduce (float32 x 1024, sum)", "connect"
  int64_t seq = -1;  // -1: none
  int64_t bytes = -1;
  int peer = -1;  // the peer of a send/recv; collectives find it from Gloo's text
  absl::Duration timeout;
  TimeoutKind timeout_kind = TimeoutKind::kCollective;
  // How Gloo names each peer in its messages ("[10.0.0.2]:4711"); may be null.
  const GlooPeerNames* peer_names = nullptr;
};

// Runs `call`; returns OK, or the Status for what it threw (Note [Gloo errors]).
absl::Status CallGloo(const GlooCallInfo& info, absl::FunctionRef<void()> call);

}  // namespace paddle

#endif  // PADDLE_COLLECTIVE_BACKENDS_GLOO_GLOO_ERROR_H_
