// The native backend on CUDA tensors across real processes sharing the one GPU (CUDA IPC cannot
// open a handle in the process that exported it, so ranks are processes, not threads). This
// binary is also the worker: `native_cuda_test --worker <port> <rank> <world> <mode>`.
//   - mode "ops": every operation x float32/float16/bfloat16/int32 x 0, 1, 1000, 2^20 and
//     64 MiB + 3 elements, inputs from (seed, rank, index), results copied back and checked
//     element by element; on 2, 3 and 4 processes, with PADDLE_CUDA_IPC=1 (the IPC path, which
//     the log must confirm) and =0 (staging);
//   - mode "kill": 4 processes loop over a 64 MiB allreduce on the IPC path; rank 2 kills itself;
//     the others must fail within the timeout with an error naming rank 2.
// Without a usable GPU every case skips, naming CUDA's reason.
#include <signal.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "paddle/collective/communicator.h"
#include "paddle/collective/store/tcp_store.h"
#include "paddle/collective/store/tcp_store_server.h"
#include "paddle/core/half.h"
#include "paddle/core/tensor.h"
#include "tests/collective/transport/transport_test_harness.h"
#include "tests/testing/gpu_test.h"
#if PADDLE_WITH_CUDA
#include "paddle/core/cuda/cuda_copy.h"
#endif

