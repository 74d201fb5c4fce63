// Tests of the reduction kernels (paddle/collective/reduction.h) against a scalar reference that
// computes in double (integers in uint64_t) and rounds to the element type once. For every path
// this CPU has, every op and every dtype: counts 0, 1, 7, 8, 33 and 1000003 at unaligned offsets
// with guard elements around the output; inputs with zeros of both signs, Inf, NaN, equal pairs
// and wrapping integers. Every output element is compared bit for bit (NaNs: as documented in
// Note [Reduction semantics]). Plus FinishAvg, the aliasing case, names and errors.
#include "paddle/collective/reduction.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "paddle/core/cpu_features.h"
#include "paddle/core/half.h"
#include "paddle/core/philox.h"

namespace paddle {
namespace {

constexpr ReduceOp kAllOps[] = {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMin, ReduceOp::kMax,
                                ReduceOp::kProd};
constexpr int64_t kCounts[] = {0, 1, 7, 8, 33, 1000003};

// ---- Element access in double, for the reference ----

template <typename T>
double ToDouble(T x) {
  if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) {
    return static_cast<float>(x);
  } else {
    return static_cast<double>(x);
  }
}

// Rounds once to T. For Half/BFloat16 the double goes through float first: float has more than
// 2p + 2 bits for both formats, so that double rounding equals a direct one (Figueroa, 1995).
template <typename T>
T FromDouble(double x) {
  if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) {
    return T(static_cast<float>(x));
  } else {
    return static_cast<T>(x);
  }
}

template <typename T>
uint64_t BitsOf(T x) {
  uint64_t bits = 0;
  std::memcpy(&bits, &x, sizeof(T));
  return bits;
}

template <typename T>
constexpr bool kIsFloat = !std::is_integral_v<T>;

// The reference: the exact result in double (or modulo 2^64), rounded once to T.
template <typename T>
T Reference(ReduceOp op, T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    const uint64_t x = static_cast<uint64_t>(static_cast<int64_t>(a));
    const uint64_t y = static_cast<uint64_t>(static_cast<int64_t>(b));
    switch (op) {
      case ReduceOp::kSum:
      case ReduceOp::kAvg:
        return static_cast<T>(x + y);
      case ReduceOp::kProd:
        return static_cast<T>(x * y);
      case ReduceOp::kMin:
        return a < b ? a : b;
      case ReduceOp::kMax:
        return a > b ? a : b;
    }
  } else {
    const double x = ToDouble(a);
    const double y = ToDouble(b);
    switch (op) {
      case ReduceOp::kSum:
      case ReduceOp::kAvg:
        return FromDouble<T>(x + y);
      case ReduceOp::kProd:
        return FromDouble<T>(x * y);
      case ReduceOp::kMin:
      case ReduceOp::kMax: {
        if (std::isnan(x)) return a;
        if (std::isnan(y)) return b;
        if (x == y) {
          // Equal values: only zeros differ, and -0 is the smaller one.
          const bool pick_negative = op == ReduceOp::kMin;
          return std::signbit(x) == pick_negative ? a : b;
        }
        return (op == ReduceOp::kMin) == (x < y) ? a : b;
      }
    }
  }
  return a;
}

// Whether `got` is what Reference promised. NaNs: float32/float64 min/max return the NaN operand
// unchanged; everything else only promises some NaN (16-bit types are quieted by the conversion,
// and IEEE leaves the payload of arithmetic on NaNs to the hardware).
template <typename T>
bool Matches(ReduceOp op, T got, T want) {
  if constexpr (kIsFloat<T>) {
    if (std::isnan(ToDouble(want))) {
      if (!std::isnan(ToDouble(got))) return false;
      const bool exact = (op == ReduceOp::kMin || op == ReduceOp::kMax) && sizeof(T) >= 4;
      return !exact || BitsOf(got) == BitsOf(want);
    }
  }
  return BitsOf(got) == BitsOf(want);
}

