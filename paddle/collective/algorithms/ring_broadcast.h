// Ring broadcast: a pipelined chain from the root. Every rank receives and forwards the buffer
// once, so for large buffers the time approaches that of one transfer, whatever the world size.
#ifndef PADDLE_COLLECTIVE_ALGORITHMS_RING_BROADCAST_H_
#define PADDLE_COLLECTIVE_ALGORITHMS_RING_BROADCAST_H_

#include <cstdint>

#include "absl/status/status.h"
#include "paddle/collective/algorithms/algorithm_context.h"
#include "paddle/core/dtype.h"

namespace paddle {

// `data` (count elements of `dtype`) of rank `root` is copied into `data` of every rank. Uses
// step 0.
absl::Status RingBroadcast(const AlgorithmContext& ctx, void* data, int64_t count, DType dtype,
                           int root);

}  // namespace paddle

#endif  // PADDLE_COLLECTIVE_ALGORITHMS_RING_BROADCAST_H_
