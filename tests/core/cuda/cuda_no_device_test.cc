// What paddle/core/cuda says on a machine without a usable GPU (the CPU-only CI machines): every
// entry point fails with kFailedPrecondition "no CUDA device/driver: ..." naming what was asked
// for, and nothing crashes. On a GPU machine the same calls succeed, which is checked instead.
// Checks that need no device at all (argument errors, CPU-to-CPU copies) run on both.
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#if PADDLE_WITH_CUDA
#include "paddle/core/cuda/cuda_allocator.h"
#include "paddle/core/cuda/cuda_copy.h"
#include "paddle/core/cuda/cuda_status.h"
#include "paddle/core/cuda/cuda_stream.h"
#include "paddle/core/tensor.h"
#endif
#include "tests/testing/gpu_test.h"

namespace paddle {
namespace {

#if PADDLE_WITH_CUDA

using ::testing::HasSubstr;

std::string Message(const absl::Status& s) { return std::string(s.message()); }

bool HaveGpu() { return gpu_test::GpuDeviceCount() > 0; }

Tensor Iota(absl::Span<const int64_t> shape) {
  absl::StatusOr<Tensor> t = Tensor::Empty(shape, DType::kFloat32);
  PADDLE_CHECK_OK(t.status());
  for (int64_t i = 0; i < t->numel(); ++i) t->data<float>()[i] = static_cast<float>(i);
  return *t;
}

TEST(CudaNoDeviceTest, AllocatorSaysThereIsNoDevice) {
  absl::StatusOr<Allocator*> a = CudaAllocator(0);
  if (HaveGpu()) {
    ASSERT_TRUE(a.ok()) << a.status();
    EXPECT_EQ((*a)->device(), Device::Cuda(0));
    EXPECT_EQ(CudaAllocator(*CudaDeviceCount()).status().code(),
              absl::StatusCode::kInvalidArgument);
    return;
  }
  ASSERT_FALSE(a.ok());
  EXPECT_EQ(a.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(Message(a.status()), HasSubstr("no CUDA device/driver: "));
  EXPECT_THAT(Message(a.status()), HasSubstr("nvidia-smi"));
  // Nothing was created, so there are no counters and no cache to empty.
  const CudaAllocatorStats stats = GetCudaAllocatorStats(0);
  EXPECT_EQ(stats.reserved, 0u);
  EXPECT_EQ(stats.cuda_mallocs, 0);
  const absl::Status empty = EmptyCudaCache(0);
  EXPECT_EQ(empty.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(Message(empty), HasSubstr("no CUDA device/driver: "));
}

TEST(CudaNoDeviceTest, ToDeviceNamesTheTensorAndTheReason) {
  const Tensor t = Iota({2, 3});
  absl::StatusOr<Tensor> g = ToDevice(t, Device::Cuda(0));
  if (HaveGpu()) {
    ASSERT_TRUE(g.ok()) << g.status();
    EXPECT_EQ(g->device(), Device::Cuda(0));
    return;
  }
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(Message(g.status()), HasSubstr("ToDevice of float32[2, 3] on cpu to cuda:0"));
  EXPECT_THAT(Message(g.status()), HasSubstr("no CUDA device/driver: "));
}

TEST(CudaNoDeviceTest, StreamsEventsAndGuardsSayThereIsNoDevice) {
  PADDLE_SKIP_WITH_GPU() << "; cuda_stream_test covers this machine";
  for (const absl::Status& s : {CudaStream::Create(0).status(), CudaEvent::Create(0).status(),
                                CudaDeviceGuard::Create(0).status()}) {
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
    EXPECT_THAT(Message(s), HasSubstr("no CUDA device/driver: "));
  }
  absl::StatusOr<void*> pinned = PinnedHostAllocator()->Allocate(100);
  ASSERT_FALSE(pinned.ok());
  EXPECT_THAT(Message(pinned.status()), HasSubstr("pinned host allocation of 100 bytes failed"));
  EXPECT_EQ(PinnedHostAllocator()->device(), Device::Cpu());
}

TEST(CudaNoDeviceTest, CopyTensorNamesBothTensorsOnMismatch) {
  const Tensor a = Iota({2, 3});
  absl::StatusOr<Tensor> b = Tensor::Empty({3, 2}, DType::kFloat32);
  ASSERT_TRUE(b.ok());
  const absl::Status s = CopyTensor(a, *b, nullptr);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(s), HasSubstr("source float32[2, 3] on cpu"));
  EXPECT_THAT(Message(s), HasSubstr("destination float32[3, 2] on cpu"));
  absl::StatusOr<Tensor> c = Tensor::Empty({2, 3}, DType::kInt32);
  ASSERT_TRUE(c.ok());
  EXPECT_THAT(Message(CopyTensor(a, *c, nullptr)), HasSubstr("int32[2, 3]"));
  Tensor undefined;
  EXPECT_THAT(Message(CopyTensor(undefined, *c, nullptr)), HasSubstr("undefined"));
  EXPECT_EQ(ToDevice(undefined, Device::Cpu()).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(CudaNoDeviceTest, CpuToCpuCopiesNeedNoDevice) {
  const Tensor t = Iota({4, 5});
  absl::StatusOr<Tensor> col = t.Slice(1, 1, 5, 2);  // [4, 2], not contiguous
  ASSERT_TRUE(col.ok());
  absl::StatusOr<Tensor> copy = ToDevice(*col, Device::Cpu());
  ASSERT_TRUE(copy.ok()) << copy.status();
  EXPECT_TRUE(copy->is_contiguous());
  ASSERT_EQ(copy->shape(), (Shape{4, 2}));
  for (int64_t r = 0; r < 4; ++r) {
    for (int64_t c = 0; c < 2; ++c) {
      EXPECT_EQ(copy->data<float>()[r * 2 + c], static_cast<float>(r * 5 + 1 + 2 * c));
    }
  }
  // CopyTensor between CPU tensors works too, into a non-contiguous destination.
  Tensor dst_base = Iota({4, 5});
  absl::StatusOr<Tensor> dst = dst_base.Slice(1, 0, 4, 2);
  ASSERT_TRUE(dst.ok());
  ASSERT_TRUE(CopyTensor(*copy, *dst, nullptr).ok());
  EXPECT_EQ(dst_base.data<float>()[2], 3.0f);  // [0][2] <- copy[0][1] = t[0][3]
  EXPECT_EQ(dst_base.data<float>()[1], 1.0f);  // untouched
}

#else  // !PADDLE_WITH_CUDA

TEST(CudaNoDeviceTest, Skipped) { PADDLE_SKIP_WITHOUT_GPU() << "; paddle/core/cuda is empty"; }

#endif  // PADDLE_WITH_CUDA

}  // namespace
}  // namespace paddle