template <typename T>
std::string Show(T x) {
  return absl::StrCat(ToDouble(x), " (bits 0x", absl::Hex(BitsOf(x)), ")");
}

// ---- Inputs ----

// Element i of input `which` (0: inout, 1: in) from Philox: mostly finite values across many
// binades, and for floats also +-0, +-Inf, NaN and pairs where in[i] equals inout[i] or its
// negation, so every branch of min/max is hit at every count above a few dozen.
template <typename T>
std::vector<T> MakeInput(uint64_t seed, int which, size_t n, const std::vector<T>* partner) {
  Philox rng(seed, static_cast<uint64_t>(which));
  std::vector<T> v(n);
  for (size_t i = 0; i < n; ++i) {
    const uint32_t r = rng.WordAt(2 * i);
    const uint32_t s = rng.WordAt(2 * i + 1);
    if constexpr (std::is_integral_v<T>) {
      v[i] = static_cast<T>((static_cast<uint64_t>(r) << 32) | s);
    } else {
      const double unit = static_cast<double>(s) / 4294967296.0 - 0.5;
      double x = std::ldexp(unit, static_cast<int>(r % 17) - 8);
      switch (r >> 28) {
        case 0:
          x = (r & 1) ? -0.0 : 0.0;
          break;
        case 1:
          x = (r & 1) ? -std::numeric_limits<double>::infinity()
                      : std::numeric_limits<double>::infinity();
          break;
        case 2:
          x = std::numeric_limits<double>::quiet_NaN();
          break;
        case 3:
          if (partner != nullptr) x = (r & 1) ? -ToDouble((*partner)[i]) : ToDouble((*partner)[i]);
          break;
        case 4:
          x = static_cast<double>(static_cast<int>(r % 9) - 4);
          break;
        default:
          break;
      }
      v[i] = FromDouble<T>(x);
    }
  }
  return v;
}

// ---- The sweep ----

class ReduceTest : public ::testing::TestWithParam<ReducePath> {
 protected:
  void SetUp() override {
    if (!ReducePathAvailable(GetParam())) {
      GTEST_SKIP() << "path " << ReducePathName(GetParam())
                   << " not available: this CPU lacks AVX2/F16C/FMA; it runs on any x86-64 CPU "
                      "with them, such as the CI machine's";
    }
  }

  // Checks one (op, count, offsets) case: inout at element offset `out_offset` and in at
  // `in_offset` of their buffers, guard elements around inout unchanged, in unchanged.
  template <typename T>
  void CheckCase(ReduceOp op, const std::vector<T>& a, const std::vector<T>& b, size_t count,
                 size_t out_offset, size_t in_offset) {
    constexpr size_t kGuard = 9;
    const T guard = FromDouble<T>(77);
    std::vector<T> out(out_offset + count + kGuard, guard);
    std::vector<T> in(in_offset + count, guard);
    // std::copy, not memcpy: with count 0 a vector's data() may be null.
    std::copy(a.begin(), a.begin() + count, out.begin() + out_offset);
    std::copy(b.begin(), b.begin() + count, in.begin() + in_offset);
    ASSERT_TRUE(Reduce(out.data() + out_offset, in.data() + in_offset, static_cast<int64_t>(count),
                       DTypeOf<T>::value, op, GetParam())
                    .ok());
    int bad = 0;
    for (size_t i = 0; i < count && bad < 5; ++i) {
      const T want = Reference(op, a[i], b[i]);
      const T got = out[out_offset + i];
      if (!Matches(op, got, want)) {
        ++bad;
        ADD_FAILURE() << DTypeName(DTypeOf<T>::value) << " " << ReduceOpName(op) << " count "
                      << count << " offsets " << out_offset << "/" << in_offset << " element " << i
                      << ": " << Show(a[i]) << " op " << Show(b[i]) << " gave " << Show(got)
                      << ", want " << Show(want);
      }
    }
    for (size_t i = 0; i < out_offset; ++i) ASSERT_EQ(BitsOf(out[i]), BitsOf(guard)) << i;
    for (size_t i = out_offset + count; i < out.size(); ++i) {
      ASSERT_EQ(BitsOf(out[i]), BitsOf(guard)) << "guard after the output clobbered at " << i;
    }
    ASSERT_TRUE(std::equal(b.begin(), b.begin() + count, in.begin() + in_offset, [](T x, T y) {
      return BitsOf(x) == BitsOf(y);
    })) << "input modified";
  }

