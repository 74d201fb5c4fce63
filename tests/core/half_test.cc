// Tests of the fp16/bf16 conversions (paddle/core/half.h) against a reference written another way:
// decoding computes each value from its fields with std::ldexp, encoding looks up the nearest entry
// in the sorted table of every finite value. Coverage, for every conversion path this CPU has:
// all 65,536 patterns in the widening direction; in the narrowing direction every representable
// value, every midpoint between neighbours (ties) and the floats just either side of it, overflow,
// subnormals, zeros, Inf, quiet and signalling NaNs, and millions of seeded random floats; bulk
// calls at awkward lengths and offsets with guard elements around the output.
#include "paddle/core/half.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_format.h"
#include "gtest/gtest.h"

#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#endif

namespace paddle {
namespace {

uint32_t Bits(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  return bits;
}

float FromBits(uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, sizeof(value));
  return value;
}

using BulkToFloat = void (*)(const uint16_t*, float*, size_t, ConvertPath);
using BulkFromFloat = void (*)(const float*, uint16_t*, size_t, ConvertPath);

// One 16-bit format: its field widths and the functions under test.
struct Format {
  const char* name;
  int exponent_bits;
  int mantissa_bits;
  float (*to_float)(uint16_t);
  uint16_t (*from_float)(float);
  BulkToFloat bulk_to_float;
  BulkFromFloat bulk_from_float;

  int Bias() const { return (1 << (exponent_bits - 1)) - 1; }
  uint16_t InfPattern() const {
    return static_cast<uint16_t>(((1 << exponent_bits) - 1) << mantissa_bits);
  }
  uint16_t QuietBit() const { return static_cast<uint16_t>(1 << (mantissa_bits - 1)); }
};

const Format kHalf = {
    "half",
    5,
    10,
    [](uint16_t b) { return HalfToFloat(b); },
    [](float f) { return FloatToHalf(f); },
    [](const uint16_t* in, float* out, size_t n, ConvertPath p) { HalfToFloat(in, out, n, p); },
    [](const float* in, uint16_t* out, size_t n, ConvertPath p) { FloatToHalf(in, out, n, p); }};

const Format kBFloat16 = {
    "bfloat16",
    8,
    7,
    [](uint16_t b) { return BFloat16ToFloat(b); },
    [](float f) { return FloatToBFloat16(f); },
    [](const uint16_t* in, float* out, size_t n, ConvertPath p) { BFloat16ToFloat(in, out, n, p); },
    [](const float* in, uint16_t* out, size_t n, ConvertPath p) {
      FloatToBFloat16(in, out, n, p);
    }};

// ---- Reference ----

// Magnitude of a finite pattern (sign ignored), from its fields.
double ReferenceMagnitude(const Format& f, uint16_t bits) {
  const int exponent = (bits >> f.mantissa_bits) & ((1 << f.exponent_bits) - 1);
  const int mantissa = bits & ((1 << f.mantissa_bits) - 1);
  if (exponent == 0) return std::ldexp(mantissa, 1 - f.Bias() - f.mantissa_bits);
  return std::ldexp(mantissa + (1 << f.mantissa_bits), exponent - f.Bias() - f.mantissa_bits);
}

float ReferenceToFloat(const Format& f, uint16_t bits) {
  const bool negative = (bits & 0x8000) != 0;
  const int mantissa = bits & ((1 << f.mantissa_bits) - 1);
  if ((bits & 0x7fff) >= f.InfPattern()) {
    if (mantissa == 0) {
      return negative ? -std::numeric_limits<float>::infinity()
                      : std::numeric_limits<float>::infinity();
    }
    // A NaN's bits are policy, not arithmetic: quiet, sign kept, payload at the top.
    return FromBits((negative ? 0xffc00000u : 0x7fc00000u) |
                    (static_cast<uint32_t>(mantissa) << (23 - f.mantissa_bits)));
  }
  const double magnitude = ReferenceMagnitude(f, bits);
  return static_cast<float>(negative ? -magnitude : magnitude);
}

// Magnitudes of patterns 0 .. InfPattern(), ascending. The Inf pattern stands for 2^(emax + 1),
// the value the next pattern would have with an unbounded exponent: IEEE rounds against it and
// overflows to Inf when it wins.
std::vector<double> MagnitudeTable(const Format& f) {
  std::vector<double> table;
  for (uint16_t p = 0; p < f.InfPattern(); ++p) table.push_back(ReferenceMagnitude(f, p));
  table.push_back(std::ldexp(1.0, f.Bias() + 1));
  return table;
}

uint16_t ReferenceFromFloat(const Format& f, const std::vector<double>& table, float x) {
  const uint16_t sign = std::signbit(x) ? 0x8000 : 0;
  if (std::isnan(x)) {
    const uint32_t payload = Bits(x) & 0x007fffffu;
    return static_cast<uint16_t>(sign | f.InfPattern() | f.QuietBit() |
                                 (payload >> (23 - f.mantissa_bits)));
  }
  const double a = std::fabs(static_cast<double>(x));
  if (a >= table.back()) return sign | f.InfPattern();
  const size_t hi = std::lower_bound(table.begin(), table.end(), a) - table.begin();
  if (table[hi] == a) return static_cast<uint16_t>(sign | hi);
  const size_t lo = hi - 1;
  // Nearest by comparing 2a with lo + hi: both sides are exact in double, unlike the distances.
  const double twice = 2 * a;
  const double sum = table[lo] + table[hi];
  const size_t nearest = twice < sum ? lo : twice > sum ? hi : (lo % 2 == 0 ? lo : hi);
  return static_cast<uint16_t>(sign | nearest);
}

std::string Hex(uint32_t bits) { return absl::StrFormat("0x%08x", bits); }

// Collects mismatches so a broken path reports a few examples and a count, not 65,536 lines.
class Mismatches {
 public:
  void Check(bool ok, const std::string& what) {
    if (ok) return;
    if (count_++ < 10) examples_ += "  " + what + "\n";
  }
  int count() const { return count_; }
  const std::string& examples() const { return examples_; }

