// The reduction kernels; semantics in Note [Reduction semantics] in reduction.h. Layers:
//   1. per-element functions (ElementOp), the one definition of each operation: the portable loops
//      and the tails of the AVX2 loops both call them, so the two paths cannot drift apart;
//   2. AVX2 lane types (one per element type, each giving load, store and the four operations on
//      a 256-bit register) and one unrolled loop over them, all compiled for "avx2,f16c,fma" with a
//      function attribute only;
//   3. float16/bfloat16 wrappers that convert a block to float32, reduce it with the float32
//      kernel of the same path and convert it back;
//   4. a lookup from (path, dtype, op) to a kernel, kAuto resolved from GetCpuFeatures().
#include "paddle/collective/reduction.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <initializer_list>
#include <string>
#include <type_traits>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "paddle/core/cpu_features.h"
#include "paddle/core/half.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define PADDLE_REDUCTION_HAVE_AVX2_PATH 1
#else
#define PADDLE_REDUCTION_HAVE_AVX2_PATH 0
#endif

namespace paddle {
namespace {

// The kernel signature: n elements, inout op= in.
using Kernel = void (*)(void* inout, const void* in, size_t n);

// Elements per float16/bfloat16 block: two float32 blocks of 4 KiB each stay in L1 while they are
// converted, combined and converted back.
constexpr size_t kHalfBlock = 1024;

// ---- 1. Element operations ----

template <typename T>
using Unsigned = std::make_unsigned_t<T>;

// Bitwise OR / AND of two floats (or doubles): min(-0, +0) = -0 and max(-0, +0) = +0 whatever the
// operand order, and equal non-zero values are unchanged.
template <typename F>
F BitOr(F a, F b) {
  using Bits = std::conditional_t<sizeof(F) == 4, uint32_t, uint64_t>;
  Bits x, y;
  std::memcpy(&x, &a, sizeof(F));
  std::memcpy(&y, &b, sizeof(F));
  x |= y;
  std::memcpy(&a, &x, sizeof(F));
  return a;
}

template <typename F>
F BitAnd(F a, F b) {
  using Bits = std::conditional_t<sizeof(F) == 4, uint32_t, uint64_t>;
  Bits x, y;
  std::memcpy(&x, &a, sizeof(F));
  std::memcpy(&y, &b, sizeof(F));
  x &= y;
  std::memcpy(&a, &x, sizeof(F));
  return a;
}

template <typename T, ReduceOp kOp>
struct ElementOp;

template <typename T>
struct ElementOp<T, ReduceOp::kSum> {
  static T Apply(T a, T b) {
    if constexpr (std::is_integral_v<T>) {
      // Unsigned arithmetic wraps by definition; signed overflow would be undefined.
      return static_cast<T>(static_cast<Unsigned<T>>(a) + static_cast<Unsigned<T>>(b));
    } else {
      return a + b;
    }
  }
};

template <typename T>
struct ElementOp<T, ReduceOp::kProd> {
  static T Apply(T a, T b) {
    if constexpr (std::is_integral_v<T>) {
      // uint8 promotes to int (no overflow: 255 * 255 fits); wider types multiply as unsigned.
      using U = std::conditional_t<(sizeof(T) < sizeof(unsigned)), unsigned, Unsigned<T>>;
      return static_cast<T>(static_cast<U>(static_cast<Unsigned<T>>(a)) *
                            static_cast<U>(static_cast<Unsigned<T>>(b)));
    } else {
      return a * b;
    }
  }
};

template <typename T>
struct ElementOp<T, ReduceOp::kMin> {
  static T Apply(T a, T b) {
    if constexpr (std::is_integral_v<T>) {
      return b < a ? b : a;
    } else {
      // Selects rather than branches: random data would mispredict every other branch.
      T r = a < b ? a : b;
      r = a == b ? BitOr(a, b) : r;
      r = b != b ? b : r;  // NaN in `in`
      return a != a ? a : r;
    }
  }
};

template <typename T>
struct ElementOp<T, ReduceOp::kMax> {
  static T Apply(T a, T b) {
    if constexpr (std::is_integral_v<T>) {
      return b > a ? b : a;
    } else {
      T r = a > b ? a : b;
      r = a == b ? BitAnd(a, b) : r;
      r = b != b ? b : r;
      return a != a ? a : r;
    }
  }
};

template <typename T, ReduceOp kOp>
void PortableLoop(void* inout, const void* in, size_t n) {
  T* a = static_cast<T*>(inout);
  const T* b = static_cast<const T*>(in);
  for (size_t i = 0; i < n; ++i) a[i] = ElementOp<T, kOp>::Apply(a[i], b[i]);
}

template <typename T>
void PortableDivide(T* data, size_t n, T divisor) {
  for (size_t i = 0; i < n; ++i) data[i] /= divisor;
}

// ---- 2. AVX2 lanes and loop ----

#if PADDLE_REDUCTION_HAVE_AVX2_PATH
#define PADDLE_TARGET_AVX2 __attribute__((target("avx2,f16c,fma")))

struct Float32Lanes {
  using T = float;
  using V = __m256;
  PADDLE_TARGET_AVX2 static V Load(const T* p) { return _mm256_loadu_ps(p); }
  PADDLE_TARGET_AVX2 static void Store(T* p, V v) { _mm256_storeu_ps(p, v); }
  PADDLE_TARGET_AVX2 static V Sum(V a, V b) { return _mm256_add_ps(a, b); }
  PADDLE_TARGET_AVX2 static V Prod(V a, V b) { return _mm256_mul_ps(a, b); }
  // VMINPS returns its second operand when either is NaN or both are equal (+-0); the blends
  // give ElementOp's answer: equal -> OR of the bits (-0 wins), NaN in `a` -> `a`.
  PADDLE_TARGET_AVX2 static V Min(V a, V b) {
    V m = _mm256_min_ps(a, b);
    m = _mm256_blendv_ps(m, _mm256_or_ps(a, b), _mm256_cmp_ps(a, b, _CMP_EQ_OQ));
    return _mm256_blendv_ps(m, a, _mm256_cmp_ps(a, a, _CMP_UNORD_Q));
  }
  PADDLE_TARGET_AVX2 static V Max(V a, V b) {
    V m = _mm256_max_ps(a, b);
    m = _mm256_blendv_ps(m, _mm256_and_ps(a, b), _mm256_cmp_ps(a, b, _CMP_EQ_OQ));
    return _mm256_blendv_ps(m, a, _mm256_cmp_ps(a, a, _CMP_UNORD_Q));
  }
  PADDLE_TARGET_AVX2 static V Div(V a, V b) { return _mm256_div_ps(a, b); }
  PADDLE_TARGET_AVX2 static V Splat(T x) { return _mm256_set1_ps(x); }
};

struct Float64Lanes {
  using T = double;
  using V = __m256d;
  PADDLE_TARGET_AVX2 static V Load(const T* p) { return _mm256_loadu_pd(p); }
  PADDLE_TARGET_AVX2 static void Store(T* p, V v) { _mm256_storeu_pd(p, v); }
  PADDLE_TARGET_AVX2 static V Sum(V a, V b) { return _mm256_add_pd(a, b); }
  PADDLE_TARGET_AVX2 static V Prod(V a, V b) { return _mm256_mul_pd(a, b); }
  PADDLE_TARGET_AVX2 static V Min(V a, V b) {
    V m = _mm256_min_pd(a, b);
    m = _mm256_blendv_pd(m, _mm256_or_pd(a, b), _mm256_cmp_pd(a, b, _CMP_EQ_OQ));
    return _mm256_blendv_pd(m, a, _mm256_cmp_pd(a, a, _CMP_UNORD_Q));
  }
  PADDLE_TARGET_AVX2 static V Max(V a, V b) {
    V m = _mm256_max_pd(a, b);
    m = _mm256_blendv_pd(m, _mm256_and_pd(a, b), _mm256_cmp_pd(a, b, _CMP_EQ_OQ));
    return _mm256_blendv_pd(m, a, _mm256_cmp_pd(a, a, _CMP_UNORD_Q));
  }
  PADDLE_TARGET_AVX2 static V Div(V a, V b) { return _mm256_div_pd(a, b); }
  PADDLE_TARGET_AVX2 static V Splat(T x) { return _mm256_set1_pd(x); }
};

// Load/store of integer lanes, shared by the integer lane types.
template <typename Elem>
struct IntegerLanesBase {
  using T = Elem;
  using V = __m256i;
  PADDLE_TARGET_AVX2 static V Load(const T* p) {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  }
  PADDLE_TARGET_AVX2 static void Store(T* p, V v) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), v);
  }
};

