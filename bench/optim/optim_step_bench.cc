// Throughput of one optimizer Step() (the fused per-parameter loops of paddle/optim) for
// SGD with momentum, Adam, LARS and LAMB, on one float32 parameter of the MLP's size (235K) and of
// the CNN's (1.2M), plus a STREAM-style triad over the same element count as the ceiling to
// compare with.
//
// Bytes/s counts the parameter, gradient and state traffic each rule needs per element, in
// float32 words read + written:
//   SGD momentum  read w, g, buf; write w, buf                                   5 words
//   Adam          read w, g, m, v; write w, m, v                                 7 words
//   LARS          norm pass read w, g; update read w, g, v, write w, v           7 words
//   LAMB          pass 1 read w, g, m, v, write m, v; pass 2 read w, m, v, write w  10 words
//   triad         a = b + s * c                                                  3 words
// 1.2M parameters with state are 14-19 MB: past L2, and past L3 on small machines, so the figures
// are mostly memory-bandwidth figures. After timing, each benchmark checks that the parameter is
// finite and has moved, and fails the run otherwise.
//
//   bazel run -c opt --config=opt //bench/optim:optim_step_bench
#include <cmath>
#include <cstdint>
#include <memory>
#include <vector>

#include "benchmark/benchmark.h"
#include "paddle/core/autograd/variable.h"
#include "paddle/core/philox.h"
#include "paddle/optim/adam.h"
#include "paddle/optim/lamb.h"
#include "paddle/optim/lars.h"
#include "paddle/optim/sgd.h"

namespace paddle::optim {
namespace {

enum class Rule { kSgdMomentum, kAdam, kLars, kLamb };

constexpr int64_t kCols = 1000;

Tensor Filled(int64_t n, uint64_t stream, float scale) {
  Tensor t = *Tensor::Empty({n / kCols, kCols}, DType::kFloat32);
  Philox rng(1, stream);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = scale * rng.NextNormal();
  return t;
}

absl::StatusOr<std::unique_ptr<Optimizer>> Make(Rule rule, autograd::Variable w) {
  auto wrap = [](auto opt) -> absl::StatusOr<std::unique_ptr<Optimizer>> {
    if (!opt.ok()) return opt.status();
    return std::unique_ptr<Optimizer>(std::move(*opt));
  };
  switch (rule) {
    case Rule::kSgdMomentum: {
      SgdOptions o;
      o.lr = 1e-3;
      o.momentum = 0.9;
      o.weight_decay = 1e-4;
      return wrap(Sgd::Create({w}, o));
    }
    case Rule::kAdam:
      return wrap(Adam::Create({w}, AdamOptions{}));
    case Rule::kLars:
      return wrap(Lars::Create({w}, LarsOptions{}));
    case Rule::kLamb:
      return wrap(Lamb::Create({w}, LambOptions{}));
  }
  return absl::InternalError("unknown rule");
}

int64_t WordsPerElement(Rule rule) {
  switch (rule) {
    case Rule::kSgdMomentum:
      return 5;
    case Rule::kAdam:
    case Rule::kLars:
      return 7;
    case Rule::kLamb:
      return 10;
  }
  return 0;
}

void BM_Step(benchmark::State& state, Rule rule) {
  const int64_t n = state.range(0);
  autograd::Variable w(Filled(n, 0, 0.05f), /*requires_grad=*/true, "weight");
  if (!w.set_grad(Filled(n, 1, 1e-3f)).ok()) return state.SkipWithError("set_grad failed");
  auto opt = Make(rule, w);
  if (!opt.ok()) return state.SkipWithError(opt.status().ToString().c_str());
  const float first = w.data().data<float>()[0];
  if (!(*opt)->Step().ok()) return state.SkipWithError("warm-up step failed");
  for (auto _ : state) {
    if (!(*opt)->Step().ok()) return state.SkipWithError("step failed");
  }
  const float* p = w.data().data<float>();
  for (int64_t i = 0; i < n; ++i) {
    if (!std::isfinite(p[i])) return state.SkipWithError("parameter not finite");
  }
  if (p[0] == first) return state.SkipWithError("parameter did not move");
  state.SetBytesProcessed(state.iterations() * n * WordsPerElement(rule) * 4);
  state.SetItemsProcessed(state.iterations() * n);
}

// a = b + s * c, the bandwidth ceiling for comparison.
void BM_Triad(benchmark::State& state) {
  const int64_t n = state.range(0);
  std::vector<float> a(n), b(n, 1.0f), c(n, 2.0f);
  const float s = 0.5f;
  for (auto _ : state) {
    float* pa = a.data();
    const float* pb = b.data();
    const float* pc = c.data();
    for (int64_t i = 0; i < n; ++i) pa[i] = pb[i] + s * pc[i];
    benchmark::DoNotOptimize(pa);
    benchmark::ClobberMemory();
  }
  if (a[n - 1] != 2.0f) return state.SkipWithError("triad result wrong");
  state.SetBytesProcessed(state.iterations() * n * 3 * 4);
  state.SetItemsProcessed(state.iterations() * n);
}

void Sizes(benchmark::internal::Benchmark* b) { b->Arg(235000)->Arg(1200000); }

BENCHMARK_CAPTURE(BM_Step, sgd_momentum, Rule::kSgdMomentum)->Apply(Sizes);
BENCHMARK_CAPTURE(BM_Step, adam, Rule::kAdam)->Apply(Sizes);
BENCHMARK_CAPTURE(BM_Step, lars, Rule::kLars)->Apply(Sizes);
BENCHMARK_CAPTURE(BM_Step, lamb, Rule::kLamb)->Apply(Sizes);
BENCHMARK(BM_Triad)->Apply(Sizes);

}  // namespace
}  // namespace paddle::optim
