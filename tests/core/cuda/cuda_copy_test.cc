// Tests of tensor copies between host and CUDA devices: round trips of every dtype with odd
// sizes (0, 1, primes, and more than one 8 MiB staging chunk) compared byte for byte, views that
// are not contiguous on either side, explicit streams, copies between two devices when there are
// two, and the pinned host allocator.
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/gpu_test.h"

#if PADDLE_WITH_CUDA
#include <cuda_runtime_api.h>

#include "paddle/core/cuda/cuda_allocator.h"
#include "paddle/core/cuda/cuda_copy.h"
#include "paddle/core/cuda/cuda_status.h"
#include "paddle/core/cuda/cuda_stream.h"
#include "paddle/core/philox.h"
#include "paddle/core/tensor.h"
#endif

namespace paddle {
namespace {

#if PADDLE_WITH_CUDA

using ::testing::HasSubstr;

using CudaCopyTest = gpu_test::GpuTest;

constexpr DType kAllDTypes[] = {DType::kFloat32,  DType::kFloat64, DType::kFloat16,
                                DType::kBFloat16, DType::kInt8,    DType::kUInt8,
                                DType::kInt32,    DType::kInt64,   DType::kBool};

// A CPU tensor whose bytes come from (seed, index): every byte is known and any misplaced one
// shows. Bool tensors get 0/1 bytes only.
Tensor Random(absl::Span<const int64_t> shape, DType dtype, uint64_t seed) {
  absl::StatusOr<Tensor> t = Tensor::Empty(shape, dtype);
  PADDLE_CHECK_OK(t.status());
  Philox rng(seed, static_cast<uint64_t>(dtype));
  unsigned char* bytes = static_cast<unsigned char*>(t->data());
  for (size_t i = 0; i < t->nbytes(); ++i) {
    const uint32_t word = rng.WordAt(i);
    bytes[i] = static_cast<unsigned char>(dtype == DType::kBool ? word & 1 : word);
  }
  return *t;
}

// Element-by-element comparison of two CPU tensors of one shape (any strides), as bytes.
void ExpectSameElements(const Tensor& got, const Tensor& want) {
  ASSERT_EQ(got.shape(), want.shape());
  ASSERT_EQ(got.dtype(), want.dtype());
  ASSERT_TRUE(got.device().is_cpu() && want.device().is_cpu());
  absl::StatusOr<Tensor> g = got.Contiguous();
  absl::StatusOr<Tensor> w = want.Contiguous();
  ASSERT_TRUE(g.ok() && w.ok());
  const size_t elem = got.element_size();
  int mismatches = 0;
  for (int64_t i = 0; i < got.numel(); ++i) {
    const char* a = static_cast<const char*>(g->data()) + i * elem;
    const char* b = static_cast<const char*>(w->data()) + i * elem;
    if (std::memcmp(a, b, elem) != 0 && mismatches++ < 5) {
      ADD_FAILURE() << "element " << i << " of " << want.ToString() << " differs";
    }
  }
  EXPECT_EQ(mismatches, 0);
}

TEST_F(CudaCopyTest, RoundTripEveryDTypeAndSize) {
  const std::vector<Shape> shapes = {{0}, {1}, {7}, {3, 5, 7}, {1031}, {2, 0, 3}};
  uint64_t seed = 1;
  for (DType dtype : kAllDTypes) {
    for (const Shape& shape : shapes) {
      SCOPED_TRACE(std::string(DTypeName(dtype)) + ShapeToString(shape));
      const Tensor host = Random(shape, dtype, seed++);
      absl::StatusOr<Tensor> dev = ToDevice(host, Device::Cuda(0));
      ASSERT_TRUE(dev.ok()) << dev.status();
      EXPECT_EQ(dev->device(), Device::Cuda(0));
      EXPECT_EQ(dev->shape(), host.shape());
      // Through a second device buffer (CUDA -> CUDA), then back.
      absl::StatusOr<Tensor> dev2 = ToDevice(*dev, Device::Cuda(0));
      ASSERT_TRUE(dev2.ok()) << dev2.status();
      EXPECT_NE(dev2->data(), dev->data());
      absl::StatusOr<Tensor> back = ToDevice(*dev2, Device::Cpu());
      ASSERT_TRUE(back.ok()) << back.status();
      EXPECT_TRUE(back->device().is_cpu());
      ExpectSameElements(*back, host);
    }
  }
}

// 5,000,003 floats = 20 MB: three staging chunks, the last one partial.
TEST_F(CudaCopyTest, RoundTripLargerThanTheStagingChunks) {
  const Tensor host = Random({5000003}, DType::kFloat32, 99);
  absl::StatusOr<CudaStream> stream = CudaStream::Create(0);
  ASSERT_TRUE(stream.ok()) << stream.status();
  absl::StatusOr<Tensor> dev = ToDevice(host, Device::Cuda(0), stream->get());
  ASSERT_TRUE(dev.ok()) << dev.status();
  absl::StatusOr<Tensor> back = ToDevice(*dev, Device::Cpu(), stream->get());
  ASSERT_TRUE(back.ok()) << back.status();
  ASSERT_EQ(std::memcmp(back->data(), host.data(), host.nbytes()), 0);
}

TEST_F(CudaCopyTest, NonContiguousSourcesOnEitherSide) {
  for (DType dtype : kAllDTypes) {
    SCOPED_TRACE(DTypeName(dtype));
    const Tensor host = Random({6, 9, 5}, dtype, 7);
    // Host views: a transpose and a strided slice.
    absl::StatusOr<Tensor> transposed = host.Transpose(0, 2);
    ASSERT_TRUE(transposed.ok());
    absl::StatusOr<Tensor> dev_t = ToDevice(*transposed, Device::Cuda(0));
    ASSERT_TRUE(dev_t.ok()) << dev_t.status();
    EXPECT_TRUE(dev_t->is_contiguous());
    absl::StatusOr<Tensor> back_t = ToDevice(*dev_t, Device::Cpu());
    ASSERT_TRUE(back_t.ok()) << back_t.status();
    ExpectSameElements(*back_t, *transposed);

    // A device view: slice the device copy, bring the slice back (CUDA -> CPU and CUDA -> CUDA).
    absl::StatusOr<Tensor> dev = ToDevice(host, Device::Cuda(0));
    ASSERT_TRUE(dev.ok()) << dev.status();
    absl::StatusOr<Tensor> dev_slice = dev->Slice(1, 1, 9, 3);
    absl::StatusOr<Tensor> host_slice = host.Slice(1, 1, 9, 3);
    ASSERT_TRUE(dev_slice.ok() && host_slice.ok());
    ASSERT_FALSE(dev_slice->is_contiguous());
    absl::StatusOr<Tensor> back_s = ToDevice(*dev_slice, Device::Cpu());
    ASSERT_TRUE(back_s.ok()) << back_s.status();
    ExpectSameElements(*back_s, *host_slice);
    absl::StatusOr<Tensor> dev_s2 = ToDevice(*dev_slice, Device::Cuda(0));
    ASSERT_TRUE(dev_s2.ok()) << dev_s2.status();
    absl::StatusOr<Tensor> back_s2 = ToDevice(*dev_s2, Device::Cpu());
    ASSERT_TRUE(back_s2.ok()) << back_s2.status();
    ExpectSameElements(*back_s2, *host_slice);
  }
}

TEST_F(CudaCopyTest, CopyTensorIntoExistingTensors) {
  const Tensor host = Random({4, 6}, DType::kInt32, 3);
  absl::StatusOr<Allocator*> a = CudaAllocator(0);
  ASSERT_TRUE(a.ok());
  absl::StatusOr<Tensor> dev = Tensor::Empty({4, 6}, DType::kInt32, *a);
  ASSERT_TRUE(dev.ok());
  ASSERT_TRUE(CopyTensor(host, *dev, nullptr).ok());
  // Into a non-contiguous host destination: every other column of a [4, 12] tensor.
  absl::StatusOr<Tensor> wide = Tensor::Zeros({4, 12}, DType::kInt32);
  ASSERT_TRUE(wide.ok());
  absl::StatusOr<Tensor> cols = wide->Slice(1, 0, 12, 2);
  ASSERT_TRUE(cols.ok());
  const absl::Status s = CopyTensor(*dev, *cols, nullptr);
  ASSERT_TRUE(s.ok()) << s;
  ExpectSameElements(*cols, host);
  EXPECT_EQ(**wide->At<int32_t>({2, 3}), 0);  // the columns in between are untouched
  // A non-contiguous CUDA destination is refused, naming it.
  absl::StatusOr<Tensor> dev_wide = Tensor::Empty({4, 12}, DType::kInt32, *a);
  ASSERT_TRUE(dev_wide.ok());
  absl::StatusOr<Tensor> dev_cols = dev_wide->Slice(1, 0, 12, 2);
  ASSERT_TRUE(dev_cols.ok());
  const absl::Status refused = CopyTensor(host, *dev_cols, nullptr);
  EXPECT_EQ(refused.code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(std::string(refused.message()), HasSubstr("int32[4, 6] on cuda:0"));
  // Shape mismatch names both tensors.
  absl::StatusOr<Tensor> other = Tensor::Empty({6, 4}, DType::kInt32, *a);
  ASSERT_TRUE(other.ok());
  const absl::Status mismatch = CopyTensor(host, *other, nullptr);
  EXPECT_EQ(mismatch.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(mismatch.message()), HasSubstr("int32[4, 6] on cpu"));
  EXPECT_THAT(std::string(mismatch.message()), HasSubstr("int32[6, 4] on cuda:0"));
}

TEST_F(CudaCopyTest, BetweenTwoDevices) {
  if (device_count() < 2)
    GTEST_SKIP() << "one CUDA device; a peer copy needs two: runs on a multi-GPU machine";
  const Tensor host = Random({1000, 3}, DType::kFloat64, 5);
  absl::StatusOr<Tensor> d0 = ToDevice(host, Device::Cuda(0));
  ASSERT_TRUE(d0.ok()) << d0.status();
  absl::StatusOr<Tensor> d1 = ToDevice(*d0, Device::Cuda(1));
  ASSERT_TRUE(d1.ok()) << d1.status();
  EXPECT_EQ(d1->device(), Device::Cuda(1));
  absl::StatusOr<Tensor> back = ToDevice(*d1, Device::Cpu());
  ASSERT_TRUE(back.ok()) << back.status();
  ExpectSameElements(*back, host);
}

TEST_F(CudaCopyTest, PinnedHostAllocatorCachesPageLockedBlocks) {
  Allocator* pinned = PinnedHostAllocator();
  EXPECT_EQ(pinned->device(), Device::Cpu());
  absl::StatusOr<void*> p = pinned->Allocate(10000);
  ASSERT_TRUE(p.ok()) << p.status();
  cudaPointerAttributes attr;
  ASSERT_EQ(cudaPointerGetAttributes(&attr, *p), cudaSuccess);
  EXPECT_EQ(attr.type, cudaMemoryTypeHost);
  std::memset(*p, 0x5a, 10000);  // host-writable
  pinned->Deallocate(*p, 10000);
  absl::StatusOr<void*> q = pinned->Allocate(9000);  // same 12 KiB rounded block
  ASSERT_TRUE(q.ok()) << q.status();
  EXPECT_EQ(*q, *p);
  pinned->Deallocate(*q, 9000);
}

#else  // !PADDLE_WITH_CUDA

TEST(CudaCopyTest, Skipped) { PADDLE_SKIP_WITHOUT_GPU() << "; paddle/core/cuda is empty"; }

#endif  // PADDLE_WITH_CUDA

}  // namespace
}  // namespace paddle
