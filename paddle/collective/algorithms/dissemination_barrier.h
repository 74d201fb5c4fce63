// Dissemination barrier: no rank leaves until every rank has entered, in ceil(log2 n) rounds of
// one-byte messages and with no root (Hensgen, Finkel and Manber, 1988).
#ifndef PADDLE_COLLECTIVE_ALGORITHMS_DISSEMINATION_BARRIER_H_
#define PADDLE_COLLECTIVE_ALGORITHMS_DISSEMINATION_BARRIER_H_

#include "absl/status/status.h"
#include "paddle/collective/algorithms/algorithm_context.h"

namespace paddle {

// Returns once every rank of ctx's transport has called it (with the same seq). Uses steps
// 0..ceil(log2 n)-1.
absl::Status DisseminationBarrier(const AlgorithmContext& ctx);

}  // namespace paddle

#endif  // PADDLE_COLLECTIVE_ALGORITHMS_DISSEMINATION_BARRIER_H_