 private:
  int count_ = 0;
  std::string examples_;
};

#define EXPECT_NO_MISMATCHES(m) EXPECT_EQ((m).count(), 0) << "first mismatches:\n" << (m).examples()

// ---- Tests per (format, path) ----

class ConvertTest : public ::testing::TestWithParam<std::tuple<const Format*, ConvertPath>> {
 protected:
  void SetUp() override {
    if (!ConvertPathAvailable(path())) {
      GTEST_SKIP() << "path " << ConvertPathName(path())
                   << " not available: CPU lacks AVX2/F16C; it runs on any x86-64 CPU with them, "
                      "such as the CI machine's";
    }
  }
  const Format& format() const { return *std::get<0>(GetParam()); }
  ConvertPath path() const { return std::get<1>(GetParam()); }

  std::vector<float> ToFloat(const std::vector<uint16_t>& in) const {
    std::vector<float> out(in.size());
    format().bulk_to_float(in.data(), out.data(), in.size(), path());
    return out;
  }
  std::vector<uint16_t> FromFloat(const std::vector<float>& in) const {
    std::vector<uint16_t> out(in.size());
    format().bulk_from_float(in.data(), out.data(), in.size(), path());
    return out;
  }

  // Checks the bulk conversion of `in` (and the scalar one) against `expected`.
  void ExpectFromFloat(const std::vector<float>& in, const std::vector<uint16_t>& expected) {
    const std::vector<uint16_t> out = FromFloat(in);
    Mismatches m;
    for (size_t i = 0; i < in.size(); ++i) {
      const uint16_t scalar = format().from_float(in[i]);
      m.Check(out[i] == expected[i] && scalar == expected[i],
              absl::StrFormat("%s(%.9g = %s): bulk 0x%04x scalar 0x%04x want 0x%04x", format().name,
                              in[i], Hex(Bits(in[i])), out[i], scalar, expected[i]));
    }
    EXPECT_NO_MISMATCHES(m);
  }

  const std::vector<double>& Table() {
    if (table_.empty()) table_ = MagnitudeTable(format());
    return table_;
  }