namespace paddle {
namespace {

#if PADDLE_WITH_CUDA
// ---- The worker ----

int64_t Value(int seed, int rank, int64_t i) { return (seed * 31 + rank * 7 + i * 13) % 17 - 8; }

double Get(const Tensor& t, int64_t i) {
  switch (t.dtype()) {
    case DType::kFloat32:
      return t.data<float>()[i];
    case DType::kFloat16:
      return HalfToFloat(static_cast<const uint16_t*>(t.data())[i]);
    case DType::kBFloat16:
      return BFloat16ToFloat(static_cast<const uint16_t*>(t.data())[i]);
    default:
      return t.data<int32_t>()[i];
  }
}

void Set(Tensor& t, int64_t i, double v) {
  switch (t.dtype()) {
    case DType::kFloat32:
      t.data<float>()[i] = static_cast<float>(v);
      break;
    case DType::kFloat16:
      static_cast<uint16_t*>(t.data())[i] = FloatToHalf(static_cast<float>(v));
      break;
    case DType::kBFloat16:
      static_cast<uint16_t*>(t.data())[i] = FloatToBFloat16(static_cast<float>(v));
      break;
    default:
      t.data<int32_t>()[i] = static_cast<int32_t>(v);
  }
}

// A CUDA tensor of n elements with element i = f(i).
Tensor Gpu(DType dtype, int64_t n, const std::function<double(int64_t)>& f) {
  Tensor host = *Tensor::Empty({n}, dtype);
  for (int64_t i = 0; i < n; ++i) Set(host, i, f(i));
  absl::StatusOr<Tensor> gpu = ToDevice(host, Device::Cuda(0));
  PADDLE_CHECK(gpu.ok()) << gpu.status();
  return *gpu;
}

// Copies `gpu` back and compares element i with want(i); returns "" or the first mismatches.
std::string Check(const Tensor& gpu, const std::function<double(int64_t)>& want, double rel_tol,
                  int64_t begin = 0, int64_t end = -1) {
  absl::StatusOr<Tensor> host = ToDevice(gpu, Device::Cpu());
  if (!host.ok()) return host.status().ToString();
  if (end < 0) end = host->numel();
  std::string bad;
  int shown = 0;
  for (int64_t i = begin; i < end && shown < 5; ++i) {
    const double w = want(i);
    const double g = Get(*host, i);
    if (std::fabs(g - w) > rel_tol * std::fabs(w)) {
      absl::StrAppend(&bad, " [", i, "] got ", g, " want ", w, ";");
      ++shown;
    }
  }
  return bad;
}

int RunOps(Communicator& c) {
  const int n = c.world_size();
  const int me = c.rank();
  int failures = 0;
  auto expect = [&](const std::string& what, const absl::Status& s, const std::string& bad) {
    if (s.ok() && bad.empty()) return;
    ++failures;
    std::printf("FAIL %s: %s%s\n", what.c_str(), s.ToString().c_str(), bad.c_str());
  };
  for (DType dtype : {DType::kFloat32, DType::kFloat16, DType::kBFloat16, DType::kInt32}) {
    const bool is_float = dtype != DType::kInt32;
    const int64_t big = static_cast<int64_t>((size_t{64} << 20) / DTypeSize(dtype)) + 3;
    for (int64_t count : {int64_t{0}, int64_t{1}, int64_t{1000}, int64_t{1} << 20, big}) {
      const std::string where = absl::StrCat(DTypeName(dtype), " x ", count, " on ", n);
      int seed = 0;
      auto sum = [&](int64_t i) {
        double s = 0;
        for (int r = 0; r < n; ++r) s += Value(seed, r, i);
        return s;
      };
      // Allreduce: sum, max, and avg for floating point.
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kAvg}) {
        if (op == ReduceOp::kAvg && !is_float) continue;
        ++seed;
        Tensor t = Gpu(dtype, count, [&](int64_t i) { return Value(seed, me, i); });
        const absl::Status s = c.Allreduce(t, op)->Wait();
        expect(absl::StrCat("allreduce ", ReduceOpName(op), " ", where), s,
               Check(
                   t,
                   [&](int64_t i) {
                     if (op == ReduceOp::kSum) return sum(i);
                     if (op == ReduceOp::kAvg) return sum(i) / n;
                     double m = -1e9;
                     for (int r = 0; r < n; ++r) m = std::max<double>(m, Value(seed, r, i));
                     return m;
                   },
                   op == ReduceOp::kAvg ? 1e-2 : 0));
      }
      ++seed;
      {
        Tensor t = Gpu(dtype, count, [&](int64_t i) { return Value(seed, me, i); });
        expect("broadcast " + where, c.Broadcast(t, n - 1)->Wait(),
               Check(
                   t, [&](int64_t i) { return Value(seed, n - 1, i); }, 0));
      }
      ++seed;
      {
        Tensor t = Gpu(dtype, count, [&](int64_t i) { return Value(seed, me, i); });
        const absl::Status s = c.Reduce(t, 0, ReduceOp::kSum)->Wait();
        expect("reduce " + where, s, me == 0 ? Check(t, sum, 0) : "");
      }
      ++seed;
      {
        Tensor in = Gpu(dtype, count, [&](int64_t i) { return Value(seed, me, i); });
        Tensor out = Gpu(dtype, n * count, [](int64_t) { return 0; });
        expect(
            "allgather " + where, c.Allgather(in, out)->Wait(),
            Check(
                out, [&](int64_t i) { return Value(seed, static_cast<int>(i / count), i % count); },
                0));
      }
      ++seed;
      {
        std::vector<int64_t> counts;
        int64_t total = 0;
        for (int r = 0; r < n; ++r) counts.push_back(count + r), total += count + r;
        Tensor in = Gpu(dtype, count + me, [&](int64_t i) { return Value(seed, me, i); });
        Tensor out = Gpu(dtype, total, [](int64_t) { return 0; });
        const absl::Status s = c.Allgatherv(in, out, counts)->Wait();
        std::string bad;
        int64_t off = 0;
        for (int r = 0; r < n; ++r) {
          bad += Check(
              out, [&](int64_t i) { return Value(seed, r, i - off); }, 0, off, off + counts[r]);
          off += counts[r];
        }
        expect("allgatherv " + where, s, bad);
      }
      ++seed;
      {
        Tensor in = Gpu(dtype, n * count, [&](int64_t i) { return Value(seed, me, i); });
        Tensor out = Gpu(dtype, count, [](int64_t) { return 0; });
        expect("reduce_scatter " + where, c.ReduceScatter(in, out, ReduceOp::kSum)->Wait(),
               Check(
                   out, [&](int64_t i) { return sum(me * count + i); }, 0));
      }
      ++seed;
      {
        Tensor in = Gpu(dtype, n * count, [&](int64_t i) { return Value(seed, me, i); });
        Tensor out = Gpu(dtype, n * count, [](int64_t) { return 0; });
        expect("alltoall " + where, c.Alltoall(in, out)->Wait(),
               Check(
                   out,
                   [&](int64_t i) {
                     return Value(seed, static_cast<int>(i / count), me * count + i % count);
                   },
                   0));
        Tensor out2 = Gpu(dtype, n * count, [](int64_t) { return 0; });
        const std::vector<int64_t> counts(static_cast<size_t>(n), count);
        expect("alltoallv " + where, c.Alltoallv(in, out2, counts, counts)->Wait(),
               Check(
                   out2,
                   [&](int64_t i) {
                     return Value(seed, static_cast<int>(i / count), me * count + i % count);
                   },
                   0));
      }
      ++seed;
      {
        // A ring of Send/Recv: even ranks send first, odd ranks receive first.
        Tensor send = Gpu(dtype, count, [&](int64_t i) { return Value(seed, me, i); });
        Tensor recv = Gpu(dtype, count, [](int64_t) { return 0; });
        std::shared_ptr<Work> a, b;
        if (me % 2 == 0) {
          a = c.Send(send, (me + 1) % n, 7);
          b = c.Recv(recv, (me + n - 1) % n, 7);
        } else {
          b = c.Recv(recv, (me + n - 1) % n, 7);
          a = c.Send(send, (me + 1) % n, 7);
        }
        absl::Status s = a->Wait();
        if (s.ok()) s = b->Wait();
        expect("send/recv " + where, s,
               Check(
                   recv, [&](int64_t i) { return Value(seed, (me + n - 1) % n, i); }, 0));
      }
      expect("barrier " + where, c.Barrier()->Wait(), "");
      if (failures > 0) return 1;
    }
  }
  return 0;
}