struct Int32Lanes : IntegerLanesBase<int32_t> {
  PADDLE_TARGET_AVX2 static V Sum(V a, V b) { return _mm256_add_epi32(a, b); }
  PADDLE_TARGET_AVX2 static V Prod(V a, V b) { return _mm256_mullo_epi32(a, b); }
  PADDLE_TARGET_AVX2 static V Min(V a, V b) { return _mm256_min_epi32(a, b); }
  PADDLE_TARGET_AVX2 static V Max(V a, V b) { return _mm256_max_epi32(a, b); }
};

struct Int64Lanes : IntegerLanesBase<int64_t> {
  PADDLE_TARGET_AVX2 static V Sum(V a, V b) { return _mm256_add_epi64(a, b); }
  // AVX2 has no 64-bit multiply: a*b mod 2^64 = lo*lo + ((hi_a*lo_b + lo_a*hi_b) << 32).
  PADDLE_TARGET_AVX2 static V Prod(V a, V b) {
    const V lolo = _mm256_mul_epu32(a, b);
    const V cross = _mm256_add_epi64(_mm256_mul_epu32(_mm256_srli_epi64(a, 32), b),
                                     _mm256_mul_epu32(a, _mm256_srli_epi64(b, 32)));
    return _mm256_add_epi64(lolo, _mm256_slli_epi64(cross, 32));
  }
  PADDLE_TARGET_AVX2 static V Min(V a, V b) {
    return _mm256_blendv_epi8(a, b, _mm256_cmpgt_epi64(a, b));
  }
  PADDLE_TARGET_AVX2 static V Max(V a, V b) {
    return _mm256_blendv_epi8(b, a, _mm256_cmpgt_epi64(a, b));
  }
};

