// Half (IEEE 754 binary16) and BFloat16 (the upper 16 bits of a binary32): the 2-byte formats that
// gradients travel in. Collectives reduce in float32 and convert at the edges, so the bulk
// conversions below sit on the hot path of every fp16/bf16 allreduce. They choose, once per
// process, an AVX2/F16C implementation when the CPU has one and a portable one otherwise; the
// binary itself is built for baseline x86-64 and runs anywhere.
//
// Note [Conversion semantics]
// - float -> 16 bit rounds to nearest, ties to even. Results beyond the largest finite value
//   become +-Inf; subnormal results are produced, never flushed; tiny values round to +-0.
// - 16 bit -> float is exact.
// - NaN stays NaN: the sign is kept, the top payload bits are kept as far as they fit, and the
//   result is always quiet (a signalling NaN comes out quiet, as F16C hardware does). A NaN whose
//   payload sits only in the dropped low bits still comes out NaN, never Inf.
// - Every path (scalar, portable, AVX2, the CUDA kernels in paddle/ops/cuda) gives the same bits;
//   tests/core/half_test.cc checks that exhaustively. As with all C++ arithmetic, the
//   floating-point rounding mode must be the default (round to nearest);
//   flush-to-zero/denormals-are-zero modes do not change any result.
#ifndef PADDLE_CORE_HALF_H_
#define PADDLE_CORE_HALF_H_

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "absl/strings/string_view.h"

namespace paddle {

// Scalar conversions, for single values and tests; use the bulk forms below for arrays.
float HalfToFloat(uint16_t bits);
uint16_t FloatToHalf(float value);
float BFloat16ToFloat(uint16_t bits);
uint16_t FloatToBFloat16(float value);

// Storage types for tensor elements. No arithmetic on purpose: code converts to float, computes,
// and converts back, so rounding happens where the reader can see it.
struct Half {
  uint16_t bits;

  Half() = default;
  explicit Half(float value) : bits(FloatToHalf(value)) {}
  explicit operator float() const { return HalfToFloat(bits); }
  static constexpr Half FromBits(uint16_t bits) {
    Half h{};
    h.bits = bits;
    return h;
  }
};

struct BFloat16 {
  uint16_t bits;

  BFloat16() = default;
  explicit BFloat16(float value) : bits(FloatToBFloat16(value)) {}
  explicit operator float() const { return BFloat16ToFloat(bits); }
  static constexpr BFloat16 FromBits(uint16_t bits) {
    BFloat16 b{};
    b.bits = bits;
    return b;
  }
};

// Buffers of these are reinterpreted as uint16_t arrays and sent over the wire as is.
static_assert(sizeof(Half) == 2 && std::is_trivially_copyable<Half>::value, "Half layout");
static_assert(sizeof(BFloat16) == 2 && std::is_trivially_copyable<BFloat16>::value,
              "BFloat16 layout");

// Which implementation a bulk conversion uses. kAuto is the fastest one this CPU supports, chosen
// once and cached; the others exist so tests and benchmarks can compare paths on one machine.
enum class ConvertPath { kAuto, kPortable, kAvx2 };

// kAuto and kPortable are always available; kAvx2 needs an x86-64 CPU with AVX2 and F16C.
bool ConvertPathAvailable(ConvertPath path);
// "auto", "portable", "avx2".
absl::string_view ConvertPathName(ConvertPath path);
// The path kAuto resolves to on this machine (kPortable or kAvx2).
ConvertPath AutoConvertPath();

// Bulk conversions of n elements. Any n (including 0) and any element-aligned pointers are fine;
// `in` and `out` must not overlap. Asking for a path that is not available aborts with a message:
// it is a programming error, and falling back silently would let a test pass on the wrong path.
void HalfToFloat(const uint16_t* in, float* out, size_t n, ConvertPath path = ConvertPath::kAuto);
void FloatToHalf(const float* in, uint16_t* out, size_t n, ConvertPath path = ConvertPath::kAuto);
void BFloat16ToFloat(const uint16_t* in, float* out, size_t n,
                     ConvertPath path = ConvertPath::kAuto);
void FloatToBFloat16(const float* in, uint16_t* out, size_t n,
                     ConvertPath path = ConvertPath::kAuto);

}  // namespace paddle

#endif  // PADDLE_CORE_HALF_H_
