// Conversions between float and the 2-byte formats; semantics in Note [Conversion semantics] in
// half.h. Three layers:
//   1. per-element functions written with selects instead of branches, shared by the scalar API
//      and the portable loops (so there is one definition of the rounding, and the compiler can
//      vectorize the loops with baseline SSE2);
//   2. the AVX2/F16C loops, compiled for that target with a function attribute only, so the rest
//      of the binary stays baseline x86-64;
//   3. a table of loops per path, the kAuto entry picked once from __builtin_cpu_supports.
#include "paddle/core/half.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "paddle/core/cpu_features.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define PADDLE_HALF_HAVE_AVX2_PATH 1
#else
#define PADDLE_HALF_HAVE_AVX2_PATH 0
#endif

namespace paddle {
namespace {

inline uint32_t FloatBits(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  return bits;
}

inline float BitsFloat(uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, sizeof(value));
  return value;
}

constexpr uint32_t kFloatAbsMask = 0x7fffffffu;
constexpr uint32_t kFloatInf = 0x7f800000u;
constexpr uint32_t kFloatQuietBit = 0x00400000u;
constexpr uint32_t kHalfInf = 0x7c00u;
constexpr uint32_t kHalfQuietBit = 0x0200u;
constexpr uint32_t kBFloat16QuietBit = 0x0040u;
// Exponent bias difference between binary32 (127) and binary16 (15), in place.
constexpr uint32_t kRebias = (127u - 15u) << 23;

// All ones when `condition` holds, else zero. Selects written as bit operations leave the compiler
// no branch to keep around the floating-point operations (which it may not if-convert, as they
// could trap), so the portable loops vectorize.
inline uint32_t Mask(bool condition) { return 0u - static_cast<uint32_t>(condition); }

inline uint32_t Select(uint32_t mask, uint32_t if_set, uint32_t if_clear) {
  return (if_set & mask) | (if_clear & ~mask);
}

inline float HalfToFloatElement(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t em = h & 0x7fffu;  // exponent and mantissa
  const uint32_t normal = (em << 13) + kRebias;
  const uint32_t inf_or_nan = (em << 13) | kFloatInf | (Mask(em > kHalfInf) & kFloatQuietBit);
  // A subnormal half is em * 2^-24: a normal float, and both the int->float conversion and the
  // scaling by a power of two are exact, so no rounding mode or FTZ setting can change it.
  const uint32_t subnormal = FloatBits(static_cast<float>(static_cast<int32_t>(em)) * 0x1p-24f);
  const uint32_t magnitude =
      Select(Mask(em < 0x0400u), subnormal, Select(Mask(em >= kHalfInf), inf_or_nan, normal));
  return BitsFloat(sign | magnitude);
}

inline uint16_t FloatToHalfElement(float value) {
  const uint32_t x = FloatBits(value);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t a = x & kFloatAbsMask;
  // Normal results: round the rebased encoding to nearest even by adding just under half a result
  // ulp, plus one more when the kept low bit is odd. A carry out of the mantissa correctly bumps
  // the exponent. (For small `a` the subtraction wraps; that value is not selected.)
  const uint32_t rebased = a - kRebias;
  const uint32_t normal = (rebased + 0x0fffu + ((rebased >> 13) & 1u)) >> 13;
  // Subnormal results are multiples of 2^-24 below 2^-14. The float ulp at 0.5 is exactly 2^-24,
  // so adding 0.5f makes the FPU round to nearest even at that step; the encoding difference is
  // then the half mantissa (0x400, the smallest normal, when it rounds up out of the range).
  const uint32_t subnormal = FloatBits(BitsFloat(a) + 0.5f) - FloatBits(0.5f);
  const uint32_t nan = kHalfInf | kHalfQuietBit | ((a >> 13) & 0x03ffu);
  // 2^-14 is the smallest normal half; 65520 rounds past the largest, 65504.
  uint32_t magnitude = Select(Mask(a < 0x38800000u), subnormal, normal);
  magnitude = Select(Mask(a >= 0x477ff000u), kHalfInf, magnitude);
  magnitude = Select(Mask(a > kFloatInf), nan, magnitude);
  return static_cast<uint16_t>(sign | magnitude);
}

inline float BFloat16ToFloatElement(uint16_t b) {
  const uint32_t x = static_cast<uint32_t>(b) << 16;
  return BitsFloat(x | (Mask((x & kFloatAbsMask) > kFloatInf) & kFloatQuietBit));
}

inline uint16_t FloatToBFloat16Element(float value) {
  const uint32_t x = FloatBits(value);
  // Same rounding trick as FloatToHalfElement; the largest finite values carry into Inf, and the
  // sum cannot wrap for any non-NaN input.
  const uint32_t rounded = (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;
  const uint32_t nan = (x >> 16) | kBFloat16QuietBit;
  return static_cast<uint16_t>(Select(Mask((x & kFloatAbsMask) > kFloatInf), nan, rounded));
}

// ---- Portable loops ----

// Chunks of a fixed 16 elements, with `in` and `out` declared not to alias, are what GCC's cheap
// vectorizer at -O2 accepts (no alias checks, no epilogue inside the chunk loop).
template <typename In, typename Out, Out (*Element)(In)>
void PortableLoop(const In* __restrict in, Out* __restrict out, size_t n) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    for (size_t j = 0; j < 16; ++j) out[i + j] = Element(in[i + j]);
  }
  for (; i < n; ++i) out[i] = Element(in[i]);
}

