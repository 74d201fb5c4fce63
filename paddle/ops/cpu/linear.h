// Fully connected layer, y = x w^T + b, PyTorch's nn.Linear convention (w is [out, in]).
#ifndef PADDLE_OPS_CPU_LINEAR_H_
#define PADDLE_OPS_CPU_LINEAR_H_

#include "absl/status/statusor.h"
#include "paddle/core/tensor.h"

namespace paddle {
namespace ops {
namespace cpu {

// x [N, in], w [out, in], b [out] or nullptr; returns y [N, out].
absl::StatusOr<Tensor> LinearForward(const Tensor& x, const Tensor& w, const Tensor* b);

struct LinearGrads {
  Tensor dx;  // [N, in]; undefined unless need_dx
  Tensor dw;  // [out, in]
  Tensor db;  // [out]; undefined unless need_db
};
// dy [N, out]. db sums dy over N in row order (deterministic for any thread count).
absl::StatusOr<LinearGrads> LinearBackward(const Tensor& x, const Tensor& w, const Tensor& dy,
                                           bool need_dx, bool need_db);

// db[j] = sum_i dy[i, j] for a contiguous dy [rows, cols], accumulated in row order.
void SumRows(const float* dy, int64_t rows, int64_t cols, float* db);

}  // namespace cpu
}  // namespace ops
}  // namespace paddle

#endif  // PADDLE_OPS_CPU_LINEAR_H_
