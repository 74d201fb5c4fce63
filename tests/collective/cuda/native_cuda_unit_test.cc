// The parts of the native backend's CUDA support that need no GPU, run on every machine:
//   - the IPC settings from PADDLE_CUDA_IPC / PADDLE_CUDA_IPC_BYTES, the local veto, the votes;
//   - the staging plan (overlapping tensors share one host buffer, roles decide the copies);
//   - the device check of a call's tensors;
//   - a native communicator (2 ranks as threads) given a CUDA tensor this machine cannot reach:
//     an argument error naming it, after which the communicator still works;
//   - with CUDA built in: the agreement of Note [CUDA IPC agreement] through a store, where no
//     rank can allocate (no GPU here), and a rank that never votes (timeout naming it).
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "paddle/collective/backends/native/cuda_support.h"
#include "paddle/collective/communicator.h"
#include "paddle/collective/intranode/cuda/ipc_agreement.h"
#include "paddle/collective/store/hash_store.h"
#include "tests/testing/scoped_env.h"
#if PADDLE_WITH_CUDA
#include "paddle/collective/intranode/cuda/cuda_ipc_workspace.h"
#endif

namespace paddle {
namespace {

// A CudaIpcSettingsFromEnv() with both variables set as given (nullptr: unset).
absl::StatusOr<CudaIpcSettings> SettingsWith(const char* enabled, const char* bytes) {
  ScopedEnv enabled_env(kCudaIpcEnvVar, enabled);
  ScopedEnv bytes_env(kCudaIpcBytesEnvVar, bytes);
  return CudaIpcSettingsFromEnv();
}

TEST(CudaIpcSettings, DefaultsAndValues) {
  absl::StatusOr<CudaIpcSettings> s = SettingsWith(nullptr, "");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_TRUE(s->enabled);
  EXPECT_EQ(s->buffer_bytes, kDefaultCudaIpcBytes);
  s = SettingsWith(" OFF ", "1048576");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_FALSE(s->enabled);
  EXPECT_EQ(s->buffer_bytes, size_t{1} << 20);
  s = SettingsWith("yes", "8388608");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_TRUE(s->enabled);
  EXPECT_EQ(s->buffer_bytes, size_t{8} << 20);
}

TEST(CudaIpcSettings, BadValuesNameTheVariable) {
  absl::StatusOr<CudaIpcSettings> s = SettingsWith("maybe", nullptr);
  EXPECT_TRUE(absl::IsInvalidArgument(s.status()));
  EXPECT_TRUE(absl::StrContains(s.status().message(), "PADDLE_CUDA_IPC=\"maybe\"")) << s.status();
  for (const char* bytes : {"4096", "1048577", "-1", "lots", "8589934592"}) {
    s = SettingsWith("1", bytes);
    EXPECT_TRUE(absl::IsInvalidArgument(s.status())) << bytes;
    EXPECT_TRUE(absl::StrContains(s.status().message(),
                                  absl::StrCat("PADDLE_CUDA_IPC_BYTES=\"", bytes, "\"")))
        << s.status();
  }
}

TEST(CudaIpcVeto, EachReason) {
  CudaIpcSettings on;
  CudaIpcSettings off;
  off.enabled = false;
  EXPECT_EQ(LocalIpcVeto(on, 1, 4, 8), "");
  EXPECT_EQ(LocalIpcVeto(off, 1, 4, 8), "PADDLE_CUDA_IPC=0");
  EXPECT_TRUE(absl::StrContains(LocalIpcVeto(on, 2, 4, 8), "2 hosts"));
  EXPECT_TRUE(absl::StrContains(LocalIpcVeto(on, 1, 1, 8), "world of one"));
  EXPECT_TRUE(absl::StrContains(LocalIpcVeto(on, 1, 9, 8), "9 ranks"));
}

TEST(CudaIpcVotes, RoundTripAndFirstNo) {
  absl::StatusOr<ParsedVote> ok = ParseVote(OkVote("abc def"));
  ASSERT_TRUE(ok.ok());
  EXPECT_TRUE(ok->ok);
  EXPECT_EQ(ok->payload, "abc def");
  absl::StatusOr<ParsedVote> empty_ok = ParseVote(OkVote(""));
  ASSERT_TRUE(empty_ok.ok());
  EXPECT_TRUE(empty_ok->ok);
  absl::StatusOr<ParsedVote> no = ParseVote(NoVote("no GPU"));
  ASSERT_TRUE(no.ok());
  EXPECT_FALSE(no->ok);
  EXPECT_EQ(no->payload, "no GPU");
  EXPECT_TRUE(absl::IsInvalidArgument(ParseVote("garbage").status()));
  EXPECT_EQ(FirstNo({*ok, *ok}), "");
  EXPECT_EQ(FirstNo({*ok, *no, *no}), "rank 1: no GPU");
}

TEST(CudaSupportHelpers, IpcCapableOps) {
  EXPECT_TRUE(IsIpcCapable(OpKind::kAllreduce));
  EXPECT_TRUE(IsIpcCapable(OpKind::kBroadcast));
  EXPECT_TRUE(IsIpcCapable(OpKind::kAllgather));
  EXPECT_TRUE(IsIpcCapable(OpKind::kReduceScatter));
  EXPECT_FALSE(IsIpcCapable(OpKind::kReduce));
  EXPECT_FALSE(IsIpcCapable(OpKind::kAlltoall));
  EXPECT_FALSE(IsIpcCapable(OpKind::kSend));
}

Tensor FakeCuda(void* data, int64_t n, int device) {
  return *Tensor::FromBlob(data, {n}, DType::kFloat32, Device::Cuda(device));
}

TEST(CudaSupportHelpers, DeviceOfTensors) {
  static float a[4];
  static float b[4];
  Tensor cpu = *Tensor::Empty({4}, DType::kFloat32);
  Tensor c0 = FakeCuda(a, 4, 0);
  Tensor c1 = FakeCuda(b, 4, 1);
  absl::StatusOr<int> d = CudaDeviceOf({{&cpu, CudaTensorRole::kInput}});
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(*d, -1);
  d = CudaDeviceOf({{&cpu, CudaTensorRole::kInput}, {&c1, CudaTensorRole::kOutput}});
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(*d, 1);
  d = CudaDeviceOf({{&c0, CudaTensorRole::kInput}, {&c1, CudaTensorRole::kOutput}});
  EXPECT_TRUE(absl::IsInvalidArgument(d.status()));
  EXPECT_TRUE(absl::StrContains(d.status().message(), "different CUDA devices")) << d.status();
}

TEST(CudaSupportHelpers, StagingPlanKeepsOverlaps) {
  // Allgather in place: input (16 bytes at 1016) is block 1 of output (64 bytes at 1000).
  std::vector<StagingRange> plan =
      PlanStaging({1016, 1000}, {16, 64}, {CudaTensorRole::kInput, CudaTensorRole::kOutput});
  ASSERT_EQ(plan.size(), 1u);
  EXPECT_EQ(plan[0].begin, 1000u);
  EXPECT_EQ(plan[0].end, 1064u);
  EXPECT_TRUE(plan[0].download);
  EXPECT_TRUE(plan[0].upload);
  EXPECT_EQ(plan[0].members, (std::vector<size_t>{1, 0}));

  // Disjoint and adjacent tensors stay apart; an output-only range is not downloaded.
  plan = PlanStaging({0, 100, 200}, {100, 50, 0},
                     {CudaTensorRole::kInput, CudaTensorRole::kOutput, CudaTensorRole::kInOut});
  ASSERT_EQ(plan.size(), 3u);
  EXPECT_TRUE(plan[0].download);
  EXPECT_FALSE(plan[0].upload);
  EXPECT_FALSE(plan[1].download);
  EXPECT_TRUE(plan[1].upload);
  EXPECT_EQ(plan[2].begin, plan[2].end);  // zero bytes: a range of its own

  // A zero-byte tensor inside another does not join it.
  plan = PlanStaging({0, 8}, {64, 0}, {CudaTensorRole::kInOut, CudaTensorRole::kInput});
  ASSERT_EQ(plan.size(), 2u);
  EXPECT_EQ(plan[0].members, (std::vector<size_t>{0}));
}

// Two ranks as threads on a HashStore; `body` runs on each.
void OnTwoRanks(const std::function<void(int, Communicator&)>& body) {
  auto store = std::make_shared<HashStore>();
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      CommunicatorOptions options;
      options.store = store;
      options.rank = r;
      options.world_size = 2;
      options.timeout = absl::Seconds(30);
      options.transport = "tcp";
      absl::StatusOr<std::unique_ptr<Communicator>> comm = Communicator::Create(options);
      ASSERT_TRUE(comm.ok()) << comm.status();
      body(r, **comm);
    });
  }
  for (std::thread& t : threads) t.join();
}