int RunKill(Communicator& c) {
  const int64_t count = int64_t{16} << 20;  // 64 MiB of float32
  Tensor t = Gpu(DType::kFloat32, count, [](int64_t i) { return i % 7; });
  for (int iter = 0; iter < 200; ++iter) {
    if (iter == 3 && c.rank() == 2) raise(SIGKILL);
    const absl::Status s = c.Allreduce(t, ReduceOp::kSum)->Wait();
    if (!s.ok()) {
      std::printf("WORKER_FAILED %s\n", s.ToString().c_str());
      return absl::StrContains(s.ToString(), "rank 2") ? 0 : 3;
    }
  }
  std::printf("no failure seen\n");
  return 4;
}

int WorkerMain(int port, int rank, int world, const std::string& mode) {
  TcpStoreOptions store_options;
  store_options.host = "127.0.0.1";
  store_options.port = port;
  absl::StatusOr<std::unique_ptr<TcpStore>> store = TcpStore::Connect(store_options);
  if (!store.ok()) {
    std::printf("store: %s\n", store.status().ToString().c_str());
    return 2;
  }
  CommunicatorOptions options;
  options.store = std::shared_ptr<Store>(std::move(*store));
  options.rank = rank;
  options.world_size = world;
  absl::StatusOr<std::unique_ptr<Communicator>> comm = Communicator::Create(options);
  if (!comm.ok()) {
    std::printf("create: %s\n", comm.status().ToString().c_str());
    return 2;
  }
  const int rc = mode == "kill" ? RunKill(**comm) : RunOps(**comm);
  if (rc == 0) std::printf("WORKER_OK\n");
  std::fflush(stdout);
  if (mode == "kill") std::_Exit(rc);  // the group is broken: do not wait in destructors
  return rc;
}

// ---- The test ----