// ---- AVX2/F16C loops ----
//
// Each direction has a block function (8 elements; 16 for float -> bf16). The loops run it over
// full blocks and finish a short tail through a zero-padded stack copy, so every element goes
// through the vector instructions (and the tests of this path cover them), and nothing outside
// [in, in + n) or [out, out + n) is touched.

#if PADDLE_HALF_HAVE_AVX2_PATH
#define PADDLE_TARGET_AVX2 __attribute__((target("avx2,f16c")))

PADDLE_TARGET_AVX2 inline void HalfToFloatBlock(const uint16_t* in, float* out) {
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in));
  // VCVTPH2PS is exact and quiets signalling NaNs, which is our semantics.
  _mm256_storeu_ps(out, _mm256_cvtph_ps(h));
}

PADDLE_TARGET_AVX2 inline void FloatToHalfBlock(const float* in, uint16_t* out) {
  // The immediate selects round-to-nearest-even regardless of MXCSR; NaNs come out quiet with the
  // top payload bits, as in FloatToHalfElement.
  const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(in), _MM_FROUND_TO_NEAREST_INT);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(out), h);
}

PADDLE_TARGET_AVX2 inline void BFloat16ToFloatBlock(const uint16_t* in, float* out) {
  const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in));
  const __m256i x = _mm256_slli_epi32(_mm256_cvtepu16_epi32(b), 16);
  // Signed compares are fine: both sides are below 2^31 after masking the sign.
  const __m256i abs = _mm256_and_si256(x, _mm256_set1_epi32(static_cast<int>(kFloatAbsMask)));
  const __m256i is_nan = _mm256_cmpgt_epi32(abs, _mm256_set1_epi32(static_cast<int>(kFloatInf)));
  const __m256i quiet =
      _mm256_and_si256(is_nan, _mm256_set1_epi32(static_cast<int>(kFloatQuietBit)));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), _mm256_or_si256(x, quiet));
}

// Rounds the 8 floats in `x` to bfloat16, one result per 32-bit lane.
PADDLE_TARGET_AVX2 inline __m256i FloatToBFloat16Lanes(__m256i x) {
  const __m256i one = _mm256_set1_epi32(1);
  // Integer round to nearest even, as in FloatToBFloat16Element.
  const __m256i odd = _mm256_and_si256(_mm256_srli_epi32(x, 16), one);
  const __m256i bias = _mm256_add_epi32(_mm256_set1_epi32(0x7fff), odd);
  const __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(x, bias), 16);
  const __m256i nan = _mm256_or_si256(_mm256_srli_epi32(x, 16),
                                      _mm256_set1_epi32(static_cast<int>(kBFloat16QuietBit)));
  const __m256i abs = _mm256_and_si256(x, _mm256_set1_epi32(static_cast<int>(kFloatAbsMask)));
  const __m256i is_nan = _mm256_cmpgt_epi32(abs, _mm256_set1_epi32(static_cast<int>(kFloatInf)));
  return _mm256_blendv_epi8(rounded, nan, is_nan);
}

// 16 elements per block so that one pack and one permute serve two vectors of results.
PADDLE_TARGET_AVX2 inline void FloatToBFloat16Block(const float* in, uint16_t* out) {
  const __m256i a = FloatToBFloat16Lanes(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(in)));
  const __m256i b =
      FloatToBFloat16Lanes(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + 8)));
  // Every lane is in [0, 0xffff], so the saturating pack is a plain narrowing. It works per
  // 128-bit half ([a0..a3, b0..b3, a4..a7, b4..b7]); the permute restores the order.
  const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(a, b), 0xd8);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), packed);
}