TEST(NativeCommunicatorCuda, UnreachableCudaTensorIsAnArgumentError) {
  OnTwoRanks([](int rank, Communicator& c) {
    static float fake[2][4];
    std::shared_ptr<Work> w = c.Allreduce(FakeCuda(fake[rank], 4, 0), ReduceOp::kSum);
    ASSERT_TRUE(w->IsCompleted());
    const absl::Status s = w->Wait();
    EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
    EXPECT_TRUE(absl::StrContains(s.message(), "cuda:0")) << s;
    EXPECT_TRUE(absl::StrContains(s.message(), "not in CPU memory")) << s;
    // Not poisoned: a CPU allreduce still works.
    Tensor t = *Tensor::Empty({3}, DType::kFloat32);
    for (int i = 0; i < 3; ++i) t.data<float>()[i] = static_cast<float>(rank + i);
    ASSERT_TRUE(c.Allreduce(t, ReduceOp::kSum)->Wait().ok());
    for (int i = 0; i < 3; ++i) EXPECT_EQ(t.data<float>()[i], static_cast<float>(1 + 2 * i));
  });
}

TEST(NativeCommunicatorCuda, TensorsOnTwoDevicesAreAnArgumentError) {
  OnTwoRanks([](int rank, Communicator& c) {
    static float in[2][2];
    static float out[2][4];
    std::shared_ptr<Work> w = c.Allgather(FakeCuda(in[rank], 2, 0), FakeCuda(out[rank], 4, 1));
    const absl::Status s = w->Wait();
    EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
    EXPECT_TRUE(absl::StrContains(s.message(), "different CUDA devices")) << s;
  });
}