 private:
  std::vector<double> table_;
};

std::vector<uint16_t> AllPatterns() {
  std::vector<uint16_t> all(65536);
  for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<uint16_t>(i);
  return all;
}

TEST_P(ConvertTest, ToFloatAllPatterns) {
  const std::vector<uint16_t> all = AllPatterns();
  const std::vector<float> out = ToFloat(all);
  Mismatches m;
  int nans = 0;
  for (uint16_t p : all) {
    const uint32_t want = Bits(ReferenceToFloat(format(), p));
    const uint32_t scalar = Bits(format().to_float(p));
    nans += std::isnan(out[p]) ? 1 : 0;
    m.Check(Bits(out[p]) == want && scalar == want,
            absl::StrFormat("%s 0x%04x: bulk %s scalar %s want %s", format().name, p,
                            Hex(Bits(out[p])), Hex(scalar), Hex(want)));
  }
  EXPECT_NO_MISMATCHES(m);
  // Guards the reference itself: every pattern with an all-ones exponent but Inf is a NaN.
  const int mantissas = 1 << format().mantissa_bits;
  EXPECT_EQ(nans, 2 * (mantissas - 1));
}

TEST_P(ConvertTest, FromFloatEveryRepresentableValue) {
  std::vector<float> in;
  std::vector<uint16_t> expected;
  for (uint32_t p = 0; p < 65536; ++p) {
    if ((p & 0x7fff) > format().InfPattern()) continue;  // NaNs have their own test
    in.push_back(ReferenceToFloat(format(), static_cast<uint16_t>(p)));
    expected.push_back(static_cast<uint16_t>(p));
  }
  ExpectFromFloat(in, expected);
}

TEST_P(ConvertTest, FromFloatMidpointsAndTheirNeighbours) {
  const std::vector<double>& table = Table();
  std::vector<float> in;
  std::vector<uint16_t> expected;
  for (size_t lo = 0; lo + 1 < table.size(); ++lo) {
    const double mid = (table[lo] + table[lo + 1]) / 2;
    const float mid_f = static_cast<float>(mid);
    ASSERT_EQ(static_cast<double>(mid_f), mid) << "midpoint not a float at pattern " << lo;
    const uint16_t even = static_cast<uint16_t>(lo % 2 == 0 ? lo : lo + 1);
    const float below = std::nextafter(mid_f, 0.0f);
    const float above = std::nextafter(mid_f, std::numeric_limits<float>::infinity());
    for (uint16_t sign : {0, 0x8000}) {
      const float s = sign ? -1.0f : 1.0f;
      in.insert(in.end(), {s * mid_f, s * below, s * above});
      expected.insert(expected.end(),
                      {static_cast<uint16_t>(sign | even), static_cast<uint16_t>(sign | lo),
                       static_cast<uint16_t>(sign | (lo + 1))});
    }
  }
  // The hand-derived expectations above also vouch for the reference.
  for (size_t i = 0; i < in.size(); ++i) {
    ASSERT_EQ(ReferenceFromFloat(format(), table, in[i]), expected[i]) << Hex(Bits(in[i]));
  }
  ExpectFromFloat(in, expected);
}

TEST_P(ConvertTest, FromFloatSpecialValues) {
  const float inf = std::numeric_limits<float>::infinity();
  const uint16_t max_finite = format().InfPattern() - 1;
  const float max_value = ReferenceToFloat(format(), max_finite);
  const float min_subnormal = ReferenceToFloat(format(), 1);
  std::vector<float> in = {0.0f,
                           -0.0f,
                           inf,
                           -inf,
                           FLT_MAX,
                           -FLT_MAX,
                           max_value,
                           -max_value,
                           FLT_TRUE_MIN,
                           -FLT_TRUE_MIN,
                           FLT_MIN,
                           min_subnormal,
                           -min_subnormal,
                           min_subnormal / 2,  // tie between 0 and the smallest: to even, 0
                           std::nextafter(min_subnormal / 2, 1.0f),
                           min_subnormal * 1.5f,  // tie between 1 and 2 ulps: to even, 2
                           1.0f,
                           -2.0f,
                           1e30f,
                           -1e-45f};
  std::vector<uint16_t> expected = {0x0000,
                                    0x8000,
                                    format().InfPattern(),
                                    static_cast<uint16_t>(0x8000 | format().InfPattern()),
                                    format().InfPattern(),
                                    static_cast<uint16_t>(0x8000 | format().InfPattern()),
                                    max_finite,
                                    static_cast<uint16_t>(0x8000 | max_finite),
                                    0x0000,
                                    0x8000,
                                    ReferenceFromFloat(format(), Table(), FLT_MIN),
                                    0x0001,
                                    0x8001,
                                    0x0000,
                                    0x0001,
                                    0x0002,
                                    ReferenceFromFloat(format(), Table(), 1.0f),
                                    ReferenceFromFloat(format(), Table(), -2.0f),
                                    ReferenceFromFloat(format(), Table(), 1e30f),
                                    0x8000};
  if (format().exponent_bits == 5) {
    expected[16] = 0x3c00;
    expected[17] = 0xc000;
    expected[18] = 0x7c00;  // 1e30 overflows a half
    in.insert(in.end(), {65504.0f, 65519.99f, 65520.0f, 1.00048828125f, 1.00146484375f});
    expected.insert(expected.end(), {0x7bff, 0x7bff, 0x7c00, 0x3c00, 0x3c02});
  } else {
    expected[16] = 0x3f80;
    expected[17] = 0xc000;
    in.insert(in.end(), {FromBits(0x7f7f7fff), FromBits(0x7f7f8000), FromBits(0x00008000),
                         FromBits(0x00018000), FromBits(0x3f808000), FromBits(0x3f818000)});
    expected.insert(expected.end(), {0x7f7f, 0x7f80, 0x0000, 0x0002, 0x3f80, 0x3f82});
  }
  ExpectFromFloat(in, expected);
}

TEST_P(ConvertTest, NaNsStayQuietNaNs) {
  // Quiet and signalling, both signs, payload in the kept bits, in the dropped bits, or both.
  const std::vector<uint32_t> nan_bits = {0x7fc00000, 0xffc00000, 0x7f800001, 0xff800001,
                                          0x7fa00000, 0x7f802000, 0x7f801fff, 0x7fffffff,
                                          0xffffffff, 0x7fc00001, 0x7f810000, 0xff80e000};
  std::vector<float> in;
  std::vector<uint16_t> expected;
  for (uint32_t b : nan_bits) {
    in.push_back(FromBits(b));
    expected.push_back(ReferenceFromFloat(format(), Table(), FromBits(b)));
  }
  ExpectFromFloat(in, expected);
  const std::vector<uint16_t> out = FromFloat(in);
  for (size_t i = 0; i < in.size(); ++i) {
    SCOPED_TRACE(Hex(nan_bits[i]));
    EXPECT_GT(out[i] & 0x7fff, format().InfPattern()) << "NaN became Inf or a number";
    EXPECT_TRUE(out[i] & format().QuietBit());
    EXPECT_EQ(out[i] >> 15, nan_bits[i] >> 31);
  }
  // Spot values written out by hand, independent of the reference.
  if (format().exponent_bits == 5) {
    EXPECT_EQ(out[2], 0x7e00);  // signalling, payload only in dropped bits
    EXPECT_EQ(out[4], 0x7f00);  // signalling, top payload bit kept
  } else {
    EXPECT_EQ(out[2], 0x7fc0);
    EXPECT_EQ(out[4], 0x7fe0);
  }
  // Widening: a signalling NaN comes back quiet with its payload.
  const uint16_t snan = static_cast<uint16_t>(format().InfPattern() | 1);
  const std::vector<float> widened = ToFloat({snan, static_cast<uint16_t>(0x8000 | snan)});
  const uint32_t want = 0x7fc00000u | (1u << (23 - format().mantissa_bits));
  EXPECT_EQ(Bits(widened[0]), want);
  EXPECT_EQ(Bits(widened[1]), 0x80000000u | want);
}

// Random floats of two kinds: any bit pattern (all exponents, NaNs included) and values spread
// over the format's own exponent range, where most of the rounding happens.
std::vector<float> RandomFloats(const Format& f, uint32_t seed, size_t n) {
  std::mt19937 rng(seed);
  std::vector<float> out(n);
  const int lowest = 127 - f.Bias() - f.mantissa_bits - 2;  // just below the smallest subnormal
  const int highest = 127 + f.Bias() + 1;                   // just above the largest finite
  for (size_t i = 0; i < n; ++i) {
    uint32_t bits = static_cast<uint32_t>(rng());
    if (i % 2 == 1) {
      const uint32_t exponent = lowest + rng() % (highest - lowest + 1);
      bits = (bits & 0x807fffffu) | (std::min<uint32_t>(exponent, 254) << 23);
    }
    out[i] = FromBits(bits);
  }
  return out;
}

TEST_P(ConvertTest, FromFloatRandomAgainstReferenceAndPortablePath) {
  constexpr size_t kCount = 3'000'000;
  const std::vector<float> in = RandomFloats(format(), 20240607u, kCount);
  const std::vector<uint16_t> out = FromFloat(in);
  std::vector<uint16_t> portable(in.size());
  format().bulk_from_float(in.data(), portable.data(), in.size(), ConvertPath::kPortable);
  Mismatches m;
  for (size_t i = 0; i < in.size(); ++i) {
    const uint16_t want = ReferenceFromFloat(format(), Table(), in[i]);
    m.Check(out[i] == want && portable[i] == want,
            absl::StrFormat("%s(%s): %s 0x%04x portable 0x%04x want 0x%04x", format().name,
                            Hex(Bits(in[i])), ConvertPathName(path()), out[i], portable[i], want));
  }
  EXPECT_NO_MISMATCHES(m);
}

// The results must not depend on flush-to-zero or denormals-are-zero (code that enables them for
// speed calls these conversions too).
TEST_P(ConvertTest, FlushToZeroModesChangeNothing) {
#if defined(__x86_64__) || defined(__i386__)
  const std::vector<uint16_t> all = AllPatterns();
  std::vector<float> in = RandomFloats(format(), 7u, 200'000);
  for (uint16_t p = 0; p < 0x0400; ++p) in.push_back(ReferenceToFloat(format(), p));
  const std::vector<float> widened_before = ToFloat(all);
  const std::vector<uint16_t> narrowed_before = FromFloat(in);
  const unsigned int saved = _mm_getcsr();
  _mm_setcsr(saved | 0x8040);  // FTZ | DAZ
  const std::vector<float> widened = ToFloat(all);
  const std::vector<uint16_t> narrowed = FromFloat(in);
  _mm_setcsr(saved);
  EXPECT_EQ(0, std::memcmp(widened.data(), widened_before.data(), all.size() * sizeof(float)));
  EXPECT_EQ(narrowed, narrowed_before);
#else
  GTEST_SKIP() << "MXCSR is x86 only; this test runs on x86-64 builds (the CI machine)";
#endif
}

// Every length class of the block loops (empty, tail only, whole blocks, blocks plus tail) at
// element offsets that break 16- and 32-byte alignment, with guards that catch stray writes.
TEST_P(ConvertTest, BulkLengthsOffsetsAndGuards) {
  constexpr size_t kGuard = 16;
  std::mt19937 rng(99);
  for (size_t n : {0, 1, 7, 8, 9, 15, 16, 17, 1000}) {
    for (size_t offset : {0, 1, 2, 3, 5}) {
      SCOPED_TRACE(absl::StrFormat("n=%d offset=%d", n, offset));
      std::vector<uint16_t> narrow_in(n + offset);
      for (auto& v : narrow_in) v = static_cast<uint16_t>(rng());
      const std::vector<float> wide_in = RandomFloats(format(), rng(), n + offset);

      std::vector<float> wide_out(offset + n + kGuard, -7.0f);
      format().bulk_to_float(narrow_in.data() + offset, wide_out.data() + offset, n, path());
      std::vector<uint16_t> narrow_out(offset + n + kGuard, 0xabcd);
      format().bulk_from_float(wide_in.data() + offset, narrow_out.data() + offset, n, path());

      for (size_t i = 0; i < wide_out.size(); ++i) {
        const bool inside = i >= offset && i < offset + n;
        if (inside) {
          EXPECT_EQ(Bits(wide_out[i]), Bits(ReferenceToFloat(format(), narrow_in[i]))) << i;
          EXPECT_EQ(narrow_out[i], ReferenceFromFloat(format(), Table(), wide_in[i])) << i;
        } else {
          EXPECT_EQ(wide_out[i], -7.0f) << "write outside the output at " << i;
          EXPECT_EQ(narrow_out[i], 0xabcd) << "write outside the output at " << i;
        }
      }
    }
  }
  // Zero elements with null pointers is a valid call.
  format().bulk_to_float(nullptr, nullptr, 0, path());
  format().bulk_from_float(nullptr, nullptr, 0, path());
}

INSTANTIATE_TEST_SUITE_P(AllPaths, ConvertTest,
                         ::testing::Combine(::testing::Values(&kHalf, &kBFloat16),
                                            ::testing::Values(ConvertPath::kPortable,
                                                              ConvertPath::kAvx2,
                                                              ConvertPath::kAuto)),
                         [](const ::testing::TestParamInfo<ConvertTest::ParamType>& info) {
                           return std::string(std::get<0>(info.param)->name) + "_" +
                                  std::string(ConvertPathName(std::get<1>(info.param)));
                         });

// ---- Path selection and the storage types ----

TEST(ConvertPathTest, AutoPicksTheFastestAvailable) {
  EXPECT_TRUE(ConvertPathAvailable(ConvertPath::kAuto));
  EXPECT_TRUE(ConvertPathAvailable(ConvertPath::kPortable));
  EXPECT_EQ(AutoConvertPath(),
            ConvertPathAvailable(ConvertPath::kAvx2) ? ConvertPath::kAvx2 : ConvertPath::kPortable);
#if defined(__x86_64__)
  __builtin_cpu_init();
  const bool cpu_has = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c");
  EXPECT_EQ(ConvertPathAvailable(ConvertPath::kAvx2), cpu_has);
#endif
  EXPECT_EQ(ConvertPathName(ConvertPath::kAuto), "auto");
  EXPECT_EQ(ConvertPathName(ConvertPath::kPortable), "portable");
  EXPECT_EQ(ConvertPathName(ConvertPath::kAvx2), "avx2");
}

TEST(ConvertPathDeathTest, UnavailablePathAborts) {
  // The death test re-executes this binary, so the child detects its CPU afresh and, with
  // PADDLE_CPU_BASELINE=1, sees one without AVX2/F16C whatever this machine has.
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  setenv("PADDLE_CPU_BASELINE", "1", 1);
  float out = 0;
  const uint16_t in = 0;
  EXPECT_DEATH(
      {
        if (ConvertPathAvailable(ConvertPath::kAvx2)) {
          std::fprintf(stderr, "PADDLE_CPU_BASELINE ignored\n");
          std::abort();
        }
        EXPECT_EQ(AutoConvertPath(), ConvertPath::kPortable);
        HalfToFloat(&in, &out, 1, ConvertPath::kAvx2);
      },
      "lacks AVX2/F16C");
  unsetenv("PADDLE_CPU_BASELINE");
}

TEST(StorageTypeTest, HalfAndBFloat16) {
  static_assert(Half::FromBits(0x3c00).bits == 0x3c00, "FromBits is constexpr");
  EXPECT_EQ(Half(1.0f).bits, 0x3c00);
  EXPECT_EQ(static_cast<float>(Half::FromBits(0xc000)), -2.0f);
  EXPECT_EQ(Half(0.1f).bits, 0x2e66);
  EXPECT_EQ(BFloat16(1.0f).bits, 0x3f80);
  EXPECT_EQ(static_cast<float>(BFloat16::FromBits(0xc000)), -2.0f);
  EXPECT_EQ(BFloat16(0.1f).bits, 0x3dcd);
  EXPECT_TRUE(std::isnan(static_cast<float>(Half(std::nanf("")))));
  EXPECT_TRUE(std::isinf(static_cast<float>(BFloat16(FLT_MAX))));
}

}  // namespace
}  // namespace paddle
