// BucketAssigner: which parameters share a gradient bucket, and in what order buckets are reduced.
//
// The reducer (reducer.h) packs parameters' gradients into flat buckets and allreduces a bucket as
// soon as all of its gradients are ready, overlapping communication with the rest of the backward
// pass. Gradients become ready in reverse order of the forward pass, which is roughly reverse
// registration order, so the first layout walks the parameters backwards; after the first
// iteration the reducer rebuilds the layout once from the order actually observed.
//
// Note [Bucket caps]: bucket 0 is capped at `first_bucket_bytes` (small, so the first allreduce
// starts early in the backward pass) and later buckets at `bucket_bytes` (large, so per-collective
// latency is amortized). A bucket never exceeds its cap unless it holds a single parameter larger
// than the cap, which then gets a bucket of its own. A bucket holds one dtype: a change of dtype
// in the order closes the current bucket (a bucket is one flat tensor, reduced by one call).
#ifndef PADDLE_PARALLEL_REDUCER_BUCKET_ASSIGNER_H_
#define PADDLE_PARALLEL_REDUCER_BUCKET_ASSIGNER_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "paddle/core/dtype.h"

namespace paddle {

struct BucketParam {
  int64_t bytes = 0;
  DType dtype = DType::kFloat32;
};

struct BucketCaps {
  int64_t first_bucket_bytes = int64_t{1} << 20;
  int64_t bucket_bytes = int64_t{25} << 20;
};

// Buckets in reduction order; each lists indices into `params` in the order they are laid out.
using BucketLayout = std::vector<std::vector<int64_t>>;

// Walks `params` (given in registration order) from last to first.
absl::StatusOr<BucketLayout> AssignBuckets(absl::Span<const BucketParam> params, BucketCaps caps);

// Walks `params` in `order`, a permutation of their indices (the order gradients became ready).
absl::StatusOr<BucketLayout> AssignBucketsInOrder(absl::Span<const BucketParam> params,
                                                  absl::Span<const int64_t> order, BucketCaps caps);

}  // namespace paddle

#endif  // PADDLE_PARALLEL_REDUCER_BUCKET_ASSIGNER_H_