std::unique_ptr<TcpStoreServer> StartStoreServer() {
  TcpStoreServerOptions options;
  options.host = "127.0.0.1";
  absl::StatusOr<std::unique_ptr<TcpStoreServer>> server = TcpStoreServer::Start(options);
  EXPECT_TRUE(server.ok()) << server.status();
  return server.ok() ? std::move(*server) : nullptr;
}

std::vector<WorkerProcess> RunWorkers(int world, const std::string& mode, absl::Duration limit) {
  std::unique_ptr<TcpStoreServer> server = StartStoreServer();
  if (server == nullptr) return {};
  std::vector<std::vector<std::string>> args;
  for (int r = 0; r < world; ++r) {
    args.push_back(
        {"--worker", absl::StrCat(server->port()), absl::StrCat(r), absl::StrCat(world), mode});
  }
  std::vector<WorkerProcess> workers = StartWorkerProcesses(args);
  WaitForWorkerProcesses(workers, limit);
  return workers;
}

class NativeCudaTest : public testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    PADDLE_SKIP_WITHOUT_GPU();
    setenv("PADDLE_CUDA_IPC", GetParam(), 1);
    setenv("PADDLE_LOG_LEVEL", "INFO", 1);
    setenv("PADDLE_LOG_SUBSYS", "COLL", 1);
  }
  void TearDown() override {
    unsetenv("PADDLE_CUDA_IPC");
    unsetenv("PADDLE_LOG_LEVEL");
    unsetenv("PADDLE_LOG_SUBSYS");
  }
};

INSTANTIATE_TEST_SUITE_P(Paths, NativeCudaTest, testing::Values("1", "0"),
                         [](const testing::TestParamInfo<const char*>& info) {
                           return std::string(info.param[0] == '1' ? "ipc" : "staging");
                         });

TEST_P(NativeCudaTest, EveryOperationEveryDtypeAndSize) {
  const bool ipc = std::string(GetParam()) == "1";
  for (int world : {2, 3, 4}) {
    std::vector<WorkerProcess> workers = RunWorkers(world, "ops", absl::Seconds(400));
    ASSERT_EQ(workers.size(), static_cast<size_t>(world));
    for (const WorkerProcess& w : workers) {
      EXPECT_EQ(w.exit_code, 0) << w.Output();
      EXPECT_TRUE(absl::StrContains(w.Output(), "WORKER_OK")) << w.Output();
      EXPECT_TRUE(absl::StrContains(w.Output(), ipc ? "CUDA tensors take the IPC path"
                                                    : "staging path: rank 0: PADDLE_CUDA_IPC=0"))
          << w.Output();
    }
  }
}

TEST_P(NativeCudaTest, KilledRankIsNamedByTheOthers) {
  setenv("PADDLE_TIMEOUT_S", "20", 1);
  const absl::Time start = absl::Now();
  std::vector<WorkerProcess> workers = RunWorkers(4, "kill", absl::Seconds(90));
  unsetenv("PADDLE_TIMEOUT_S");
  ASSERT_EQ(workers.size(), 4u);
  EXPECT_EQ(workers[2].exit_code, 128 + SIGKILL) << workers[2].Output();
  for (int r : {0, 1, 3}) {
    EXPECT_EQ(workers[r].exit_code, 0) << workers[r].Output();
    EXPECT_TRUE(absl::StrContains(workers[r].Output(), "WORKER_FAILED")) << workers[r].Output();
    EXPECT_LT(workers[r].exited - start, absl::Seconds(60)) << workers[r].Output();
  }
}
#else
TEST(NativeCudaTest, BuiltWithoutCuda) { PADDLE_SKIP_WITHOUT_GPU(); }
#endif

}  // namespace
}  // namespace paddle

int main(int argc, char** argv) {
#if PADDLE_WITH_CUDA
  if (argc == 6 && std::string(argv[1]) == "--worker") {
    return paddle::WorkerMain(std::atoi(argv[2]), std::atoi(argv[3]), std::atoi(argv[4]), argv[5]);
  }
#endif
  testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
