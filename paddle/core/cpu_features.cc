#include "paddle/core/cpu_features.h"

#include <sched.h>

#include <algorithm>
#include <optional>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

#include "paddle/core/logging.h"
#include "paddle/core/settings.h"

namespace paddle {
namespace {

CpuFeatures Detect() {
  CpuFeatures f;
  // Read once, from kernels that cannot return a Status: a malformed value aborts, naming it.
  absl::StatusOr<std::optional<bool>> baseline = BoolSetting("PADDLE_CPU_BASELINE");
  PADDLE_CHECK(baseline.ok()) << baseline.status().message();
  if (baseline->value_or(false)) return f;
#if defined(__x86_64__) || defined(__i386__)
  // __builtin_cpu_supports checks XGETBV for the vector state; F16C and FMA are read from CPUID
  // leaf 1 (ECX bits 29 and 12) because clang's builtin does not accept "f16c".
  __builtin_cpu_init();
  f.avx2 = __builtin_cpu_supports("avx2");
  f.avx512f = __builtin_cpu_supports("avx512f");
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid(1, &eax, &ebx, &ecx, &edx)) {
    f.f16c = (ecx & bit_F16C) != 0;
    f.fma = (ecx & bit_FMA) != 0;
  }
#endif
  return f;
}

}  // namespace

const CpuFeatures& GetCpuFeatures() {
  static const CpuFeatures features = Detect();
  return features;
}

int CoresAvailable() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return 1;
  return std::max(1, CPU_COUNT(&set));
}

}  // namespace paddle
