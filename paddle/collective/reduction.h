// Reduction kernels: the arithmetic of allreduce, reduce and reduce-scatter.
//
// `Reduce(inout, in, count, dtype, op)` sets inout[i] = inout[i] op in[i]. Every collective
// algorithm calls it on each piece it receives, so it sits on the critical path of every
// gradient allreduce. Each kernel exists twice: an AVX2 version (compiled for that target with a
// function attribute, so the binary stays baseline x86-64) and a portable one; `ReducePath::kAuto`
// picks the AVX2 one when the CPU has AVX2, F16C and FMA (paddle/core/cpu_features.h;
// PADDLE_CPU_BASELINE=1 forces the portable one). Both paths give the same bits.
//
// Note [Reduction semantics]
// - Floating point (float32, float64): IEEE arithmetic in the element type, round to nearest.
//   float16 and bfloat16 are computed in float32: each call converts both operands, combines
//   them and rounds the result back once. Work is done in blocks of a few KiB so the float32
//   intermediates stay in L1.
// - kAvg combines like kSum; the caller divides once, at the end, with FinishAvg (every algorithm
//   in paddle/collective/algorithms does). Averaging integers is kInvalidArgument, as in PyTorch:
//   the quotient is not an integer, and silently truncating it would hide the mistake.
// - Integers (int8, uint8, int32, int64): kSum and kProd wrap modulo 2^bits (two's complement),
//   as NCCL and PyTorch do; there is no undefined behaviour on overflow. bool has no arithmetic
//   reduction: cast to uint8 (kMax is "any", kMin is "all").
// - kMin and kMax on floating point follow IEEE 754-2019 minimum/maximum: a NaN in either operand
//   gives a NaN (the one from `inout` if both are NaN), Inf compares as usual (min(-Inf, x) is
//   -Inf, max(+Inf, x) is +Inf), and -0 is smaller than +0. The result therefore does not depend
//   on the order of the operands, except for which NaN payload survives: recursive doubling, where
//   ranks combine in opposite orders, gives every rank the same bits. kSum and kProd are
//   commutative bit for bit too (IEEE), again up to NaN payloads.
#ifndef PADDLE_COLLECTIVE_REDUCTION_H_
#define PADDLE_COLLECTIVE_REDUCTION_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "paddle/core/dtype.h"

namespace paddle {

enum class ReduceOp : uint8_t { kSum, kAvg, kMin, kMax, kProd };

// "sum", "avg", "min", "max", "prod"; "invalid" for a value outside the enum.
absl::string_view ReduceOpName(ReduceOp op);

// Accepts the names above and "mean", "product", "avg"; ignores case. The error lists every
// accepted name.
absl::StatusOr<ReduceOp> ParseReduceOp(absl::string_view name);

// Which implementation a kernel uses. kAuto is the fastest one this CPU supports; the others exist
// so tests and benchmarks can compare paths on one machine.
enum class ReducePath { kAuto, kPortable, kAvx2 };

// kAuto and kPortable are always available; kAvx2 needs an x86-64 CPU with AVX2, F16C and FMA.
bool ReducePathAvailable(ReducePath path);
// "auto", "portable", "avx2".
absl::string_view ReducePathName(ReducePath path);

// OK if `op` can reduce `dtype`; else kInvalidArgument saying why and what to do instead. The
// algorithms call this before sending anything, so a bad request fails on every rank alike.
absl::Status CheckReduction(DType dtype, ReduceOp op);

// inout[i] = inout[i] op in[i] for i in [0, count). `inout` and `in` are element-aligned; they may
// be the same pointer but must not otherwise overlap. count 0 is fine (pointers may then be null).
// Errors (kInvalidArgument): CheckReduction fails, count < 0, a null pointer with count > 0, or
// kAvx2 requested on a CPU without it.
absl::Status Reduce(void* inout, const void* in, int64_t count, DType dtype, ReduceOp op,
                    ReducePath path = ReducePath::kAuto);

// Completes a kAvg reduction: data[i] /= world_size, for floating-point dtypes (float16/bfloat16
// computed in float32 and rounded once). A true division, not a multiplication by 1/world_size,
// so an exact sum of small integers gives the correctly rounded mean. kInvalidArgument for
// integer dtypes, world_size < 1, count < 0 or a null pointer with count > 0.
absl::Status FinishAvg(void* data, int64_t count, DType dtype, int world_size,
                       ReducePath path = ReducePath::kAuto);

}  // namespace paddle

#endif  // PADDLE_COLLECTIVE_REDUCTION_H_