// No 8-bit multiply either: multiply the even and the odd bytes as 16-bit lanes and keep the low
// byte of each product. The low 8 bits of a product are the same for signed and unsigned bytes.
PADDLE_TARGET_AVX2 inline __m256i MulBytes(__m256i a, __m256i b) {
  const __m256i even = _mm256_mullo_epi16(a, b);
  const __m256i odd = _mm256_mullo_epi16(_mm256_srli_epi16(a, 8), _mm256_srli_epi16(b, 8));
  return _mm256_or_si256(_mm256_and_si256(even, _mm256_set1_epi16(0x00ff)),
                         _mm256_slli_epi16(odd, 8));
}

struct UInt8Lanes : IntegerLanesBase<uint8_t> {
  PADDLE_TARGET_AVX2 static V Sum(V a, V b) { return _mm256_add_epi8(a, b); }
  PADDLE_TARGET_AVX2 static V Prod(V a, V b) { return MulBytes(a, b); }
  PADDLE_TARGET_AVX2 static V Min(V a, V b) { return _mm256_min_epu8(a, b); }
  PADDLE_TARGET_AVX2 static V Max(V a, V b) { return _mm256_max_epu8(a, b); }
};

struct Int8Lanes : IntegerLanesBase<int8_t> {
  PADDLE_TARGET_AVX2 static V Sum(V a, V b) { return _mm256_add_epi8(a, b); }
  PADDLE_TARGET_AVX2 static V Prod(V a, V b) { return MulBytes(a, b); }
  PADDLE_TARGET_AVX2 static V Min(V a, V b) { return _mm256_min_epi8(a, b); }
  PADDLE_TARGET_AVX2 static V Max(V a, V b) { return _mm256_max_epi8(a, b); }
};

