// CPU feature detection: PADDLE_CPU_BASELINE (Note [Environment settings] in paddle/core/env.h).
// Detection runs once per process, so each case runs in a death-test child, which re-executes
// this binary and detects afresh.
#include "paddle/core/cpu_features.h"

#include <cstdlib>

#include "gtest/gtest.h"

namespace paddle {
namespace {

TEST(CpuFeaturesTest, CoresAvailable) { EXPECT_GE(CoresAvailable(), 1); }

TEST(CpuFeaturesDeathTest, BaselineReportsNoExtensions) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  setenv("PADDLE_CPU_BASELINE", "true", 1);
  EXPECT_EXIT(
      {
        const CpuFeatures& f = GetCpuFeatures();
        std::exit(f.avx2 || f.f16c || f.fma || f.avx512f ? 1 : 0);
      },
      testing::ExitedWithCode(0), "");
  unsetenv("PADDLE_CPU_BASELINE");
}

// The flag is read where no Status can be returned: a malformed value aborts, naming it, rather
// than silently running the vector kernels.
TEST(CpuFeaturesDeathTest, MalformedBaselineAbortsNamingTheVariable) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  setenv("PADDLE_CPU_BASELINE", "yes please", 1);
  EXPECT_DEATH(GetCpuFeatures(), "PADDLE_CPU_BASELINE=\"yes please\" is not a boolean");
  unsetenv("PADDLE_CPU_BASELINE");
}

}  // namespace
}  // namespace paddle