  template <typename T>
  void Sweep() {
    const DType dtype = DTypeOf<T>::value;
    const size_t max_count = static_cast<size_t>(kCounts[std::size(kCounts) - 1]);
    const std::vector<T> a = MakeInput<T>(42, 0, max_count, nullptr);
    const std::vector<T> b = MakeInput<T>(42, 1, max_count, &a);
    for (ReduceOp op : kAllOps) {
      if (!CheckReduction(dtype, op).ok()) continue;  // integer avg: see ErrorsTest
      for (int64_t count : kCounts) {
        // Offsets of 0..3 elements put inout and in at different 32-byte alignments; the large
        // count runs once, at the least aligned pair.
        for (size_t out_offset : {0, 1, 3}) {
          for (size_t in_offset : {0, 2}) {
            if (count > 1000 && (out_offset != 3 || in_offset != 2)) continue;
            CheckCase<T>(op, a, b, static_cast<size_t>(count), out_offset, in_offset);
            if (HasFatalFailure()) return;
          }
        }
      }
    }
  }
};

TEST_P(ReduceTest, Float32) { Sweep<float>(); }
TEST_P(ReduceTest, Float64) { Sweep<double>(); }
TEST_P(ReduceTest, Float16) { Sweep<Half>(); }
TEST_P(ReduceTest, BFloat16) { Sweep<BFloat16>(); }
TEST_P(ReduceTest, Int8) { Sweep<int8_t>(); }
TEST_P(ReduceTest, UInt8) { Sweep<uint8_t>(); }
TEST_P(ReduceTest, Int32) { Sweep<int32_t>(); }
TEST_P(ReduceTest, Int64) { Sweep<int64_t>(); }

// Reducing a buffer with itself (inout == in) is allowed: x op x.
TEST_P(ReduceTest, InoutMayAliasIn) {
  std::vector<float> v = {1.5f, -2.0f, 0.0f, 3.0f, 4.0f, 5.0f, 6.0f, 7.0f, 8.0f, -9.0f};
  ASSERT_TRUE(
      Reduce(v.data(), v.data(), v.size(), DType::kFloat32, ReduceOp::kSum, GetParam()).ok());
  EXPECT_EQ(v[0], 3.0f);
  EXPECT_EQ(v[9], -18.0f);
}

// Note [Reduction semantics], min/max with NaN and Inf, spelled out: a NaN in either operand wins
// (the inout one when both are NaN), Inf orders as usual, -0 < +0 in either operand order.
TEST_P(ReduceTest, MinMaxNaNInfAndSignedZeros) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float nan2 = -nan;  // a distinguishable NaN
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> a = {nan, 1.0f, nan, -inf, inf, 0.0f, -0.0f, inf, -inf, nan};
  const std::vector<float> b = {1.0f, nan, nan2, 5.0f, 5.0f, -0.0f, 0.0f, -inf, inf, inf};
  // Padded past one AVX2 register so the vector body (not only the scalar tail) runs.
  std::vector<float> mn = a, mx = a, bb = b;
  for (int i = 0; i < 16; ++i) mn.push_back(0.0f), mx.push_back(0.0f), bb.push_back(0.0f);
  ASSERT_TRUE(
      Reduce(mn.data(), bb.data(), mn.size(), DType::kFloat32, ReduceOp::kMin, GetParam()).ok());
  ASSERT_TRUE(
      Reduce(mx.data(), bb.data(), mx.size(), DType::kFloat32, ReduceOp::kMax, GetParam()).ok());
  EXPECT_TRUE(std::isnan(mn[0]) && std::isnan(mx[0]));  // NaN in inout
  EXPECT_TRUE(std::isnan(mn[1]) && std::isnan(mx[1]));  // NaN in in
  EXPECT_FALSE(std::signbit(mn[2]));                    // both NaN: inout's (positive) one
  EXPECT_FALSE(std::signbit(mx[2]));
  EXPECT_EQ(mn[3], -inf);
  EXPECT_EQ(mx[3], 5.0f);
  EXPECT_EQ(mn[4], 5.0f);
  EXPECT_EQ(mx[4], inf);
  EXPECT_TRUE(mn[5] == 0.0f && std::signbit(mn[5]));   // min(+0, -0) = -0
  EXPECT_TRUE(mx[5] == 0.0f && !std::signbit(mx[5]));  // max(+0, -0) = +0
  EXPECT_TRUE(mn[6] == 0.0f && std::signbit(mn[6]));   // min(-0, +0) = -0
  EXPECT_TRUE(mx[6] == 0.0f && !std::signbit(mx[6]));  // max(-0, +0) = +0
  EXPECT_EQ(mn[7], -inf);
  EXPECT_EQ(mx[7], inf);
  EXPECT_EQ(mn[8], -inf);
  EXPECT_EQ(mx[8], inf);
  EXPECT_TRUE(std::isnan(mn[9]) && std::isnan(mx[9]));  // NaN beats Inf
}

