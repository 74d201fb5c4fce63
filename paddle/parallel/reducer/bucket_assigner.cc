// Greedy bucketing along a given order; see Note [Bucket caps] in bucket_assigner.h.
#include "paddle/parallel/reducer/bucket_assigner.h"

#include "absl/strings/str_cat.h"

namespace paddle {

absl::StatusOr<BucketLayout> AssignBuckets(absl::Span<const BucketParam> params, BucketCaps caps) {
  std::vector<int64_t> order(params.size());
  for (size_t i = 0; i < params.size(); ++i) {
    order[i] = static_cast<int64_t>(params.size() - 1 - i);
  }
  return AssignBucketsInOrder(params, order, caps);
}

absl::StatusOr<BucketLayout> AssignBucketsInOrder(absl::Span<const BucketParam> params,
                                                  absl::Span<const int64_t> order,
                                                  BucketCaps caps) {
  if (caps.first_bucket_bytes <= 0 || caps.bucket_bytes <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("bucket caps must be positive: first_bucket_bytes=", caps.first_bucket_bytes,
                     ", bucket_bytes=", caps.bucket_bytes));
  }
  const int64_t n = static_cast<int64_t>(params.size());
  if (static_cast<int64_t>(order.size()) != n) {
    return absl::InvalidArgumentError(
        absl::StrCat("the bucket order has ", order.size(), " entries for ", n, " parameters"));
  }
  std::vector<bool> seen(params.size(), false);
  for (int64_t index : order) {
    if (index < 0 || index >= n) {
      return absl::InvalidArgumentError(
          absl::StrCat("the bucket order names parameter ", index, ", outside [0, ", n, ")"));
    }
    if (seen[index]) {
      return absl::InvalidArgumentError(
          absl::StrCat("the bucket order names parameter ", index, " twice"));
    }
    seen[index] = true;
    if (params[index].bytes < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("parameter ", index, " has ", params[index].bytes, " bytes"));
    }
  }

  BucketLayout layout;
  std::vector<int64_t> current;
  int64_t current_bytes = 0;
  auto close = [&] {
    if (current.empty()) return;
    layout.push_back(std::move(current));
    current.clear();
    current_bytes = 0;
  };
  for (int64_t index : order) {
    const BucketParam& p = params[index];
    const int64_t cap = layout.empty() ? caps.first_bucket_bytes : caps.bucket_bytes;
    if (!current.empty() &&
        (params[current.front()].dtype != p.dtype || current_bytes + p.bytes > cap)) {
      close();
    }
    current.push_back(index);
    current_bytes += p.bytes;
  }
  close();
  return layout;
}

}  // namespace paddle