template <typename L, ReduceOp kOp>
PADDLE_TARGET_AVX2 inline typename L::V ApplyLanes(typename L::V a, typename L::V b) {
  if constexpr (kOp == ReduceOp::kSum) {
    return L::Sum(a, b);
  } else if constexpr (kOp == ReduceOp::kProd) {
    return L::Prod(a, b);
  } else if constexpr (kOp == ReduceOp::kMin) {
    return L::Min(a, b);
  } else {
    static_assert(kOp == ReduceOp::kMax, "kAvg is mapped to kSum before lookup");
    return L::Max(a, b);
  }
}

// Four registers per iteration hide the latency of the dependent load-op-store chains; the tail
// (fewer than one register) goes through ElementOp, whose results are the same by construction.
template <typename L, ReduceOp kOp>
PADDLE_TARGET_AVX2 void Avx2Loop(void* inout, const void* in, size_t n) {
  using T = typename L::T;
  constexpr size_t kLanes = 32 / sizeof(T);
  T* a = static_cast<T*>(inout);
  const T* b = static_cast<const T*>(in);
  size_t i = 0;
  for (; i + 4 * kLanes <= n; i += 4 * kLanes) {
    const auto r0 = ApplyLanes<L, kOp>(L::Load(a + i), L::Load(b + i));
    const auto r1 = ApplyLanes<L, kOp>(L::Load(a + i + kLanes), L::Load(b + i + kLanes));
    const auto r2 = ApplyLanes<L, kOp>(L::Load(a + i + 2 * kLanes), L::Load(b + i + 2 * kLanes));
    const auto r3 = ApplyLanes<L, kOp>(L::Load(a + i + 3 * kLanes), L::Load(b + i + 3 * kLanes));
    L::Store(a + i, r0);
    L::Store(a + i + kLanes, r1);
    L::Store(a + i + 2 * kLanes, r2);
    L::Store(a + i + 3 * kLanes, r3);
  }
  for (; i + kLanes <= n; i += kLanes) {
    L::Store(a + i, ApplyLanes<L, kOp>(L::Load(a + i), L::Load(b + i)));
  }
  for (; i < n; ++i) a[i] = ElementOp<T, kOp>::Apply(a[i], b[i]);
}

template <typename L>
PADDLE_TARGET_AVX2 void Avx2Divide(typename L::T* data, size_t n, typename L::T divisor) {
  constexpr size_t kLanes = 32 / sizeof(typename L::T);
  const auto d = L::Splat(divisor);
  size_t i = 0;
  for (; i + kLanes <= n; i += kLanes) L::Store(data + i, L::Div(L::Load(data + i), d));
  for (; i < n; ++i) data[i] /= divisor;
}

#endif  // PADDLE_REDUCTION_HAVE_AVX2_PATH

bool Avx2Available() {
#if PADDLE_REDUCTION_HAVE_AVX2_PATH
  const CpuFeatures& cpu = GetCpuFeatures();
  return cpu.avx2 && cpu.f16c && cpu.fma;
#else
  return false;
#endif
}

// ---- 3. float16 / bfloat16 through float32 ----

// The conversions of one 16-bit format, bound to a conversion path.
struct HalfFormat {
  void (*to_float)(const uint16_t*, float*, size_t, ConvertPath);
  void (*from_float)(const float*, uint16_t*, size_t, ConvertPath);
};