template <typename In, typename Out, size_t kBlock, void (*Block)(const In*, Out*)>
PADDLE_TARGET_AVX2 void RunBlocks(const In* in, Out* out, size_t n) {
  size_t i = 0;
  for (; i + kBlock <= n; i += kBlock) Block(in + i, out + i);
  if (i < n) {
    In in_tail[kBlock] = {};
    Out out_tail[kBlock];
    std::memcpy(in_tail, in + i, (n - i) * sizeof(In));
    Block(in_tail, out_tail);
    std::memcpy(out + i, out_tail, (n - i) * sizeof(Out));
  }
}

bool CpuHasAvx2() {
  const CpuFeatures& cpu = GetCpuFeatures();
  return cpu.avx2 && cpu.f16c;
}
#endif  // PADDLE_HALF_HAVE_AVX2_PATH

struct ConvertLoops {
  void (*half_to_float)(const uint16_t*, float*, size_t);
  void (*float_to_half)(const float*, uint16_t*, size_t);
  void (*bfloat16_to_float)(const uint16_t*, float*, size_t);
  void (*float_to_bfloat16)(const float*, uint16_t*, size_t);
};

constexpr ConvertLoops kPortableLoops = {PortableLoop<uint16_t, float, HalfToFloatElement>,
                                         PortableLoop<float, uint16_t, FloatToHalfElement>,
                                         PortableLoop<uint16_t, float, BFloat16ToFloatElement>,
                                         PortableLoop<float, uint16_t, FloatToBFloat16Element>};

#if PADDLE_HALF_HAVE_AVX2_PATH
constexpr ConvertLoops kAvx2Loops = {RunBlocks<uint16_t, float, 8, HalfToFloatBlock>,
                                     RunBlocks<float, uint16_t, 8, FloatToHalfBlock>,
                                     RunBlocks<uint16_t, float, 8, BFloat16ToFloatBlock>,
                                     RunBlocks<float, uint16_t, 16, FloatToBFloat16Block>};
#endif

bool Avx2Available() {
#if PADDLE_HALF_HAVE_AVX2_PATH
  static const bool available = CpuHasAvx2();
  return available;
#else
  return false;
#endif
}

const ConvertLoops& LoopsFor(ConvertPath path) {
  if (path == ConvertPath::kAuto) path = AutoConvertPath();
  if (path == ConvertPath::kPortable) return kPortableLoops;
#if PADDLE_HALF_HAVE_AVX2_PATH
  if (Avx2Available()) return kAvx2Loops;
#endif
  std::fprintf(stderr,
               "paddle/core/half.cc: conversion path \"%s\" requested but this CPU lacks "
               "AVX2/F16C; check ConvertPathAvailable() first\n",
               std::string(ConvertPathName(path)).c_str());
  std::abort();
}

}  // namespace

float HalfToFloat(uint16_t bits) { return HalfToFloatElement(bits); }
uint16_t FloatToHalf(float value) { return FloatToHalfElement(value); }
float BFloat16ToFloat(uint16_t bits) { return BFloat16ToFloatElement(bits); }
uint16_t FloatToBFloat16(float value) { return FloatToBFloat16Element(value); }

bool ConvertPathAvailable(ConvertPath path) {
  return path != ConvertPath::kAvx2 || Avx2Available();
}

absl::string_view ConvertPathName(ConvertPath path) {
  switch (path) {
    case ConvertPath::kAuto:
      return "auto";
    case ConvertPath::kPortable:
      return "portable";
    case ConvertPath::kAvx2:
      return "avx2";
  }
  return "invalid";
}

ConvertPath AutoConvertPath() {
  return Avx2Available() ? ConvertPath::kAvx2 : ConvertPath::kPortable;
}

void HalfToFloat(const uint16_t* in, float* out, size_t n, ConvertPath path) {
  LoopsFor(path).half_to_float(in, out, n);
}

void FloatToHalf(const float* in, uint16_t* out, size_t n, ConvertPath path) {
  LoopsFor(path).float_to_half(in, out, n);
}

void BFloat16ToFloat(const uint16_t* in, float* out, size_t n, ConvertPath path) {
  LoopsFor(path).bfloat16_to_float(in, out, n);
}

void FloatToBFloat16(const float* in, uint16_t* out, size_t n, ConvertPath path) {
  LoopsFor(path).float_to_bfloat16(in, out, n);
}

}  // namespace paddle
