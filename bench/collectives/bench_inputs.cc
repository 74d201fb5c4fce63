// Inputs from (seed, rank, index) and the element-by-element check of the benchmark's results.
#include "bench/collectives/bench_inputs.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "paddle/core/half.h"
#include "paddle/core/philox.h"

namespace paddle {
namespace bench {
namespace {

// Elements are made and checked in chunks, so no full-size expected buffer is ever needed.
constexpr int64_t kChunk = 4096;

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
  }
  return "invalid";
}

bool ParseBenchOp(absl::string_view name, BenchOp* op) {
  for (BenchOp candidate :
       {BenchOp::kAllreduce, BenchOp::kAllgather, BenchOp::kReduceScatter, BenchOp::kBroadcast}) {
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

void FillInput(DType dtype, uint64_t seed, int rank, int64_t begin, int64_t count, void* dst) {
  std::vector<uint32_t> words(static_cast<size_t>(std::min(count, kChunk)));
  for (int64_t done = 0; done < count; done += kChunk) {
    const int64_t n = std::min(kChunk, count - done);
    Words(seed, rank, begin + done, n, words.data());
    for (int64_t i = 0; i < n; ++i) Store(dtype, Value(words[i], dtype), dst, done + i);
  }
}

int64_t CountWrong(BenchOp op, DType dtype, uint64_t seed, int rank, int world_size, int64_t count,
                   const void* out) {
  const size_t size = DTypeSize(dtype);
  const auto* got = static_cast<const uint8_t*>(out);
  std::vector<uint8_t> want(kChunk * size);
  std::vector<uint32_t> words(kChunk);
  std::vector<int64_t> sum(kChunk);
  int64_t wrong = 0;
  if (op == BenchOp::kAllgather) {
    // Block r of the output is rank r's input.
    const int64_t block = count / world_size;
    for (int r = 0; r < world_size; ++r) {
      for (int64_t done = 0; done < block; done += kChunk) {
        const int64_t n = std::min(kChunk, block - done);
        FillInput(dtype, seed, r, done, n, want.data());
        wrong += Differences(got + (r * block + done) * size, want.data(), n, size);
      }
    }
    return wrong;
  }
  if (op == BenchOp::kBroadcast) {
    for (int64_t done = 0; done < count; done += kChunk) {
      const int64_t n = std::min(kChunk, count - done);
      FillInput(dtype, seed, /*rank=*/0, done, n, want.data());
      wrong += Differences(got + done * size, want.data(), n, size);
    }
    return wrong;
  }
  // Sums: the whole tensor (allreduce) or this rank's block (reduce_scatter).
  const int64_t length = op == BenchOp::kReduceScatter ? count / world_size : count;
  const int64_t begin = op == BenchOp::kReduceScatter ? rank * length : 0;
  for (int64_t done = 0; done < length; done += kChunk) {
    const int64_t n = std::min(kChunk, length - done);
    std::fill(sum.begin(), sum.begin() + n, 0);
    for (int r = 0; r < world_size; ++r) {
      Words(seed, r, begin + done, n, words.data());
      for (int64_t i = 0; i < n; ++i) sum[i] += Value(words[i], dtype);
    }
    for (int64_t i = 0; i < n; ++i) Store(dtype, sum[i], want.data(), i);
    wrong += Differences(got + done * size, want.data(), n, size);
  }
  return wrong;
}

}  // namespace bench
}  // namespace paddle