constexpr HalfFormat kHalfFormat = {HalfToFloat, FloatToHalf};
constexpr HalfFormat kBFloat16Format = {BFloat16ToFloat, FloatToBFloat16};

ConvertPath ConvertPathFor(ReducePath path) {
  return path == ReducePath::kAvx2 ? ConvertPath::kAvx2 : ConvertPath::kPortable;
}

// Converts both operands block by block, combines them with `float_kernel` and rounds back once.
template <const HalfFormat& kFormat, ReducePath kPath>
void HalfLoop(void* inout, const void* in, size_t n, Kernel float_kernel) {
  uint16_t* a = static_cast<uint16_t*>(inout);
  const uint16_t* b = static_cast<const uint16_t*>(in);
  float fa[kHalfBlock];
  float fb[kHalfBlock];
  const ConvertPath cpath = ConvertPathFor(kPath);
  for (size_t i = 0; i < n; i += kHalfBlock) {
    const size_t m = std::min(kHalfBlock, n - i);
    kFormat.to_float(a + i, fa, m, cpath);
    kFormat.to_float(b + i, fb, m, cpath);
    float_kernel(fa, fb, m);
    kFormat.from_float(fa, a + i, m, cpath);
  }
}

Kernel Float32Kernel(ReducePath path, ReduceOp op);

template <const HalfFormat& kFormat, ReducePath kPath, ReduceOp kOp>
void HalfKernel(void* inout, const void* in, size_t n) {
  HalfLoop<kFormat, kPath>(inout, in, n, Float32Kernel(kPath, kOp));
}

// ---- 4. Lookup ----

template <typename T, ReduceOp kOp>
Kernel KernelFor(ReducePath path) {
#if PADDLE_REDUCTION_HAVE_AVX2_PATH
  if (path == ReducePath::kAvx2) {
    if constexpr (std::is_same_v<T, float>) return Avx2Loop<Float32Lanes, kOp>;
    if constexpr (std::is_same_v<T, double>) return Avx2Loop<Float64Lanes, kOp>;
    if constexpr (std::is_same_v<T, int32_t>) return Avx2Loop<Int32Lanes, kOp>;
    if constexpr (std::is_same_v<T, int64_t>) return Avx2Loop<Int64Lanes, kOp>;
    if constexpr (std::is_same_v<T, uint8_t>) return Avx2Loop<UInt8Lanes, kOp>;
    if constexpr (std::is_same_v<T, int8_t>) return Avx2Loop<Int8Lanes, kOp>;
  }
#endif
  return PortableLoop<T, kOp>;
}

// `op` is one of kSum, kProd, kMin, kMax here (kAvg was mapped to kSum).
template <typename T>
Kernel KernelFor(ReducePath path, ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg:
      return KernelFor<T, ReduceOp::kSum>(path);
    case ReduceOp::kProd:
      return KernelFor<T, ReduceOp::kProd>(path);
    case ReduceOp::kMin:
      return KernelFor<T, ReduceOp::kMin>(path);
    case ReduceOp::kMax:
      return KernelFor<T, ReduceOp::kMax>(path);
  }
  return nullptr;
}

Kernel Float32Kernel(ReducePath path, ReduceOp op) { return KernelFor<float>(path, op); }

template <const HalfFormat& kFormat, ReducePath kPath>
Kernel HalfKernelFor(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg:
      return HalfKernel<kFormat, kPath, ReduceOp::kSum>;
    case ReduceOp::kProd:
      return HalfKernel<kFormat, kPath, ReduceOp::kProd>;
    case ReduceOp::kMin:
      return HalfKernel<kFormat, kPath, ReduceOp::kMin>;
    case ReduceOp::kMax:
      return HalfKernel<kFormat, kPath, ReduceOp::kMax>;
  }
  return nullptr;
}

