// Allreduce bus bandwidth on CUDA tensors, nccl-tests style, 1 MiB to 1 GiB of float32:
//   nccl    backend=nccl, world 1 (the device's own reference: a copy-free no-op reduction)
//   ipc     backend=native, the CUDA IPC path, 2 and 4 processes on the one GPU
//   staging backend=native, PADDLE_CUDA_IPC=0 (pinned host staging + the CPU algorithm), 2
//           processes
// plus the device-to-device cudaMemcpy bandwidth of a 1 GiB copy, the ceiling of the IPC path's
// copies. Ranks are processes (this binary re-executed: `--worker <config> <port> <rank>
// <world>`) meeting through a TcpStoreServer hosted here. Each size runs a warm-up and a few
// iterations (fewer for large sizes, so the whole run stays near a minute on an H200), with
// kAvg so repeated in-place allreduces keep the value; every element is checked after the last
// iteration. busbw = algbw x 2(n-1)/n. Run optimized: `bazel run -c opt --config=opt
// //bench/micro:cuda_allreduce_bench`.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "paddle/collective/communicator.h"
#include "paddle/collective/store/tcp_store.h"
#include "paddle/collective/store/tcp_store_server.h"
#include "paddle/core/cuda/cuda_allocator.h"
#include "paddle/core/cuda/cuda_copy.h"
#include "paddle/core/cuda/cuda_status.h"
#include "paddle/core/tensor.h"
#include "paddle/testing/child_processes.h"

