// Throughput of the fp16/bf16 <-> fp32 conversions in paddle/core/half.h, which run on every
// fp16/bf16 allreduce. Each direction and format is measured three ways: the AVX2/F16C path, the
// portable path (branch-free, auto-vectorized with baseline SSE2), and the simplest loop calling
// the scalar API once per element, the baseline the other two must beat.
//
// Sizes are the float32 side of the conversion: 4 KiB (in L1), 256 KiB (in L2) and 16 MiB (past
// L2; whether it also passes L3 depends on the machine, so it is not necessarily a DRAM figure).
// Bytes/s counts bytes read plus bytes written (6 per element), comparable with copy bandwidth;
// items/s is elements per second. Every benchmark checks its output once against the scalar loop
// and fails the run on a mismatch.
//
//   bazel run -c opt //bench/core:half_convert_bench
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "benchmark/benchmark.h"
#include "paddle/core/half.h"

namespace paddle {
namespace {

enum class Impl { kScalarLoop, kPortable, kAvx2 };

// One conversion direction: element types, the per-element scalar API and the bulk API.
template <typename InT, typename OutT, OutT (*ScalarFn)(InT),
          void (*BulkFn)(const InT*, OutT*, size_t, ConvertPath)>
struct Direction {
  using In = InT;
  using Out = OutT;

  static void Run(Impl impl, const In* in, Out* out, size_t n) {
    switch (impl) {
      case Impl::kScalarLoop:
        for (size_t i = 0; i < n; ++i) out[i] = ScalarFn(in[i]);
        return;
      case Impl::kPortable:
        return BulkFn(in, out, n, ConvertPath::kPortable);
      case Impl::kAvx2:
        return BulkFn(in, out, n, ConvertPath::kAvx2);
    }
  }
};

using HalfToFloatDir = Direction<uint16_t, float, HalfToFloat, HalfToFloat>;
using FloatToHalfDir = Direction<float, uint16_t, FloatToHalf, FloatToHalf>;
using BFloat16ToFloatDir = Direction<uint16_t, float, BFloat16ToFloat, BFloat16ToFloat>;
using FloatToBFloat16Dir = Direction<float, uint16_t, FloatToBFloat16, FloatToBFloat16>;

// Gradient-like inputs: finite values of mixed sign and magnitude, a few subnormal in half.
void Fill(std::mt19937& rng, std::vector<float>& v) {
  std::normal_distribution<float> dist(0.0f, 1e-2f);
  for (float& x : v) x = dist(rng);
}

void Fill(std::mt19937& rng, std::vector<uint16_t>& v) {
  for (uint16_t& x : v) x = static_cast<uint16_t>(rng());
}

template <typename Dir>
void BM_Convert(benchmark::State& state, Impl impl, size_t float_bytes) {
  if (impl == Impl::kAvx2 && !ConvertPathAvailable(ConvertPath::kAvx2)) {
    state.SkipWithError("this CPU lacks AVX2/F16C");
    return;
  }
  const size_t n = float_bytes / sizeof(float);
  std::mt19937 rng(12345);
  std::vector<typename Dir::In> in(n);
  Fill(rng, in);
  std::vector<typename Dir::Out> out(n), expected(n);
  Dir::Run(Impl::kScalarLoop, in.data(), expected.data(), n);

  for (auto _ : state) {
    Dir::Run(impl, in.data(), out.data(), n);
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  // NaN outputs compare by bits too, which is what the paths promise.
  if (std::memcmp(out.data(), expected.data(), n * sizeof(typename Dir::Out)) != 0) {
    state.SkipWithError("output differs from the scalar loop");
  }
  const int64_t elements = static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(n);
  state.SetItemsProcessed(elements);
  state.SetBytesProcessed(
      elements * static_cast<int64_t>(sizeof(typename Dir::In) + sizeof(typename Dir::Out)));
}

template <typename Dir>
void RegisterDirection(const std::string& name) {
  const std::pair<Impl, const char*> impls[] = {
      {Impl::kAvx2, "avx2"}, {Impl::kPortable, "portable"}, {Impl::kScalarLoop, "scalar_loop"}};
  const std::pair<size_t, const char*> sizes[] = {
      {4u << 10, "4KiB"}, {256u << 10, "256KiB"}, {16u << 20, "16MiB"}};
  for (const auto& size : sizes) {
    for (const auto& impl : impls) {
      const std::string full = name + "/" + impl.second + "/" + size.second;
      benchmark::RegisterBenchmark(full.c_str(), BM_Convert<Dir>, impl.first, size.first)
          ->MinWarmUpTime(0.05);
    }
  }
}

const bool kRegistered = [] {
  RegisterDirection<HalfToFloatDir>("half_to_float");
  RegisterDirection<FloatToHalfDir>("float_to_half");
  RegisterDirection<BFloat16ToFloatDir>("bf16_to_float");
  RegisterDirection<FloatToBFloat16Dir>("float_to_bf16");
  return true;
}();

}  // namespace
}  // namespace paddle
