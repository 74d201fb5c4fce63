// Benchmarks of the CNN's and MLP's layers at batch 128 on paddle/ops/cpu, forward + backward,
// with 1 and 2 threads (the argument). Each benchmark checks one output element against a direct
// computation before timing. Reported: time per iteration and GFLOP/s (the layer's multiply-adds
// x 2, forward + backward = 3x forward for conv and linear).
//
//   bazel run -c opt --config=opt //bench/ops:ops_bench
//   /usr/bin/python3 bench/ops/torch_ops.py    # the same layers in PyTorch
#include <cmath>
#include <cstdlib>

#include "benchmark/benchmark.h"
#include "paddle/core/philox.h"
#include "paddle/ops/cpu/activation.h"
#include "paddle/ops/cpu/conv2d.h"
#include "paddle/ops/cpu/linear.h"
#include "paddle/ops/cpu/pool2d.h"
#include "paddle/ops/cpu/threading.h"

namespace paddle {
namespace ops {
namespace cpu {
namespace {

constexpr int64_t kBatch = 128;

Tensor Random(absl::Span<const int64_t> shape, uint64_t seed) {
  Tensor t = Tensor::Empty(shape, DType::kFloat32).value();
  Philox rng(seed, 0);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = rng.NextFloat() - 0.5f;
  return t;
}

// A logical [n, c, h, w] tensor laid out channels-last, as the convolutions produce activations.
Tensor RandomChannelsLast(int64_t n, int64_t c, int64_t h, int64_t w, uint64_t seed) {
  return Random({n, h, w, c}, seed).Transpose(1, 3).value().Transpose(2, 3).value();
}

void Fail(benchmark::State& state, const std::string& what) { state.SkipWithError(what.c_str()); }

// Conv forward + backward (dx, dw, db). Args: threads, C, H, K.
void BM_Conv(benchmark::State& state) {
  SetNumThreads(static_cast<int>(state.range(0)));
  const int64_t c = state.range(1), h = state.range(2), k = state.range(3);
  const bool need_dx = c > 1;
  Tensor x = RandomChannelsLast(kBatch, c, h, h, 1);
  Tensor w = Random({k, c, 3, 3}, 2);
  Tensor b = Random({k}, 3);
  Conv2dOptions o;
  Tensor y = Conv2dForward(x, w, &b, o).value();
  // Check y[0, 0, 0, 0] directly.
  double ref = b.data<float>()[0];
  for (int64_t ch = 0; ch < c; ++ch)
    for (int r = 0; r < 3; ++r)
      for (int s = 0; s < 3; ++s)
        ref += static_cast<double>(*x.At<float>({0, ch, r, s}).value()) *
               w.data<float>()[(ch * 3 + r) * 3 + s];
  if (std::fabs(*y.At<float>({0, 0, 0, 0}).value() - ref) > 1e-3) return Fail(state, "wrong y");
  Tensor dy = RandomChannelsLast(kBatch, k, h - 2, h - 2, 4);
  for (auto _ : state) {
    Tensor out = Conv2dForward(x, w, &b, o).value();
    Conv2dGrads g = Conv2dBackward(x, w, dy, o, need_dx, true).value();
    benchmark::DoNotOptimize(g.dw.data());
  }
  const double oh = h - 2;
  const double fwd = 2.0 * kBatch * k * oh * oh * c * 9;
  state.counters["GFLOP/s"] = benchmark::Counter(fwd * (need_dx ? 3 : 2) * state.iterations() / 1e9,
                                                 benchmark::Counter::kIsRate);
}
BENCHMARK(BM_Conv)
    ->ArgNames({"threads", "C", "H", "K"})
    ->Args({1, 1, 28, 32})
    ->Args({2, 1, 28, 32})
    ->Args({1, 32, 26, 64})
    ->Args({2, 32, 26, 64})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// Linear forward + backward (dx, dw, db). Args: threads, in, out.
void BM_Linear(benchmark::State& state) {
  SetNumThreads(static_cast<int>(state.range(0)));
  const int64_t in = state.range(1), out = state.range(2);
  Tensor x = Random({kBatch, in}, 1);
  Tensor w = Random({out, in}, 2);
  Tensor b = Random({out}, 3);
  Tensor y = LinearForward(x, w, &b).value();
  double ref = b.data<float>()[0];
  for (int64_t i = 0; i < in; ++i)
    ref += static_cast<double>(x.data<float>()[i]) * w.data<float>()[i];
  if (std::fabs(y.data<float>()[0] - ref) > 1e-3) return Fail(state, "wrong y");
  Tensor dy = Random(y.shape(), 4);
  for (auto _ : state) {
    Tensor o = LinearForward(x, w, &b).value();
    LinearGrads g = LinearBackward(x, w, dy, true, true).value();
    benchmark::DoNotOptimize(g.dw.data());
  }
  state.counters["GFLOP/s"] = benchmark::Counter(
      3 * 2.0 * kBatch * in * out * state.iterations() / 1e9, benchmark::Counter::kIsRate);
}
BENCHMARK(BM_Linear)
    ->ArgNames({"threads", "in", "out"})
    ->Args({1, 9216, 128})
    ->Args({2, 9216, 128})
    ->Args({1, 784, 256})
    ->Args({2, 784, 256})
    ->Args({1, 256, 128})
    ->Args({2, 256, 128})
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();

// 2x2 max-pool forward + backward on the CNN's [128, 64, 24, 24] activation, channels-last as the
// conv leaves it. Args: threads.
void BM_MaxPool(benchmark::State& state) {
  SetNumThreads(static_cast<int>(state.range(0)));
  Tensor x0 = Random({kBatch, 32, 26, 26}, 1);
  Tensor w = Random({64, 32, 3, 3}, 2);
  Tensor x = Conv2dForward(x0, w, nullptr, {}).value();  // channels-last
  Pool2dOptions o{2, 2, 2, 2};
  MaxPool2dResult r = MaxPool2dForward(x, o).value();
  const float* xp = x.data<float>();
  const auto& st = x.strides();
  float m = xp[0];
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 2; ++j) m = std::max(m, xp[i * st[2] + j * st[3]]);
  if (*r.y.At<float>({0, 0, 0, 0}).value() != m) return Fail(state, "wrong y");
  Tensor dy = Random(r.y.shape(), 4);
  for (auto _ : state) {
    MaxPool2dResult f = MaxPool2dForward(x, o).value();
    Tensor dx = MaxPool2dBackward(x, f, dy, o).value();
    benchmark::DoNotOptimize(dx.data());
  }
  // Bytes moved: read x, write y, read dy, write dx.
  state.counters["GB/s"] = benchmark::Counter(
      (x.nbytes() * 2 + r.y.nbytes() * 2) * static_cast<double>(state.iterations()) / 1e9,
      benchmark::Counter::kIsRate);
}
BENCHMARK(BM_MaxPool)
    ->ArgName("threads")
    ->Arg(1)
    ->Arg(2)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace
}  // namespace cpu
}  // namespace ops
}  // namespace paddle
