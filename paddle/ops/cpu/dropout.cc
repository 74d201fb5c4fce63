// Dropout: mask words drawn a Philox block (four words) at a time.
#include "paddle/ops/cpu/dropout.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "paddle/core/philox.h"
#include "paddle/core/status.h"
#include "paddle/ops/cpu/op_checks.h"

namespace paddle {
namespace ops {
namespace cpu {
namespace {

absl::Status CheckP(const char* op, double p) {
  if (!(p >= 0.0 && p < 1.0)) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": p = ", p, " must be in [0, 1)"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<DropoutResult> DropoutForward(const Tensor& x, double p, uint64_t seed,
                                             uint64_t stream, uint64_t offset) {
  constexpr const char* kOp = "DropoutForward";
  RETURN_IF_ERROR(internal::CheckTensor(kOp, "x", x, DType::kFloat32));
  RETURN_IF_ERROR(CheckP(kOp, p));
  ASSIGN_OR_RETURN(Tensor xd, internal::Dense(x));
  DropoutResult r;
  ASSIGN_OR_RETURN(r.y, internal::EmptyLike(xd, DType::kFloat32));
  ASSIGN_OR_RETURN(r.mask, internal::EmptyLike(xd, DType::kUInt8));
  // p < 1, so the threshold fits in 32 bits after the floor.
  const auto threshold = static_cast<uint64_t>(std::floor(p * 4294967296.0));
  const float scale = static_cast<float>(1.0 / (1.0 - p));
  const float* xp = xd.data<float>();
  float* yp = r.y.data<float>();
  uint8_t* mp = r.mask.data<uint8_t>();
  const int64_t n = xd.numel();
  const Philox philox(seed, stream);
  // Chunks of whole Philox blocks, so each chunk computes each of its blocks once.
  constexpr int64_t kChunk = 4096;
  const int64_t chunks = (n + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static) if (n > internal::kParallelGrain)
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t end = std::min(n, (c + 1) * kChunk);
    uint64_t block_index = ~uint64_t{0};
    Philox::Block block{};
    for (int64_t i = c * kChunk; i < end; ++i) {
      const uint64_t word = offset + static_cast<uint64_t>(i);
      if (word / 4 != block_index) {
        block_index = word / 4;
        block = philox.BlockAt(block_index);
      }
      const bool keep = block[word % 4] >= threshold;
      mp[i] = keep ? 1 : 0;
      yp[i] = keep ? xp[i] * scale : 0.0f;
    }
  }
  return r;
}

absl::StatusOr<Tensor> DropoutBackward(const Tensor& mask, const Tensor& dy, double p) {
  constexpr const char* kOp = "DropoutBackward";
  RETURN_IF_ERROR(internal::CheckTensor(kOp, "mask", mask, DType::kUInt8));
  RETURN_IF_ERROR(internal::CheckTensor(kOp, "dy", dy, DType::kFloat32));
  RETURN_IF_ERROR(internal::CheckSameShape(kOp, "mask", mask, "dy", dy));
  RETURN_IF_ERROR(CheckP(kOp, p));
  ASSIGN_OR_RETURN(Tensor md, internal::Dense(mask));
  ASSIGN_OR_RETURN(Tensor dyd, internal::MatchLayout(dy, md));
  ASSIGN_OR_RETURN(Tensor dx, internal::EmptyLike(md, DType::kFloat32));
  const float scale = static_cast<float>(1.0 / (1.0 - p));
  const uint8_t* mp = md.data<uint8_t>();
  const float* gp = dyd.data<float>();
  float* dp = dx.data<float>();
  const int64_t n = md.numel();
#pragma omp parallel for simd schedule(static) if (n > internal::kParallelGrain)
  for (int64_t i = 0; i < n; ++i) dp[i] = mp[i] != 0 ? gp[i] * scale : 0.0f;
  return dx;
}

}  // namespace cpu
}  // namespace ops
}  // namespace paddle
