// GPU conversions (paddle/ops/cuda/convert.h) against the CPU ones (paddle/core/half.h), which
// tests/core/half_test.cc checks against an independent reference: every 16-bit pattern in the
// widening direction, and in the narrowing direction every representable value plus a large seeded
// random set (any bit pattern, and values spread over the format's exponent range). Without a
// usable GPU the comparisons skip, naming the reason; the CudaDeviceCount and error-macro tests
// run everywhere CUDA is built in. Built without CUDA, the file holds one test that says so.
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/gpu_test.h"

#if PADDLE_WITH_CUDA
#include <cuda_runtime_api.h>

#include "paddle/core/cuda/cuda_status.h"
#include "paddle/core/half.h"
#include "paddle/ops/cuda/convert.h"
#endif

namespace paddle {
namespace {

#if PADDLE_WITH_CUDA

using ::testing::HasSubstr;
using ::testing::StartsWith;

// ---- CUDA status, no GPU needed ----

// Debian's Abseil has its own string_view, which gMock's string matchers do not take.
std::string Message(const absl::Status& s) { return std::string(s.message()); }

absl::Status FailingCall() {
  PADDLE_CUDA_RETURN_IF_ERROR(cudaErrorInvalidValue);
  return absl::OkStatus();
}

absl::Status OutOfMemoryCall() {
  PADDLE_CUDA_RETURN_IF_ERROR(cudaErrorMemoryAllocation);
  return absl::OkStatus();
}

TEST(CudaStatusTest, MacroNamesCallPlaceAndCudaText) {
  const absl::Status s = FailingCall();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(s), StartsWith("CUDA call `cudaErrorInvalidValue` failed at "));
  EXPECT_THAT(Message(s), HasSubstr("convert_test.cc:"));
  EXPECT_THAT(Message(s), HasSubstr("cudaErrorInvalidValue (invalid argument)"));
  EXPECT_EQ(OutOfMemoryCall().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(CudaErrorToStatus(cudaSuccess, "x", "f", 1).ok());
  EXPECT_EQ(CudaErrorToStatus(cudaErrorInsufficientDriver, "x", "f", 1).code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST(CudaStatusTest, DeviceCountSaysWhyThereIsNoDevice) {
  const absl::StatusOr<int> count = CudaDeviceCount();
  if (count.ok()) {
    EXPECT_GE(*count, 0);
    return;
  }
  EXPECT_EQ(count.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(Message(count.status()), StartsWith("no CUDA device/driver: cudaError"));
  EXPECT_THAT(Message(count.status()), HasSubstr("--config=nocuda"));
  // Asking again gives the same answer: the error did not leave state behind.
  EXPECT_EQ(CudaDeviceCount().status(), count.status());
}

// ---- GPU against CPU ----

template <typename T>
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t n) : n_(n) {
    status_ = CudaErrorToStatus(cudaMalloc(&ptr_, n * sizeof(T)), "cudaMalloc", __FILE__, __LINE__);
  }
  ~DeviceBuffer() { cudaFree(ptr_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  const absl::Status& status() const { return status_; }
  T* get() const { return static_cast<T*>(ptr_); }
  absl::Status Upload(const std::vector<T>& host) {
    PADDLE_CUDA_RETURN_IF_ERROR(
        cudaMemcpy(ptr_, host.data(), n_ * sizeof(T), cudaMemcpyHostToDevice));
    return absl::OkStatus();
  }
  absl::Status Download(std::vector<T>& host) const {
    host.resize(n_);
    PADDLE_CUDA_RETURN_IF_ERROR(
        cudaMemcpy(host.data(), ptr_, n_ * sizeof(T), cudaMemcpyDeviceToHost));
    return absl::OkStatus();
  }

 private:
  size_t n_;
  void* ptr_ = nullptr;
  absl::Status status_;
};

// Runs `gpu` on `in` with an odd-sized prefix and an offset start so that neither the element
// count nor the alignment is a multiple of anything the kernel might assume.
template <typename In, typename Out, typename GpuFn>
absl::Status RunOnGpu(GpuFn gpu, const std::vector<In>& in, std::vector<Out>& out) {
  DeviceBuffer<In> d_in(in.size());
  DeviceBuffer<Out> d_out(in.size());
  if (!d_in.status().ok()) return d_in.status();
  if (!d_out.status().ok()) return d_out.status();
  if (absl::Status s = d_in.Upload(in); !s.ok()) return s;
  if (in.size() > 1) {
    if (absl::Status s = gpu(d_in.get(), d_out.get(), 1, nullptr); !s.ok()) return s;
  }
  const size_t first = in.size() > 1 ? 1 : 0;
  if (absl::Status s = gpu(d_in.get() + first, d_out.get() + first, in.size() - first, nullptr);
      !s.ok()) {
    return s;
  }
  PADDLE_CUDA_RETURN_IF_ERROR(cudaDeviceSynchronize());
  return d_out.Download(out);
}

uint32_t Bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, sizeof(b));
  return b;
}

// The GPU tests run in the CUDA build on a machine with an NVIDIA GPU (the device machine, via
// tools/gpu-bundle); everywhere else they skip, naming the reason.
using GpuConvertTest = gpu_test::GpuTest;

std::vector<uint16_t> AllPatterns() {
  std::vector<uint16_t> all(65536);
  for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<uint16_t>(i);
  return all;
}

// Every representable value of the format (NaNs included), then seeded random floats.
std::vector<float> NarrowingInputs(float (*to_float)(uint16_t), int bias, int mantissa_bits) {
  std::vector<float> in;
  for (uint32_t p = 0; p < 65536; ++p) in.push_back(to_float(static_cast<uint16_t>(p)));
  std::mt19937 rng(31337);
  const int lowest = 127 - bias - mantissa_bits - 2;
  const int span = 2 * bias + mantissa_bits + 4;
  for (int i = 0; i < (1 << 24); ++i) {
    uint32_t bits = static_cast<uint32_t>(rng());
    if (i % 2 == 1) {
      bits = (bits & 0x807fffffu) | (static_cast<uint32_t>(lowest + rng() % span) << 23);
    }
    float f;
    std::memcpy(&f, &bits, sizeof(f));
    in.push_back(f);
  }
  return in;
}

void ExpectWideningMatchesCpu(absl::Status (*gpu)(const uint16_t*, float*, size_t, cudaStream_t),
                              void (*cpu)(const uint16_t*, float*, size_t, ConvertPath)) {
  const std::vector<uint16_t> in = AllPatterns();
  std::vector<float> got;
  const absl::Status s = RunOnGpu(gpu, in, got);
  ASSERT_TRUE(s.ok()) << s;
  std::vector<float> want(in.size());
  cpu(in.data(), want.data(), in.size(), ConvertPath::kPortable);
  int mismatches = 0;
  for (size_t i = 0; i < in.size(); ++i) {
    if (Bits(got[i]) != Bits(want[i]) && mismatches++ < 10) {
      ADD_FAILURE() << std::hex << "pattern 0x" << in[i] << ": gpu 0x" << Bits(got[i]) << " cpu 0x"
                    << Bits(want[i]);
    }
  }
  EXPECT_EQ(mismatches, 0);
}

void ExpectNarrowingMatchesCpu(absl::Status (*gpu)(const float*, uint16_t*, size_t, cudaStream_t),
                               void (*cpu)(const float*, uint16_t*, size_t, ConvertPath),
                               const std::vector<float>& in) {
  std::vector<uint16_t> got;
  const absl::Status s = RunOnGpu(gpu, in, got);
  ASSERT_TRUE(s.ok()) << s;
  std::vector<uint16_t> want(in.size());
  cpu(in.data(), want.data(), in.size(), ConvertPath::kPortable);
  int mismatches = 0;
  for (size_t i = 0; i < in.size(); ++i) {
    if (got[i] != want[i] && mismatches++ < 10) {
      ADD_FAILURE() << std::hex << "float 0x" << Bits(in[i]) << ": gpu 0x" << got[i] << " cpu 0x"
                    << want[i];
    }
  }
  EXPECT_EQ(mismatches, 0);
}

TEST_F(GpuConvertTest, HalfToFloatEveryPattern) {
  ExpectWideningMatchesCpu(CudaHalfToFloat, HalfToFloat);
}

TEST_F(GpuConvertTest, BFloat16ToFloatEveryPattern) {
  ExpectWideningMatchesCpu(CudaBFloat16ToFloat, BFloat16ToFloat);
}

TEST_F(GpuConvertTest, FloatToHalfRepresentableAndRandom) {
  ExpectNarrowingMatchesCpu(CudaFloatToHalf, FloatToHalf, NarrowingInputs(HalfToFloat, 15, 10));
}

TEST_F(GpuConvertTest, FloatToBFloat16RepresentableAndRandom) {
  ExpectNarrowingMatchesCpu(CudaFloatToBFloat16, FloatToBFloat16,
                            NarrowingInputs(BFloat16ToFloat, 127, 7));
}

// An empty grid would be a launch error; n == 0 must not launch at all (so no GPU is needed).
TEST(CudaConvertTest, EmptyInputIsOkAndLaunchesNothing) {
  EXPECT_TRUE(CudaHalfToFloat(nullptr, nullptr, 0, nullptr).ok());
  EXPECT_TRUE(CudaFloatToHalf(nullptr, nullptr, 0, nullptr).ok());
  EXPECT_TRUE(CudaBFloat16ToFloat(nullptr, nullptr, 0, nullptr).ok());
  EXPECT_TRUE(CudaFloatToBFloat16(nullptr, nullptr, 0, nullptr).ok());
}

#else  // !PADDLE_WITH_CUDA

TEST(GpuConvertTest, Skipped) { PADDLE_SKIP_WITHOUT_GPU(); }

#endif  // PADDLE_WITH_CUDA

}  // namespace
}  // namespace paddle