// Sum propagates NaN and Inf as IEEE says; Inf + -Inf is NaN.
TEST_P(ReduceTest, SumNaNAndInf) {
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> a(24, 1.0f), b(24, 1.0f);
  a[0] = inf;
  b[0] = -inf;
  a[1] = std::numeric_limits<float>::quiet_NaN();
  a[2] = inf;
  b[20] = inf;
  ASSERT_TRUE(
      Reduce(a.data(), b.data(), a.size(), DType::kFloat32, ReduceOp::kSum, GetParam()).ok());
  EXPECT_TRUE(std::isnan(a[0]));
  EXPECT_TRUE(std::isnan(a[1]));
  EXPECT_EQ(a[2], inf);
  EXPECT_EQ(a[20], inf);
  EXPECT_EQ(a[3], 2.0f);
}

// FinishAvg divides once, correctly rounded: compare with the double quotient rounded to T.
template <typename T>
void CheckFinishAvg(ReducePath path) {
  const std::vector<T> base = MakeInput<T>(7, 3, 1003, nullptr);
  for (int world_size : {1, 2, 3, 7, 8}) {
    std::vector<T> v = base;
    ASSERT_TRUE(FinishAvg(v.data(), v.size(), DTypeOf<T>::value, world_size, path).ok());
    for (size_t i = 0; i < v.size(); ++i) {
      const T want = FromDouble<T>(ToDouble(base[i]) / world_size);
      ASSERT_TRUE(Matches(ReduceOp::kAvg, v[i], want))
          << DTypeName(DTypeOf<T>::value) << " " << Show(base[i]) << " / " << world_size << " gave "
          << Show(v[i]) << ", want " << Show(want);
    }
  }
}

TEST_P(ReduceTest, FinishAvgDividesEveryFloatType) {
  CheckFinishAvg<float>(GetParam());
  CheckFinishAvg<double>(GetParam());
  CheckFinishAvg<Half>(GetParam());
  CheckFinishAvg<BFloat16>(GetParam());
}

INSTANTIATE_TEST_SUITE_P(AllPaths, ReduceTest,
                         ::testing::Values(ReducePath::kPortable, ReducePath::kAvx2),
                         [](const ::testing::TestParamInfo<ReducePath>& info) {
                           return std::string(ReducePathName(info.param));
                         });