template <const HalfFormat& kFormat>
Kernel HalfKernelFor(ReducePath path, ReduceOp op) {
  return path == ReducePath::kAvx2 ? HalfKernelFor<kFormat, ReducePath::kAvx2>(op)
                                   : HalfKernelFor<kFormat, ReducePath::kPortable>(op);
}

// `path` is resolved (not kAuto) and available; (dtype, op) passed CheckReduction.
Kernel LookupKernel(ReducePath path, DType dtype, ReduceOp op) {
  switch (dtype) {
    case DType::kFloat32:
      return KernelFor<float>(path, op);
    case DType::kFloat64:
      return KernelFor<double>(path, op);
    case DType::kFloat16:
      return HalfKernelFor<kHalfFormat>(path, op);
    case DType::kBFloat16:
      return HalfKernelFor<kBFloat16Format>(path, op);
    case DType::kInt8:
      return KernelFor<int8_t>(path, op);
    case DType::kUInt8:
      return KernelFor<uint8_t>(path, op);
    case DType::kInt32:
      return KernelFor<int32_t>(path, op);
    case DType::kInt64:
      return KernelFor<int64_t>(path, op);
    case DType::kBool:
      break;
  }
  return nullptr;
}

// Resolves kAuto; kInvalidArgument if kAvx2 is asked for on a CPU without it.
absl::StatusOr<ReducePath> ResolvePath(ReducePath path) {
  if (path == ReducePath::kAuto) {
    return Avx2Available() ? ReducePath::kAvx2 : ReducePath::kPortable;
  }
  if (path == ReducePath::kAvx2 && !Avx2Available()) {
    return absl::InvalidArgumentError(
        "reduction path avx2 requested but this CPU lacks AVX2/F16C/FMA; use ReducePath::kAuto "
        "or check ReducePathAvailable() first");
  }
  return path;
}

absl::Status CheckBuffer(const void* p, int64_t count, absl::string_view what) {
  if (count < 0) return absl::InvalidArgumentError(absl::StrCat(what, ": negative count ", count));
  if (count > 0 && p == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": null buffer for ", count, " elements"));
  }
  return absl::OkStatus();
}

struct ReduceOpNames {
  ReduceOp op;
  absl::string_view name;
  std::initializer_list<absl::string_view> aliases;
};

const ReduceOpNames kReduceOpNames[] = {
    {ReduceOp::kSum, "sum", {}},
    {ReduceOp::kAvg, "avg", {"mean"}},
    {ReduceOp::kMin, "min", {}},
    {ReduceOp::kMax, "max", {}},
    {ReduceOp::kProd, "prod", {"product"}},
};

}  // namespace

absl::string_view ReduceOpName(ReduceOp op) {
  for (const ReduceOpNames& entry : kReduceOpNames) {
    if (entry.op == op) return entry.name;
  }
  return "invalid";
}

absl::StatusOr<ReduceOp> ParseReduceOp(absl::string_view name) {
  std::string valid;
  for (const ReduceOpNames& entry : kReduceOpNames) {
    if (absl::EqualsIgnoreCase(name, entry.name)) return entry.op;
    absl::StrAppend(&valid, valid.empty() ? "" : ", ", entry.name);
    for (absl::string_view alias : entry.aliases) {
      if (absl::EqualsIgnoreCase(name, alias)) return entry.op;
      absl::StrAppend(&valid, ", ", alias);
    }
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown reduce op \"", name, "\"; expected one of: ", valid));
}

bool ReducePathAvailable(ReducePath path) { return path != ReducePath::kAvx2 || Avx2Available(); }

absl::string_view ReducePathName(ReducePath path) {
  switch (path) {
    case ReducePath::kAuto:
      return "auto";
    case ReducePath::kPortable:
      return "portable";
    case ReducePath::kAvx2:
      return "avx2";
  }
  return "invalid";
}

