// Thread count of the CPU kernels.
//
// The kernels use two thread pools: OpenBLAS's (GEMM), the OpenMP runtime's (oneDNN is built
// with OpenMP, and our elementwise loops use it too). SetNumThreads sets both so that one knob
// controls the whole process. Results are bitwise reproducible for a fixed thread count.
#ifndef PADDLE_OPS_CPU_THREADING_H_
#define PADDLE_OPS_CPU_THREADING_H_

namespace paddle {
namespace ops {
namespace cpu {

// n >= 1; values below 1 are treated as 1.
void SetNumThreads(int n);
int NumThreads();

}  // namespace cpu
}  // namespace ops
}  // namespace paddle

#endif  // PADDLE_OPS_CPU_THREADING_H_
