// Throughput of saving and loading a 50 MB training state (a model's weights plus optimizer
// moments of the same shapes, a few ints and strings), in MB/s of tensor bytes (1 MB = 1e6 B):
//
//   Crc32        zlib crc32 over the 50 MB alone: the checksum's ceiling
//   WriteFile    WriteCheckpointFile to a file, no fsync: format + page-cache cost
//   Save         CheckpointManager::Save: temporary file, fsync, rename, directory fsync, prune
//   SaveStrided  Save of the same state as transposed (non-contiguous) views
//   Load         CheckpointManager::Load: read, checksum and check every tensor
//
// Files go to $PADDLE_BENCH_DIR, else $TEST_TMPDIR, else /tmp; Save and Load figures are those of
// that file system (fsync on a disk costs far more than on tmpfs). Load compares the loaded state
// with the saved one once and fails the run on any difference.
//
//   bazel run -c opt --config=opt //bench/checkpoint:checkpoint_bench
#include <fcntl.h>
#include <unistd.h>
#include <zlib.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>

#include "benchmark/benchmark.h"
#include "paddle/checkpoint/checkpoint.h"
#include "paddle/core/philox.h"
#include "paddle/core/settings.h"

namespace paddle {
namespace checkpoint {
namespace {

constexpr int64_t kTargetBytes = 50'000'000;

std::string BenchDir(const std::string& name) {
  std::optional<std::string> base = StringSetting("PADDLE_BENCH_DIR");
  if (!base.has_value() && std::getenv("TEST_TMPDIR") != nullptr) base = std::getenv("TEST_TMPDIR");
  const std::string dir =
      base.value_or("/tmp") + "/checkpoint_bench." + std::to_string(getpid()) + "." + name;
  std::filesystem::remove_all(dir);
  return dir;
}

Tensor RandomTensor(Shape shape, uint64_t seed) {
  Tensor t = *Tensor::Empty(shape, DType::kFloat32);
  Philox rng(seed, 0);
  float* p = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = rng.NextNormal();
  return t;
}

// Layers of [1024, 1024] and [1024] (weight, bias), each with two Adam moments, until 50 MB.
CheckpointState MakeState(bool strided) {
  CheckpointState state;
  int64_t bytes = 0;
  for (int layer = 0; bytes < kTargetBytes; ++layer) {
    for (const char* kind : {"param", "adam.m", "adam.v"}) {
      const std::string prefix = std::string(kind) + "/layer" + std::to_string(layer);
      Tensor w = RandomTensor({1024, 1024}, 3 * layer + bytes);
      state.tensors[prefix + ".weight"] = strided ? *w.Transpose(0, 1) : w;
      state.tensors[prefix + ".bias"] = RandomTensor({1024}, 7 * layer + bytes);
      bytes += (1024 * 1024 + 1024) * 4;
    }
  }
  state.ints["data/position"] = 123456;
  state.strings["rng/philox"] = "seed=1;stream=0;offset=99";
  return state;
}

int64_t StateBytes(const CheckpointState& state) {
  int64_t bytes = 0;
  for (const auto& [name, t] : state.tensors) bytes += static_cast<int64_t>(t.nbytes());
  return bytes;
}

void Report(benchmark::State& bm, int64_t bytes) {
  bm.SetBytesProcessed(bm.iterations() * bytes);
  bm.counters["MB/s"] = benchmark::Counter(static_cast<double>(bytes) / 1e6,
                                           benchmark::Counter::kIsIterationInvariantRate);
  bm.counters["MB"] = static_cast<double>(bytes) / 1e6;
}

void BM_Crc32(benchmark::State& bm) {
  const CheckpointState state = MakeState(false);
  for (auto _ : bm) {
    uLong crc = 0;
    for (const auto& [name, t] : state.tensors) {
      crc = crc32_z(crc, static_cast<const Bytef*>(t.data()), t.nbytes());
    }
    benchmark::DoNotOptimize(crc);
  }
  Report(bm, StateBytes(state));
}

void BM_WriteFile(benchmark::State& bm) {
  const CheckpointState state = MakeState(false);
  const std::string dir = BenchDir("write");
  std::filesystem::create_directories(dir);
  const std::string path = dir + "/ckpt.pdk";
  for (auto _ : bm) {
    const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const absl::Status s = WriteCheckpointFile(fd, path, 1, state);
    close(fd);
    if (!s.ok()) bm.SkipWithError(s.ToString().c_str());
  }
  Report(bm, StateBytes(state));
  std::filesystem::remove_all(dir);
}

void SaveBench(benchmark::State& bm, bool strided) {
  const CheckpointState state = MakeState(strided);
  const std::string dir = BenchDir(strided ? "save_strided" : "save");
  CheckpointManager manager(dir, /*keep_last=*/2);
  int64_t step = 0;
  for (auto _ : bm) {
    const absl::Status s = manager.Save(step++, state);
    if (!s.ok()) bm.SkipWithError(s.ToString().c_str());
  }
  Report(bm, StateBytes(state));
  std::filesystem::remove_all(dir);
}

void BM_Save(benchmark::State& bm) { SaveBench(bm, false); }
void BM_SaveStrided(benchmark::State& bm) { SaveBench(bm, true); }

void BM_Load(benchmark::State& bm) {
  const CheckpointState state = MakeState(false);
  const std::string dir = BenchDir("load");
  CheckpointManager manager(dir);
  absl::Status saved = manager.Save(1, state);
  if (!saved.ok()) {
    bm.SkipWithError(saved.ToString().c_str());
    return;
  }
  const std::string path = manager.PathForStep(1);
  bool checked = false;
  for (auto _ : bm) {
    absl::StatusOr<CheckpointState> loaded = manager.Load(path);
    if (!loaded.ok()) {
      bm.SkipWithError(loaded.status().ToString().c_str());
      break;
    }
    if (!checked) {
      checked = true;
      for (const auto& [name, t] : state.tensors) {
        const Tensor& got = loaded->tensors.at(name);
        if (got.shape() != t.shape() || std::memcmp(got.data(), t.data(), t.nbytes()) != 0) {
          bm.SkipWithError(("loaded tensor differs: " + name).c_str());
        }
      }
    }
  }
  Report(bm, StateBytes(state));
  std::filesystem::remove_all(dir);
}

BENCHMARK(BM_Crc32)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_WriteFile)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_Save)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_SaveStrided)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_Load)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
}  // namespace checkpoint
}  // namespace paddle