absl::Status CheckReduction(DType dtype, ReduceOp op) {
  if (ReduceOpName(op) == "invalid") {
    return absl::InvalidArgumentError(
        absl::StrCat("invalid reduce op value ", static_cast<int>(op)));
  }
  if (dtype == DType::kBool) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cannot reduce bool with ", ReduceOpName(op),
        ": bool has no arithmetic; cast to uint8 (max = any, min = all, sum = count)"));
  }
  if (DTypeSize(dtype) == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("invalid dtype value ", static_cast<int>(dtype), " for reduction"));
  }
  if (op == ReduceOp::kAvg && !IsFloatingPoint(dtype)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "avg is not defined for integer dtype ", DTypeName(dtype),
        " (the mean of integers is not an integer); reduce with sum and divide, or use a "
        "floating-point dtype"));
  }
  return absl::OkStatus();
}

absl::Status Reduce(void* inout, const void* in, int64_t count, DType dtype, ReduceOp op,
                    ReducePath path) {
  if (absl::Status s = CheckReduction(dtype, op); !s.ok()) return s;
  if (absl::Status s = CheckBuffer(inout, count, "Reduce inout"); !s.ok()) return s;
  if (absl::Status s = CheckBuffer(in, count, "Reduce in"); !s.ok()) return s;
  absl::StatusOr<ReducePath> resolved = ResolvePath(path);
  if (!resolved.ok()) return resolved.status();
  if (count == 0) return absl::OkStatus();
  LookupKernel(*resolved, dtype, op)(inout, in, static_cast<size_t>(count));
  return absl::OkStatus();
}

absl::Status FinishAvg(void* data, int64_t count, DType dtype, int world_size, ReducePath path) {
  if (absl::Status s = CheckReduction(dtype, ReduceOp::kAvg); !s.ok()) return s;
  if (absl::Status s = CheckBuffer(data, count, "FinishAvg"); !s.ok()) return s;
  if (world_size < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("FinishAvg: world size must be at least 1, got ", world_size));
  }
  absl::StatusOr<ReducePath> resolved = ResolvePath(path);
  if (!resolved.ok()) return resolved.status();
  if (count == 0 || world_size == 1) return absl::OkStatus();
  const size_t n = static_cast<size_t>(count);
  const bool avx2 = *resolved == ReducePath::kAvx2;

  auto divide_float = [&](float* p, size_t m) {
#if PADDLE_REDUCTION_HAVE_AVX2_PATH
    if (avx2) return Avx2Divide<Float32Lanes>(p, m, static_cast<float>(world_size));
#endif
    PortableDivide(p, m, static_cast<float>(world_size));
  };
  auto divide_half = [&](const HalfFormat& format) {
    uint16_t* p = static_cast<uint16_t*>(data);
    float block[kHalfBlock];
    const ConvertPath cpath = ConvertPathFor(*resolved);
    for (size_t i = 0; i < n; i += kHalfBlock) {
      const size_t m = std::min(kHalfBlock, n - i);
      format.to_float(p + i, block, m, cpath);
      divide_float(block, m);
      format.from_float(block, p + i, m, cpath);
    }
  };

  switch (dtype) {
    case DType::kFloat32:
      divide_float(static_cast<float*>(data), n);
      break;
    case DType::kFloat64:
#if PADDLE_REDUCTION_HAVE_AVX2_PATH
      if (avx2) {
        Avx2Divide<Float64Lanes>(static_cast<double*>(data), n, world_size);
        break;
      }
#endif
      PortableDivide(static_cast<double*>(data), n, static_cast<double>(world_size));
      break;
    case DType::kFloat16:
      divide_half(kHalfFormat);
      break;
    case DType::kBFloat16:
      divide_half(kBFloat16Format);
      break;
    default:
      break;  // integers were rejected by CheckReduction
  }
  return absl::OkStatus();
}

}  // namespace paddle