// kAuto is not swept (it is one of the two paths above); check it is the fastest available one.
TEST(ReducePathTest, AutoIsAvx2WhereAvailable) {
  EXPECT_TRUE(ReducePathAvailable(ReducePath::kAuto));
  EXPECT_TRUE(ReducePathAvailable(ReducePath::kPortable));
#if defined(__x86_64__)
  const CpuFeatures& cpu = GetCpuFeatures();
  EXPECT_EQ(ReducePathAvailable(ReducePath::kAvx2), cpu.avx2 && cpu.f16c && cpu.fma);
#endif
  // Same bits through kAuto as through the path it resolves to, on an input with odd values.
  const std::vector<Half> a = MakeInput<Half>(9, 0, 1000, nullptr);
  const std::vector<Half> b = MakeInput<Half>(9, 1, 1000, &a);
  const ReducePath resolved =
      ReducePathAvailable(ReducePath::kAvx2) ? ReducePath::kAvx2 : ReducePath::kPortable;
  std::vector<Half> x = a, y = a;
  ASSERT_TRUE(Reduce(x.data(), b.data(), 1000, DType::kFloat16, ReduceOp::kSum).ok());
  ASSERT_TRUE(Reduce(y.data(), b.data(), 1000, DType::kFloat16, ReduceOp::kSum, resolved).ok());
  EXPECT_EQ(std::memcmp(x.data(), y.data(), 1000 * sizeof(Half)), 0);
}

// ---- Names and errors ----

TEST(ReduceOpTest, NamesRoundTrip) {
  for (ReduceOp op : kAllOps) {
    absl::StatusOr<ReduceOp> parsed = ParseReduceOp(ReduceOpName(op));
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    EXPECT_EQ(*parsed, op);
  }
  EXPECT_EQ(*ParseReduceOp("MEAN"), ReduceOp::kAvg);
  EXPECT_EQ(*ParseReduceOp("Product"), ReduceOp::kProd);
  absl::StatusOr<ReduceOp> bad = ParseReduceOp("median");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("median"), std::string::npos);
  EXPECT_NE(bad.status().message().find("sum, avg, mean, min, max, prod"), std::string::npos)
      << bad.status();
  EXPECT_EQ(ReduceOpName(static_cast<ReduceOp>(99)), "invalid");
}

TEST(ReduceErrorsTest, IntegerAvgIsInvalidArgument) {
  for (DType dtype : {DType::kInt8, DType::kUInt8, DType::kInt32, DType::kInt64}) {
    int32_t x[2] = {1, 2};
    absl::Status s = Reduce(x, x, 1, dtype, ReduceOp::kAvg);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_NE(s.message().find(std::string(DTypeName(dtype))), std::string::npos) << s;
    EXPECT_NE(s.message().find("sum and divide"), std::string::npos) << s;
    EXPECT_EQ(FinishAvg(x, 1, dtype, 2).code(), absl::StatusCode::kInvalidArgument);
  }
}

TEST(ReduceErrorsTest, BoolIsRejectedWithAHint) {
  bool x[1] = {true};
  absl::Status s = Reduce(x, x, 1, DType::kBool, ReduceOp::kMax);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("cast to uint8"), std::string::npos) << s;
}

TEST(ReduceErrorsTest, BadArguments) {
  float x[1] = {1.0f};
  EXPECT_EQ(Reduce(x, x, -1, DType::kFloat32, ReduceOp::kSum).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Reduce(nullptr, x, 1, DType::kFloat32, ReduceOp::kSum).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Reduce(x, nullptr, 1, DType::kFloat32, ReduceOp::kSum).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(Reduce(nullptr, nullptr, 0, DType::kFloat32, ReduceOp::kSum).ok());
  EXPECT_EQ(Reduce(x, x, 1, static_cast<DType>(77), ReduceOp::kSum).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Reduce(x, x, 1, DType::kFloat32, static_cast<ReduceOp>(77)).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(FinishAvg(x, 1, DType::kFloat32, 0).code(), absl::StatusCode::kInvalidArgument);
  if (!ReducePathAvailable(ReducePath::kAvx2)) {
    EXPECT_EQ(Reduce(x, x, 1, DType::kFloat32, ReduceOp::kSum, ReducePath::kAvx2).code(),
              absl::StatusCode::kInvalidArgument);
  }
}

}  // namespace
}  // namespace paddle
