// What the CPU we run on can do, detected once. Kernels compile their vector paths with
// __attribute__((target(...))) and pick them at run time from these flags, so one binary runs on
// any x86_64 and still uses AVX2/F16C/FMA where they exist.
#ifndef PADDLE_CORE_CPU_FEATURES_H_
#define PADDLE_CORE_CPU_FEATURES_H_

namespace paddle {

struct CpuFeatures {
  bool avx2 = false;  // includes the OS saving YMM state
  bool f16c = false;
  bool fma = false;
  bool avx512f = false;
};

// Detected at the first call; cheap afterwards. PADDLE_CPU_BASELINE=1 in the environment reports
// a baseline x86-64 CPU (no AVX2/F16C/FMA/AVX-512), forcing the portable kernels: for comparing
// paths, and for testing what a CPU without these extensions would run.
const CpuFeatures& GetCpuFeatures();

// The cores this process may run on (its affinity mask, so a cpuset or taskset counts), at least 1.
int CoresAvailable();

}  // namespace paddle

#endif  // PADDLE_CORE_CPU_FEATURES_H_