namespace paddle {
namespace {

constexpr int64_t kMinBytes = int64_t{1} << 20;
constexpr int64_t kMaxBytes = int64_t{1} << 30;

int Fail(const std::string& what, const absl::Status& s) {
  std::printf("ERROR %s: %s\n", what.c_str(), s.ToString().c_str());
  return 1;
}

// One rank: prints "ROW <bytes> <count> <time_us> <algbw> <busbw> <wrong>" lines on rank 0.
int Worker(const std::string& config, int port, int rank, int world) {
  TcpStoreOptions store_options;
  store_options.host = "127.0.0.1";
  store_options.port = port;
  absl::StatusOr<std::unique_ptr<TcpStore>> store = TcpStore::Connect(store_options);
  if (!store.ok()) return Fail("store", store.status());
  CommunicatorOptions options;
  options.backend = config == "nccl" ? Backend::kNccl : Backend::kNative;
  options.store = std::shared_ptr<Store>(std::move(*store));
  options.rank = rank;
  options.world_size = world;
  absl::StatusOr<std::unique_ptr<Communicator>> comm = Communicator::Create(options);
  if (!comm.ok()) return Fail("create", comm.status());
  Communicator& c = **comm;
  for (int64_t bytes = kMinBytes; bytes <= kMaxBytes; bytes *= 4) {
    const int64_t count = bytes / 4;
    Tensor host = *Tensor::Empty({count}, DType::kFloat32);
    float* h = host.data<float>();
    for (int64_t i = 0; i < count; ++i) h[i] = static_cast<float>((rank + i) % 5);
    absl::StatusOr<Tensor> t = ToDevice(host, Device::Cuda(0));
    if (!t.ok()) return Fail("upload", t.status());
    const int iters = static_cast<int>(std::clamp<int64_t>((int64_t{256} << 20) / bytes, 3, 20));
    absl::Status s = c.Allreduce(*t, ReduceOp::kAvg)->Wait();  // warm-up
    if (s.ok()) s = c.Barrier()->Wait();
    const absl::Time start = absl::Now();
    for (int k = 0; s.ok() && k < iters; ++k) s = c.Allreduce(*t, ReduceOp::kAvg)->Wait();
    const double seconds = absl::ToDoubleSeconds(absl::Now() - start) / iters;
    if (!s.ok()) return Fail(absl::StrCat("allreduce of ", bytes, " bytes"), s);
    absl::StatusOr<Tensor> back = ToDevice(*t, Device::Cpu());
    if (!back.ok()) return Fail("download", back.status());
    int64_t wrong = 0;
    const float* g = back->data<float>();
    for (int64_t i = 0; i < count; ++i) {
      float sum = 0;
      for (int r = 0; r < world; ++r) sum += static_cast<float>((r + i) % 5);
      if (g[i] != sum / static_cast<float>(world)) ++wrong;
    }
    const double algbw = static_cast<double>(bytes) / seconds / 1e9;
    const double busbw = algbw * 2.0 * (world - 1) / world;
    if (rank == 0) {
      std::printf("ROW %lld %lld %.1f %.2f %.2f %lld\n", static_cast<long long>(bytes),
                  static_cast<long long>(count), seconds * 1e6, algbw, busbw,
                  static_cast<long long>(wrong));
    }
    if (wrong > 0) {
      std::printf("ERROR rank %d: %lld wrong elements at %lld bytes\n", rank,
                  static_cast<long long>(wrong), static_cast<long long>(bytes));
      return 1;
    }
  }
  std::fflush(stdout);
  return 0;
}

// Runs one configuration and prints its table; false if a rank failed.
bool RunConfig(const std::string& config, int world) {
  TcpStoreServerOptions server_options;
  server_options.host = "127.0.0.1";
  absl::StatusOr<std::unique_ptr<TcpStoreServer>> server = TcpStoreServer::Start(server_options);
  if (!server.ok()) {
    std::printf("store server: %s\n", server.status().ToString().c_str());
    return false;
  }
  setenv("PADDLE_CUDA_IPC", config == "staging" ? "0" : "1", 1);
  std::vector<ChildSpec> specs(world);
  for (int r = 0; r < world; ++r) {
    specs[r].argv = {SelfPath(),      "--worker",         config, absl::StrCat((*server)->port()),
                     absl::StrCat(r), absl::StrCat(world)};
  }
  std::vector<ChildProcess> workers = RunChildren(specs, absl::Seconds(120));
  std::printf("\n# %s, %d process%s on one GPU, float32 allreduce (avg)\n", config.c_str(), world,
              world == 1 ? "" : "es");
  std::printf("# %12s %12s %12s %10s %10s %8s\n", "size(B)", "count", "time(us)", "algbw", "busbw",
              "#wrong");
  bool ok = true;
  for (const ChildProcess& w : workers) {
    if (w.exit_code != 0) {
      ok = false;
      std::printf("# rank process failed (exit %d):\n%s\n", w.exit_code, w.Output().c_str());
    }
  }
  for (absl::string_view line : absl::StrSplit(workers[0].Output(), '\n')) {
    if (!absl::StartsWith(line, "ROW ")) continue;
    std::vector<std::string> f = absl::StrSplit(line.substr(4), ' ');
    if (f.size() != 6) continue;
    std::printf("  %12s %12s %12s %10s %10s %8s\n", f[0].c_str(), f[1].c_str(), f[2].c_str(),
                f[3].c_str(), f[4].c_str(), f[5].c_str());
  }
  std::fflush(stdout);
  return ok;
}

// Device-to-device cudaMemcpy of 1 GiB: bytes copied per second (read + write is twice that).
bool MemcpyBandwidth() {
  void* a = nullptr;
  void* b = nullptr;
  cudaEvent_t start, stop;
  const size_t bytes = size_t{1} << 30;
  if (cudaMalloc(&a, bytes) != cudaSuccess || cudaMalloc(&b, bytes) != cudaSuccess ||
      cudaEventCreate(&start) != cudaSuccess || cudaEventCreate(&stop) != cudaSuccess) {
    std::printf("memcpy: %s\n", cudaGetErrorString(cudaGetLastError()));
    return false;
  }
  (void)cudaMemcpy(b, a, bytes, cudaMemcpyDeviceToDevice);  // warm-up
  constexpr int kIters = 5;
  (void)cudaEventRecord(start, nullptr);
  for (int i = 0; i < kIters; ++i) (void)cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice);
  (void)cudaEventRecord(stop, nullptr);
  const cudaError_t e = cudaEventSynchronize(stop);  // a few ms of copies: no deadline needed
  float ms = 0;
  (void)cudaEventElapsedTime(&ms, start, stop);
  std::printf("\n# device-to-device cudaMemcpy, 1 GiB x %d: %.1f GB/s copied (%s)\n", kIters,
              bytes * kIters / (ms / 1e3) / 1e9, cudaGetErrorString(e));
  (void)cudaFree(a);
  (void)cudaFree(b);
  return e == cudaSuccess;
}

int Main() {
  absl::StatusOr<int> devices = CudaDeviceCount();
  if (!devices.ok() || *devices == 0) {
    std::printf("cuda_allreduce_bench needs a GPU: %s\n",
                devices.ok() ? "no device" : devices.status().ToString().c_str());
    return 1;
  }
  const absl::Time start = absl::Now();
  bool ok = RunConfig("nccl", 1);
  ok = RunConfig("ipc", 2) && ok;
  ok = RunConfig("ipc", 4) && ok;
  ok = RunConfig("staging", 2) && ok;
  ok = MemcpyBandwidth() && ok;
  std::printf("\n# total %s\n", absl::FormatDuration(absl::Now() - start).c_str());
  return ok ? 0 : 1;
}

}  // namespace
}  // namespace paddle

int main(int argc, char** argv) {
  if (argc == 6 && std::string(argv[1]) == "--worker") {
    return paddle::Worker(argv[2], std::atoi(argv[3]), std::atoi(argv[4]), std::atoi(argv[5]));
  }
  return paddle::Main();
}
