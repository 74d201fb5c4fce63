// Sums of squares for the trust ratios of LARS and LAMB, accumulated in double.
//
// Note [Deterministic vectorized norms]: a plain `sum += x * x` loop is not vectorized without
// -ffast-math, because vectorizing reorders the additions. Here the additions are reordered by
// hand, in a fixed way: kLanes independent partial sums over interleaved elements, combined in a
// fixed tree at the end. The compiler can then keep the partial sums in vector registers, and the
// result depends only on the data and its length, never on the machine, thread count or flags.
#ifndef PADDLE_OPTIM_NORM_H_
#define PADDLE_OPTIM_NORM_H_

#include <cstdint>

namespace paddle::optim {

constexpr int kLanes = 8;

// Partial sums in the fixed order of Note [Deterministic vectorized norms].
struct LaneSums {
  double lane[kLanes] = {};

  double Total() const {
    return ((lane[0] + lane[1]) + (lane[2] + lane[3])) +
           ((lane[4] + lane[5]) + (lane[6] + lane[7]));
  }
};

// sum(a[i]^2) into *sa and sum(b[i]^2) into *sb, in one pass.
template <typename T>
void SumSquares2(const T* a, const T* b, int64_t n, double* sa, double* sb) {
  LaneSums la;
  LaneSums lb;
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int j = 0; j < kLanes; ++j) {
      const double x = a[i + j];
      const double y = b[i + j];
      la.lane[j] += x * x;
      lb.lane[j] += y * y;
    }
  }
  for (int j = 0; i < n; ++i, ++j) {
    const double x = a[i];
    const double y = b[i];
    la.lane[j] += x * x;
    lb.lane[j] += y * y;
  }
  *sa = la.Total();
  *sb = lb.Total();
}

}  // namespace paddle::optim

#endif  // PADDLE_OPTIM_NORM_H_
