// Inputs from (seed, rank, index) and the element-by-element check of the benchmark's results.
#include "bench/collectives/bench_inputs.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <vector>

#include "paddle/core/half.h"
#include "paddle/core/philox.h"

namespace paddle {
namespace bench {
namespace {

// Calls fn(at, n, drawn) for consecutive runs [at, at + n) covering [begin, begin + count), each
// inside one chunk of kInputChunk elements (Note [Sparse large inputs] in bench_inputs.h), so
// elements are made and checked a chunk at a time and no full-size expected buffer is needed.
template <typename Fn>
void ForEachRun(int64_t begin, int64_t count, Fn fn) {
  const int64_t end = begin + count;
  for (int64_t at = begin; at < end;) {
    const int64_t next = std::min(end, (at / kInputChunk + 1) * kInputChunk);
    fn(at, next - at, InputIsDrawn(at));
    at = next;
  }
}

// The input value of word `w` (bench_inputs.h).
inline int64_t Value(uint32_t w, DType dtype) {
  return dtype == DType::kUInt8 ? static_cast<int64_t>(w % 17) : static_cast<int64_t>(w % 17) - 8;
}

// Words [begin, begin + count) of Philox(seed, rank), one block per four words.
void Words(uint64_t seed, int rank, int64_t begin, int64_t count, uint32_t* out) {
  const Philox philox(seed, static_cast<uint64_t>(rank));
  Philox::Block block{};
  for (int64_t i = 0; i < count; ++i) {
    const uint64_t at = static_cast<uint64_t>(begin + i);
    if (i == 0 || at % 4 == 0) block = philox.BlockAt(at / 4);
    out[i] = block[at % 4];
  }
}

void Store(DType dtype, int64_t value, void* dst, int64_t i) {
  switch (dtype) {
    case DType::kFloat32:
      static_cast<float*>(dst)[i] = static_cast<float>(value);
      return;
    case DType::kFloat64:
      static_cast<double*>(dst)[i] = static_cast<double>(value);
      return;
    case DType::kFloat16:
      static_cast<uint16_t*>(dst)[i] = FloatToHalf(static_cast<float>(value));
      return;
    case DType::kBFloat16:
      static_cast<uint16_t*>(dst)[i] = FloatToBFloat16(static_cast<float>(value));
      return;
    case DType::kInt32:
      static_cast<int32_t*>(dst)[i] = static_cast<int32_t>(value);
      return;
    case DType::kInt64:
      static_cast<int64_t*>(dst)[i] = value;
      return;
    case DType::kInt8:
    case DType::kUInt8:
    case DType::kBool:
      static_cast<uint8_t*>(dst)[i] = static_cast<uint8_t>(value);
      return;
  }
}

// Counts elements of `got` that differ from `want` (both `count` elements of `dtype`).
int64_t Differences(const uint8_t* got, const uint8_t* want, int64_t count, size_t size) {
  if (std::memcmp(got, want, count * size) == 0) return 0;
  int64_t wrong = 0;
  for (int64_t i = 0; i < count; ++i)
    wrong += std::memcmp(got + i * size, want + i * size, size) != 0;
  return wrong;
}

}  // namespace

absl::string_view BenchOpName(BenchOp op) {
  switch (op) {
    case BenchOp::kAllreduce:
      return "allreduce";
    case BenchOp::kAllgather:
      return "allgather";
    case BenchOp::kReduceScatter:
      return "reduce_scatter";
    case BenchOp::kBroadcast:
      return "broadcast";
    case BenchOp::kAlltoall:
      return "alltoall";
  }
  return "invalid";
}

bool SplitsByRank(BenchOp op) {
  return op == BenchOp::kAllgather || op == BenchOp::kReduceScatter || op == BenchOp::kAlltoall;
}

bool ParseBenchOp(absl::string_view name, BenchOp* op) {
  for (BenchOp candidate : {BenchOp::kAllreduce, BenchOp::kAllgather, BenchOp::kReduceScatter,
                            BenchOp::kBroadcast, BenchOp::kAlltoall}) {
    if (name == BenchOpName(candidate)) {
      *op = candidate;
      return true;
    }
  }
  return false;
}

int IterationsFor(int iters, int64_t bytes) {
  constexpr int64_t kFullBytes = 64 << 10;
  constexpr int64_t kMaxFactor = 16;
  const int64_t factor =
      bytes <= 0 ? kMaxFactor : std::clamp<int64_t>(kFullBytes / bytes, 1, kMaxFactor);
  return static_cast<int>(iters * factor);
}

int64_t NextSweepBytes(int64_t bytes, int64_t coarse_from) {
  return bytes * (coarse_from > 0 && bytes >= coarse_from ? 4 : 2);
}

int BudgetedIterations(int iters, int64_t bytes, int64_t budget_bytes, bool warmup) {
  const int plain = IterationsFor(iters, bytes);
  if (budget_bytes <= 0 || bytes <= budget_bytes || iters <= 0) return plain;
  const int floor = std::min(iters, warmup ? 1 : kMinBudgetIters);
  const int64_t scaled = static_cast<int64_t>(iters) * budget_bytes / bytes;
  return static_cast<int>(std::clamp<int64_t>(scaled, floor, plain));
}

void FillInput(DType dtype, uint64_t seed, int rank, int64_t begin, int64_t count, void* dst) {
  const size_t size = DTypeSize(dtype);
  auto* out = static_cast<uint8_t*>(dst);
  std::vector<uint32_t> words(static_cast<size_t>(std::min(count, kInputChunk)));
  ForEachRun(begin, count, [&](int64_t at, int64_t n, bool drawn) {
    uint8_t* to = out + (at - begin) * size;
    if (!drawn) {
      std::memset(to, 0, n * size);  // 0 is all zero bits in every dtype
      return;
    }
    Words(seed, rank, at, n, words.data());
    for (int64_t i = 0; i < n; ++i) Store(dtype, Value(words[i], dtype), to, i);
  });
}

int64_t CountWrong(BenchOp op, DType dtype, uint64_t seed, int rank, int world_size, int64_t count,
                   const void* out) {
  const size_t size = DTypeSize(dtype);
  const auto* got = static_cast<const uint8_t*>(out);
  std::vector<uint8_t> want(kInputChunk * size);
  std::vector<uint32_t> words(kInputChunk);
  std::vector<int64_t> sum(kInputChunk);
  int64_t wrong = 0;
  // Output elements [out_at, out_at + n) must be elements [in_at, in_at + n) of rank r's input.
  auto copied = [&](int r, int64_t in_at, int64_t out_at, int64_t n) {
    ForEachRun(in_at, n, [&](int64_t at, int64_t m, bool /*drawn*/) {
      FillInput(dtype, seed, r, at, m, want.data());
      wrong += Differences(got + (out_at + at - in_at) * size, want.data(), m, size);
    });
  };
  if (op == BenchOp::kAllgather) {
    // Block r of the output is rank r's input.
    const int64_t block = count / world_size;
    for (int r = 0; r < world_size; ++r) copied(r, 0, r * block, block);
    return wrong;
  }
  if (op == BenchOp::kAlltoall) {
    // Block j of the output is block `rank` of rank j's input.
    const int64_t block = count / world_size;
    for (int j = 0; j < world_size; ++j) copied(j, rank * block, j * block, block);
    return wrong;
  }
  if (op == BenchOp::kBroadcast) {
    copied(/*r=*/0, 0, 0, count);
    return wrong;
  }
  // Sums: the whole tensor (allreduce) or this rank's block (reduce_scatter).
  const int64_t length = op == BenchOp::kReduceScatter ? count / world_size : count;
  const int64_t begin = op == BenchOp::kReduceScatter ? rank * length : 0;
  ForEachRun(begin, length, [&](int64_t at, int64_t n, bool drawn) {
    if (drawn) {
      std::fill(sum.begin(), sum.begin() + n, 0);
      for (int r = 0; r < world_size; ++r) {
        Words(seed, r, at, n, words.data());
        for (int64_t i = 0; i < n; ++i) sum[i] += Value(words[i], dtype);
      }
      for (int64_t i = 0; i < n; ++i) Store(dtype, sum[i], want.data(), i);
    } else {
      std::memset(want.data(), 0, n * size);
    }
    wrong += Differences(got + (at - begin) * size, want.data(), n, size);
  });
  return wrong;
}

LatencyStats Latencies(const std::vector<double>& sorted_us) {
  LatencyStats s;
  if (sorted_us.empty()) return s;
  const size_t n = sorted_us.size();
  s.min_us = sorted_us.front();
  s.p50_us = sorted_us[n / 2];
  // Nearest rank: the smallest value with at least 99% of the operations at or below it.
  const size_t rank99 = static_cast<size_t>(std::ceil(0.99 * static_cast<double>(n)));
  s.p99_us = sorted_us[std::clamp<size_t>(rank99, 1, n) - 1];
  s.max_us = sorted_us.back();
  return s;
}

void PrintRowLine(int rank, int64_t bytes, int64_t count, double mean_us,
                  const LatencyStats& latency, int64_t wrong) {
  std::printf(
      "ROW rank=%d bytes=%lld count=%lld time_us=%.3f p50_us=%.3f max_us=%.3f min_us=%.3f "
      "p99_us=%.3f wrong=%lld\n",
      rank, static_cast<long long>(bytes), static_cast<long long>(count), mean_us, latency.p50_us,
      latency.max_us, latency.min_us, latency.p99_us, static_cast<long long>(wrong));
  std::fflush(stdout);
}

}  // namespace bench
}  // namespace paddle