#if PADDLE_WITH_CUDA
CudaIpcWorkspaceOptions WorkspaceOptions(Store* store, int rank, int world) {
  CudaIpcWorkspaceOptions o;
  o.store = store;
  o.store_prefix = "t/cuda_ipc";
  o.rank = rank;
  o.world_size = world;
  o.buffer_bytes = size_t{1} << 20;
  o.timeout = absl::Seconds(20);
  return o;
}

// Without a GPU (or with one) a rank that vetoes makes every rank fall back, with its reason.
TEST(CudaIpcAgreement, OneVetoMakesEveryRankFallBack) {
  HashStore store;
  std::vector<std::string> reasons(3);
  std::vector<bool> null(3, false);
  std::vector<std::thread> threads;
  for (int r = 0; r < 3; ++r) {
    threads.emplace_back([&, r] {
      CudaIpcWorkspaceOptions o = WorkspaceOptions(&store, r, 3);
      if (r == 1) o.local_veto = "PADDLE_CUDA_IPC=0";
      absl::StatusOr<std::unique_ptr<CudaIpcWorkspace>> ws =
          CudaIpcWorkspace::Create(o, &reasons[r]);
      ASSERT_TRUE(ws.ok()) << ws.status();
      null[r] = *ws == nullptr;
    });
  }
  for (std::thread& t : threads) t.join();
  for (int r = 0; r < 3; ++r) {
    EXPECT_TRUE(null[r]) << r;
    // Here rank 0 cannot allocate either (no GPU) and names itself first; on a GPU machine rank
    // 1's veto is the first "no".
    EXPECT_TRUE(absl::StrContains(reasons[r], "rank 0: ") ||
                absl::StrContains(reasons[r], "rank 1: PADDLE_CUDA_IPC=0"))
        << reasons[r];
    EXPECT_EQ(reasons[r], reasons[0]);
  }
}

TEST(CudaIpcAgreement, MissingRankTimesOutNamingIt) {
  HashStore store;
  CudaIpcWorkspaceOptions o = WorkspaceOptions(&store, 0, 2);
  o.local_veto = "test";
  o.timeout = absl::Milliseconds(300);
  std::string reason;
  absl::StatusOr<std::unique_ptr<CudaIpcWorkspace>> ws = CudaIpcWorkspace::Create(o, &reason);
  EXPECT_FALSE(ws.ok());
  EXPECT_TRUE(absl::StrContains(ws.status().message(), "rank 1's CUDA IPC offer vote"))
      << ws.status();
}
#endif

}  // namespace
}  // namespace paddle
