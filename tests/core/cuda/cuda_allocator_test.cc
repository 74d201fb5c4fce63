// Tests of the CUDA caching allocator on device 0: rounding and reuse (a freed size comes back
// from the cache without cudaMalloc), alignment, the counters, out of memory, many threads, and
// the stream rule (a block freed with work still queued is not handed out before that work ends).
// The allocator is process-wide, so each test reads counters as differences from its start.
#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/gpu_test.h"

#if PADDLE_WITH_CUDA
#include <cuda_runtime_api.h>

#include "paddle/core/cuda/cuda_allocator.h"
#include "paddle/core/cuda/cuda_status.h"
#include "paddle/core/philox.h"
#include "paddle/core/tensor.h"
#include "tests/core/cuda/spin_kernel.h"
#endif

namespace paddle {
namespace {

#if PADDLE_WITH_CUDA

using ::testing::HasSubstr;

class CudaAllocatorTest : public gpu_test::GpuTest {
 protected:
  void SetUp() override {
    GpuTest::SetUp();
    if (IsSkipped()) return;
    absl::StatusOr<Allocator*> a = CudaAllocator(0);
    ASSERT_TRUE(a.ok()) << a.status();
    allocator_ = *a;
    ASSERT_TRUE(EmptyCudaCache(0).ok());
    start_ = GetCudaAllocatorStats(0);
  }

  void* Alloc(size_t bytes) {
    absl::StatusOr<void*> p = allocator_->Allocate(bytes);
    EXPECT_TRUE(p.ok()) << p.status();
    return p.ok() ? *p : nullptr;
  }

  Allocator* allocator_ = nullptr;
  CudaAllocatorStats start_;
};

TEST_F(CudaAllocatorTest, FreedSizeIsReusedFromTheCache) {
  void* a = Alloc(1000);
  const CudaAllocatorStats after_first = GetCudaAllocatorStats(0);
  EXPECT_EQ(after_first.cuda_mallocs, start_.cuda_mallocs + 1);
  EXPECT_EQ(after_first.allocated, start_.allocated + 1024);  // rounded to 512
  allocator_->Deallocate(a, 1000);
  void* b = Alloc(1000);
  const CudaAllocatorStats after_second = GetCudaAllocatorStats(0);
  EXPECT_EQ(b, a);
  EXPECT_EQ(after_second.cuda_mallocs, after_first.cuda_mallocs);
  EXPECT_EQ(after_second.cache_hits, after_first.cache_hits + 1);
  allocator_->Deallocate(b, 1000);

  // Large sizes too: a 3 MiB block (rounded to 4 MiB) comes back for a 3.5 MiB request.
  void* big = Alloc(3 << 20);
  const int64_t mallocs = GetCudaAllocatorStats(0).cuda_mallocs;
  allocator_->Deallocate(big, 3 << 20);
  void* big2 = Alloc((7 << 20) / 2);
  EXPECT_EQ(big2, big);
  EXPECT_EQ(GetCudaAllocatorStats(0).cuda_mallocs, mallocs);
  allocator_->Deallocate(big2, (7 << 20) / 2);
}

TEST_F(CudaAllocatorTest, SmallBlocksAreCarvedFromOneSegmentAndMergeBack) {
  char* a = static_cast<char*>(Alloc(1));
  char* b = static_cast<char*>(Alloc(512));
  char* c = static_cast<char*>(Alloc(513));
  EXPECT_EQ(b, a + 512);
  EXPECT_EQ(c, b + 512);
  CudaAllocatorStats s = GetCudaAllocatorStats(0);
  EXPECT_EQ(s.cuda_mallocs, start_.cuda_mallocs + 1);
  EXPECT_EQ(s.reserved, start_.reserved + (2u << 20));
  EXPECT_EQ(s.allocated, start_.allocated + 512 + 512 + 1024);
  allocator_->Deallocate(b, 512);
  allocator_->Deallocate(a, 1);
  // The segment still has `c` in use: emptying the cache keeps it.
  ASSERT_TRUE(EmptyCudaCache(0).ok());
  EXPECT_EQ(GetCudaAllocatorStats(0).reserved, start_.reserved + (2u << 20));
  allocator_->Deallocate(c, 513);
  // Now the three blocks and the tail merged into one free segment, which goes back to CUDA.
  ASSERT_TRUE(EmptyCudaCache(0).ok());
  s = GetCudaAllocatorStats(0);
  EXPECT_EQ(s.reserved, start_.reserved);
  EXPECT_EQ(s.allocated, start_.allocated);
}

TEST_F(CudaAllocatorTest, PointersAreAlignedAndZeroBytesAreUnique) {
  std::vector<std::pair<void*, size_t>> blocks;
  for (size_t bytes : {0, 1, 3, 63, 64, 65, 511, 4097, 1 << 20, (1 << 20) + 1, 5 << 20}) {
    void* p = Alloc(bytes);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 256, 0u) << bytes << " bytes at " << p;
    blocks.emplace_back(p, bytes);
  }
  EXPECT_NE(blocks[0].first, nullptr);
  void* other_zero = Alloc(0);
  EXPECT_NE(other_zero, blocks[0].first);
  allocator_->Deallocate(other_zero, 0);
  for (auto [p, bytes] : blocks) allocator_->Deallocate(p, bytes);
  EXPECT_EQ(GetCudaAllocatorStats(0).allocated, start_.allocated);
}

TEST_F(CudaAllocatorTest, PeakAndTensorsOnTheDevice) {
  {
    absl::StatusOr<Tensor> t = Tensor::Empty({1000, 1000}, DType::kFloat32, allocator_);
    ASSERT_TRUE(t.ok()) << t.status();
    EXPECT_EQ(t->device(), Device::Cuda(0));
    EXPECT_EQ(GetCudaAllocatorStats(0).allocated, start_.allocated + (4u << 20));
    PADDLE_CHECK_OK(CudaErrorToStatus(cudaMemset(t->data(), 0, t->nbytes()), "memset", "", 0));
  }
  const CudaAllocatorStats s = GetCudaAllocatorStats(0);
  EXPECT_EQ(s.allocated, start_.allocated);
  EXPECT_GE(s.peak_allocated, start_.allocated + (4u << 20));
  EXPECT_GE(s.reserved, s.allocated);
}

TEST_F(CudaAllocatorTest, OutOfMemoryNamesTheSizeAndWhatIsHeld) {
  void* held = Alloc(1000);
  const size_t one_pib = size_t{1} << 50;
  absl::StatusOr<void*> p = allocator_->Allocate(one_pib);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), absl::StatusCode::kResourceExhausted);
  const std::string msg(p.status().message());
  EXPECT_THAT(msg, HasSubstr("CUDA out of memory on cuda:0: allocating 1125899906842624 bytes"));
  EXPECT_THAT(msg, HasSubstr("bytes in use"));
  EXPECT_THAT(msg, HasSubstr("bytes cached"));
  EXPECT_THAT(msg, HasSubstr("cudaErrorMemoryAllocation"));
  // Nothing changed, and the allocator still works.
  EXPECT_EQ(GetCudaAllocatorStats(0).allocated, start_.allocated + 1024);
  allocator_->Deallocate(held, 1000);
  EXPECT_EQ(allocator_->Allocate(~size_t{0}).status().code(), absl::StatusCode::kResourceExhausted);
  void* again = Alloc(1000);
  EXPECT_NE(again, nullptr);
  allocator_->Deallocate(again, 1000);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);  // the failed cudaMalloc left no error behind
}

