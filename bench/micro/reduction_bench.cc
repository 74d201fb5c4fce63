// Throughput of the reduction kernels (paddle/collective/reduction.h), which every allreduce runs
// on each piece it receives. Each dtype x op is measured on the AVX2 path and on the portable path
// (plain loops the compiler may vectorize with baseline SSE2), at two sizes per operand: 64 KiB
// (both operands fit in L2) and 64 MiB (streams from memory).
//
// bytes_per_second counts what the kernel moves: inout read, in read, inout written (3 bytes per
// byte of the buffer), so it compares with copy bandwidth. Every benchmark first checks its output
// against the portable path's and fails the run on a mismatch.
//
//   bazel run -c opt //bench/micro:reduction_bench
//   bazel run -c opt //bench/micro:reduction_bench -- --benchmark_filter=float16
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "benchmark/benchmark.h"
#include "paddle/collective/reduction.h"
#include "paddle/core/dtype.h"
#include "paddle/core/half.h"
#include "paddle/core/philox.h"

namespace paddle {
namespace {

constexpr DType kDTypes[] = {DType::kFloat32, DType::kFloat64, DType::kFloat16, DType::kBFloat16,
                             DType::kInt32,   DType::kInt64,   DType::kUInt8};
constexpr ReduceOp kOps[] = {ReduceOp::kSum, ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kProd};
constexpr ReducePath kPaths[] = {ReducePath::kAvx2, ReducePath::kPortable};
constexpr size_t kSizes[] = {size_t{64} << 10, size_t{64} << 20};

// Floats in [1, 1.125) (see the loop in BM_Reduce); small integers; random bytes.
std::vector<uint8_t> MakeBuffer(DType dtype, size_t count, uint64_t stream) {
  std::vector<uint8_t> bytes(count * DTypeSize(dtype));
  Philox rng(1234, stream);
  for (size_t i = 0; i < count; ++i) {
    const uint32_t r = rng.WordAt(i);
    const float f = 1.0f + static_cast<float>(r % 1024) / 8192.0f;
    void* p = bytes.data() + i * DTypeSize(dtype);
    switch (dtype) {
      case DType::kFloat32:
        std::memcpy(p, &f, 4);
        break;
      case DType::kFloat64: {
        const double d = f;
        std::memcpy(p, &d, 8);
        break;
      }
      case DType::kFloat16: {
        const uint16_t h = FloatToHalf(f);
        std::memcpy(p, &h, 2);
        break;
      }
      case DType::kBFloat16: {
        const uint16_t b = FloatToBFloat16(f);
        std::memcpy(p, &b, 2);
        break;
      }
      case DType::kInt32: {
        const int32_t v = static_cast<int32_t>(r % 201) - 100;
        std::memcpy(p, &v, 4);
        break;
      }
      case DType::kInt64: {
        const int64_t v = static_cast<int64_t>(r % 201) - 100;
        std::memcpy(p, &v, 8);
        break;
      }
      default:
        *static_cast<uint8_t*>(p) = static_cast<uint8_t>(r);
        break;
    }
  }
  return bytes;
}

void BM_Reduce(benchmark::State& state, DType dtype, ReduceOp op, ReducePath path, size_t bytes) {
  if (!ReducePathAvailable(path)) {
    state.SkipWithError("this CPU lacks AVX2/F16C/FMA");
    return;
  }
  const size_t count = bytes / DTypeSize(dtype);
  std::vector<uint8_t> inout = MakeBuffer(dtype, count, 0);
  const std::vector<uint8_t> in = MakeBuffer(dtype, count, 1);

  // Check once against the portable path.
  std::vector<uint8_t> got = inout, want = inout;
  if (!Reduce(got.data(), in.data(), count, dtype, op, path).ok() ||
      !Reduce(want.data(), in.data(), count, dtype, op, ReducePath::kPortable).ok() ||
      got != want) {
    state.SkipWithError("result differs from the portable path");
    return;
  }

  for (auto _ : state) {
    // Reducing the same buffers over and over drifts the values: sums and products of inputs
    // >= 1 grow towards Inf, which costs the same as any other value. They never become
    // subnormal, the one case that would slow the arithmetic down.
    benchmark::DoNotOptimize(Reduce(inout.data(), in.data(), count, dtype, op, path));
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * 3 *
                          static_cast<int64_t>(bytes));
}

const bool kRegistered = [] {
  for (DType dtype : kDTypes) {
    for (ReduceOp op : kOps) {
      for (ReducePath path : kPaths) {
        for (size_t bytes : kSizes) {
          const std::string name = absl::StrCat("Reduce/", DTypeName(dtype), "/", ReduceOpName(op),
                                                "/", ReducePathName(path), "/", bytes >> 10, "KiB");
          benchmark::RegisterBenchmark(name.c_str(), BM_Reduce, dtype, op, path, bytes)
              ->Unit(benchmark::kMicrosecond);
        }
      }
    }
  }
  return true;
}();

}  // namespace
}  // namespace paddle
