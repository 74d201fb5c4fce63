// Thread count of the CPU kernels: OpenBLAS and OpenMP together.
#include "paddle/ops/cpu/threading.h"

#include <omp.h>

#include <algorithm>

extern "C" {
void openblas_set_num_threads(int num_threads);
}

namespace paddle {
namespace ops {
namespace cpu {

void SetNumThreads(int n) {
  n = std::max(n, 1);
  openblas_set_num_threads(n);
  omp_set_num_threads(n);
}

int NumThreads() { return omp_get_max_threads(); }

}  // namespace cpu
}  // namespace ops
}  // namespace paddle