TEST_F(CudaAllocatorTest, InvalidDeviceIsAnArgumentError) {
  absl::StatusOr<Allocator*> a = CudaAllocator(device_count());
  EXPECT_EQ(a.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(a.status().message()), HasSubstr("no such CUDA device"));
  EXPECT_EQ(CudaAllocator(-1).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(GetCudaAllocatorStats(-1).cuda_mallocs, 0);
}

// Eight threads allocate, fill and free blocks of seeded random sizes; live blocks never overlap
// and each keeps the bytes its thread wrote.
TEST_F(CudaAllocatorTest, ManyThreads) {
  constexpr int kThreads = 8;
  constexpr int kRounds = 200;
  std::mutex mu;
  std::map<uintptr_t, uintptr_t> live;  // start -> end, under mu
  std::atomic<int> errors{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      Philox rng(42, static_cast<uint64_t>(t));
      for (int r = 0; r < kRounds; ++r) {
        const size_t bytes = 1 + rng.NextU32() % ((rng.NextU32() % 4 == 0) ? (6 << 20) : 8192);
        absl::StatusOr<void*> p = allocator_->Allocate(bytes);
        if (!p.ok()) {
          ++errors;
          continue;
        }
        const uintptr_t begin = reinterpret_cast<uintptr_t>(*p);
        {
          std::lock_guard<std::mutex> lock(mu);
          auto next = live.lower_bound(begin);
          if (next != live.end() && next->first < begin + bytes) ++errors;
          if (next != live.begin() && std::prev(next)->second > begin) ++errors;
          live[begin] = begin + bytes;
        }
        const int value = (t * 31 + r) & 0xff;
        std::vector<unsigned char> back(bytes);
        if (cudaMemset(*p, value, bytes) != cudaSuccess ||
            cudaMemcpy(back.data(), *p, bytes, cudaMemcpyDeviceToHost) != cudaSuccess) {
          ++errors;
        }
        for (unsigned char b : back) {
          if (b != value) {
            ++errors;
            break;
          }
        }
        {
          std::lock_guard<std::mutex> lock(mu);
          live.erase(begin);
        }
        allocator_->Deallocate(*p, bytes);
      }
    });
  }
  for (std::thread& th : threads) th.join();
  EXPECT_EQ(errors.load(), 0);
  const CudaAllocatorStats s = GetCudaAllocatorStats(0);
  EXPECT_EQ(s.allocated, start_.allocated);
  EXPECT_GT(s.cache_hits, start_.cache_hits + kThreads * kRounds / 2);
}

// Note [CUDA allocator streams]: a block freed while a kernel on the legacy default stream still
// writes it is not handed out before that kernel is done.
TEST_F(CudaAllocatorTest, FreedBlockWithQueuedWorkIsReusedOnlyAfterIt) {
  void* p = Alloc(4096);
  ASSERT_EQ(cuda_test::LaunchSpin(200 * 1000 * 1000, static_cast<int*>(p), cudaStreamLegacy),
            cudaSuccess);
  allocator_->Deallocate(p, 4096);
  EXPECT_EQ(cudaStreamQuery(cudaStreamLegacy), cudaErrorNotReady);  // 200 ms: still spinning
  void* q = Alloc(4096);
  EXPECT_EQ(q, p);
  EXPECT_EQ(cudaStreamQuery(cudaStreamLegacy), cudaSuccess);  // the allocator waited for it
  allocator_->Deallocate(q, 4096);
}

#else  // !PADDLE_WITH_CUDA

TEST(CudaAllocatorTest, Skipped) { PADDLE_SKIP_WITHOUT_GPU() << "; paddle/core/cuda is empty"; }

#endif  // PADDLE_WITH_CUDA

}  // namespace
}  // namespace paddle
