#include "paddle/data/data_loader.h"

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace paddle {
namespace data {
namespace {

using ::testing::HasSubstr;

// A synthetic data set whose rows name themselves: image row i is {i, i + 0.5, -i}, label i is
// 10 * i, so every gathered element is checked exactly.
Dataset Synthetic(int64_t n) {
  Dataset d;
  d.images = *Tensor::Empty({n, 3}, DType::kFloat32);
  d.labels = *Tensor::Empty({n}, DType::kInt64);
  for (int64_t i = 0; i < n; ++i) {
    float* row = d.images.data<float>() + 3 * i;
    row[0] = static_cast<float>(i);
    row[1] = static_cast<float>(i) + 0.5f;
    row[2] = -static_cast<float>(i);
    d.labels.data<int64_t>()[i] = 10 * i;
  }
  return d;
}

DistributedSampler Sampler(int64_t n, int rank = 0, int world = 1, bool drop_last = false) {
  absl::StatusOr<DistributedSampler> s =
      DistributedSampler::Create(n, rank, world, 42, true, drop_last);
  PADDLE_CHECK(s.ok()) << s.status();
  return *s;
}

std::unique_ptr<DataLoader> Loader(const Dataset& d, const DistributedSampler& s,
                                   int64_t batch_size, bool drop_last = false, int prefetch = 2,
                                   Allocator* allocator = CpuAllocator()) {
  absl::StatusOr<std::unique_ptr<DataLoader>> l =
      DataLoader::Create(d, s, batch_size, drop_last, prefetch, allocator);
  PADDLE_CHECK(l.ok()) << l.status();
  return *std::move(l);
}

// One epoch's batches: each as the list of sample indices it holds, checked row by row.
std::vector<std::vector<int64_t>> DrainEpoch(DataLoader& loader, std::vector<int64_t>* batch_ids,
                                             int sleep_us = 0) {
  std::vector<std::vector<int64_t>> batches;
  while (true) {
    absl::StatusOr<std::optional<Batch>> b = loader.Next();
    EXPECT_TRUE(b.ok()) << b.status();
    if (!b.ok() || !b->has_value()) break;
    const Batch& batch = **b;
    const int64_t rows = batch.labels.shape()[0];
    EXPECT_EQ(batch.images.shape(), (Shape{rows, 3}));
    EXPECT_TRUE(batch.images.is_contiguous());
    std::vector<int64_t> ids;
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t i = batch.labels.data<int64_t>()[r] / 10;
      const float* row = batch.images.data<float>() + 3 * r;
      EXPECT_EQ(row[0], static_cast<float>(i));
      EXPECT_EQ(row[1], static_cast<float>(i) + 0.5f);
      EXPECT_EQ(row[2], -static_cast<float>(i));
      ids.push_back(i);
    }
    batches.push_back(ids);
    if (batch_ids != nullptr) batch_ids->push_back(batch.index);
    if (sleep_us > 0) std::this_thread::sleep_for(std::chrono::microseconds(sleep_us));
  }
  return batches;
}

std::vector<int64_t> Flatten(const std::vector<std::vector<int64_t>>& batches) {
  std::vector<int64_t> out;
  for (const auto& b : batches) out.insert(out.end(), b.begin(), b.end());
  return out;
}

TEST(DataLoaderTest, RejectsBadArgumentsNamingThem) {
  const Dataset d = Synthetic(10);
  auto code_and_text = [](const absl::StatusOr<std::unique_ptr<DataLoader>>& l) {
    return std::make_pair(l.status().code(), std::string(l.status().message()));
  };
  auto [code, text] = code_and_text(DataLoader::Create(d, Sampler(10), 0));
  EXPECT_EQ(code, absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(text, HasSubstr("batch_size 0"));
  std::tie(code, text) = code_and_text(DataLoader::Create(d, Sampler(10), 4, false, 0));
  EXPECT_EQ(code, absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(text, HasSubstr("prefetch_depth 0"));
  std::tie(code, text) = code_and_text(DataLoader::Create(d, Sampler(11), 4));
  EXPECT_EQ(code, absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(text, HasSubstr("10 samples but the sampler was made for 11"));
  Dataset mismatched = d;
  mismatched.labels = *Tensor::Empty({9}, DType::kInt64);
  std::tie(code, text) = code_and_text(DataLoader::Create(mismatched, Sampler(10), 4));
  EXPECT_EQ(code, absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(text, HasSubstr("float32[10, 3] on cpu and labels int64[9] on cpu"));
  Dataset undefined = d;
  undefined.labels = Tensor();
  std::tie(code, text) = code_and_text(DataLoader::Create(undefined, Sampler(10), 4));
  EXPECT_EQ(code, absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(text, HasSubstr("labels is undefined tensor"));
  Dataset scalar = d;
  scalar.images = *Tensor::Zeros({}, DType::kFloat32);
  std::tie(code, text) = code_and_text(DataLoader::Create(scalar, Sampler(10), 4));
  EXPECT_EQ(code, absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(text, HasSubstr("images is float32[] on cpu; it needs a sample dimension"));
  // A tensor that claims to live on a GPU (a host buffer labelled cuda:0; never dereferenced).
  Dataset on_gpu = d;
  on_gpu.images = *Tensor::FromBlob(d.images.data(), {10, 3}, DType::kFloat32, Device::Cuda(0));
  std::tie(code, text) = code_and_text(DataLoader::Create(on_gpu, Sampler(10), 4));
  EXPECT_EQ(code, absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(text, HasSubstr("it must be on the CPU"));
}

TEST(DataLoaderTest, NextBeforeStartEpochIsAnError) {
  std::unique_ptr<DataLoader> loader = Loader(Synthetic(10), Sampler(10), 4);
  absl::StatusOr<std::optional<Batch>> b = loader->Next();
  EXPECT_EQ(b.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(b.status().message()), HasSubstr("StartEpoch"));
}

struct Case {
  int64_t size;
  int world;
  int64_t batch;
  bool sampler_drop_last;
  bool loader_drop_last;
};

class LoaderCoverageTest : public ::testing::TestWithParam<Case> {};

// The batches are the sampler's indices in order, cut into batch_size pieces; the last one is
// partial unless the loader drops it.
TEST_P(LoaderCoverageTest, BatchesAreTheSamplersIndicesInOrder) {
  const Case c = GetParam();
  const Dataset d = Synthetic(c.size);
  for (int rank = 0; rank < c.world; ++rank) {
    DistributedSampler s = Sampler(c.size, rank, c.world, c.sampler_drop_last);
    std::unique_ptr<DataLoader> loader = Loader(d, s, c.batch, c.loader_drop_last);
    for (int64_t epoch : {0, 3}) {
      s.SetEpoch(epoch);
      const std::vector<int64_t> expected = s.Indices();
      loader->StartEpoch(epoch);
      std::vector<int64_t> ids;
      const std::vector<std::vector<int64_t>> batches = DrainEpoch(*loader, &ids);
      const int64_t n = static_cast<int64_t>(expected.size());
      const int64_t full = n / c.batch;
      const bool partial = n % c.batch != 0 && !c.loader_drop_last;
      ASSERT_EQ(static_cast<int64_t>(batches.size()), full + (partial ? 1 : 0));
      EXPECT_EQ(loader->NumBatches(), static_cast<int64_t>(batches.size()));
      for (size_t b = 0; b < batches.size(); ++b) {
        EXPECT_EQ(ids[b], static_cast<int64_t>(b));
        const int64_t want = static_cast<int64_t>(b) < full ? c.batch : n % c.batch;
        EXPECT_EQ(static_cast<int64_t>(batches[b].size()), want) << "batch " << b;
      }
      const std::vector<int64_t> got = Flatten(batches);
      EXPECT_EQ(got, std::vector<int64_t>(expected.begin(), expected.begin() + got.size()));
      EXPECT_EQ(loader->state(), (DataLoader::State{epoch, static_cast<int64_t>(got.size())}));
      // The end of an epoch stays the end.
      absl::StatusOr<std::optional<Batch>> after = loader->Next();
      ASSERT_TRUE(after.ok());
      EXPECT_FALSE(after->has_value());
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, LoaderCoverageTest,
                         ::testing::Values(Case{0, 1, 4, false, false}, Case{1, 1, 4, false, false},
                                           Case{10, 1, 4, false, false},
                                           Case{10, 1, 4, false, true}, Case{12, 1, 4, false, true},
                                           Case{101, 3, 8, false, false},
                                           Case{101, 3, 8, true, true},
                                           Case{50, 4, 1, false, false},
                                           Case{7, 8, 3, false, false}));

TEST(DataLoaderTest, GathersFromNonContiguousDataSets) {
  // Images stored transposed: the loader makes one contiguous copy and gathers from it.
  const Dataset base = Synthetic(20);
  Tensor transposed_storage = *base.images.Transpose(0, 1)->Clone();  // [3, 20]
  Dataset d = base;
  d.images = *transposed_storage.Transpose(0, 1);  // [20, 3], strides {1, 20}
  ASSERT_FALSE(d.images.is_contiguous());
  DistributedSampler s = Sampler(20);
  std::unique_ptr<DataLoader> loader = Loader(d, s, 6);
  loader->StartEpoch(0);
  EXPECT_EQ(Flatten(DrainEpoch(*loader, nullptr)), s.Indices());
}

TEST(DataLoaderTest, RealFashionMnistBatches) {
  absl::StatusOr<Dataset> train = LoadFashionMnist(Split::kTrain);
  ASSERT_TRUE(train.ok()) << train.status();
  DistributedSampler s = Sampler(train->size(), 1, 2);
  std::unique_ptr<DataLoader> loader = Loader(*train, s, 64);
  const std::vector<int64_t> expected = s.Indices();
  const auto start = std::chrono::steady_clock::now();
  loader->StartEpoch(0);
  int64_t samples = 0;
  int64_t batches = 0;
  while (true) {
    absl::StatusOr<std::optional<Batch>> b = loader->Next();
    ASSERT_TRUE(b.ok()) << b.status();
    if (!b->has_value()) break;
    const Batch& batch = **b;
    const int64_t rows = batch.labels.shape()[0];
    ASSERT_EQ(batch.images.shape(), (Shape{rows, 1, 28, 28}));
    // Spot-check one row per batch against the data set.
    const int64_t r = batches % rows;
    const int64_t src = expected[samples + r];
    EXPECT_EQ(batch.labels.data<int64_t>()[r], train->labels.data<int64_t>()[src]);
    EXPECT_EQ(0, std::memcmp(batch.images.data<float>() + r * 784,
                             train->images.data<float>() + src * 784, 784 * sizeof(float)));
    samples += rows;
    ++batches;
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(samples, 30000);
  EXPECT_EQ(batches, 469);  // 468 full batches of 64 and one of 48
  std::printf("Fashion-MNIST rank 1/2 epoch: %lld batches of 64 in %.3f s (%.0f samples/s)\n",
              static_cast<long long>(batches), seconds, samples / seconds);
}

// Note [Deterministic batches]: the consumer's speed and the prefetch depth change nothing.
TEST(DataLoaderTest, BatchesDoNotDependOnTimingOrPrefetchDepth) {
  const Dataset d = Synthetic(203);
  DistributedSampler s = Sampler(203, 1, 2);
  std::unique_ptr<DataLoader> fast = Loader(d, s, 7, false, 2);
  fast->StartEpoch(5);
  const std::vector<std::vector<int64_t>> reference = DrainEpoch(*fast, nullptr);
  ASSERT_EQ(reference.size(), 15u);
  for (int depth : {1, 2, 8, 64}) {
    std::unique_ptr<DataLoader> slow = Loader(d, s, 7, false, depth);
    slow->StartEpoch(5);
    EXPECT_EQ(DrainEpoch(*slow, nullptr, /*sleep_us=*/2000), reference) << "depth " << depth;
  }
}

TEST(DataLoaderTest, ResumeMidEpochContinuesAtTheSameSample) {
  const Dataset d = Synthetic(100);
  DistributedSampler s = Sampler(100, 2, 3);
  std::unique_ptr<DataLoader> first = Loader(d, s, 5);
  first->StartEpoch(4);
  std::vector<int64_t> all_ids;
  const std::vector<std::vector<int64_t>> uninterrupted = DrainEpoch(*first, &all_ids);
  ASSERT_EQ(uninterrupted.size(), 7u);  // 34 samples: 6 x 5 + 4

  // Stop after 3 batches, checkpoint, and resume in a new loader.
  first->StartEpoch(4);
  for (int b = 0; b < 3; ++b) ASSERT_TRUE(first->Next().ok());
  const DataLoader::State checkpoint = first->state();
  EXPECT_EQ(checkpoint, (DataLoader::State{4, 15}));
  first.reset();

  DistributedSampler restored = Sampler(100, 2, 3);
  ASSERT_TRUE(restored.Restore(checkpoint).ok());
  std::unique_ptr<DataLoader> resumed = Loader(d, restored, 5);
  EXPECT_EQ(resumed->state(), checkpoint);
  resumed->StartEpoch(4);
  EXPECT_EQ(resumed->state(), checkpoint);
  std::vector<int64_t> ids;
  EXPECT_EQ(DrainEpoch(*resumed, &ids),
            std::vector<std::vector<int64_t>>(uninterrupted.begin() + 3, uninterrupted.end()));
  EXPECT_EQ(ids, (std::vector<int64_t>{3, 4, 5, 6}));
  EXPECT_EQ(resumed->state(), (DataLoader::State{4, 34}));

  // The offset applied once: restarting the epoch, or the next one, starts at their beginning.
  resumed->StartEpoch(4);
  EXPECT_EQ(DrainEpoch(*resumed, nullptr), uninterrupted);
  resumed->StartEpoch(5);
  s.SetEpoch(5);
  EXPECT_EQ(Flatten(DrainEpoch(*resumed, nullptr)), s.Indices());
}

TEST(DataLoaderTest, ResumeAtAnOffsetBetweenBatchBoundaries) {
  const Dataset d = Synthetic(40);
  DistributedSampler s = Sampler(40);
  s.SetEpoch(1);
  const std::vector<int64_t> full = s.Indices();
  ASSERT_TRUE(s.Restore({1, 7}).ok());
  std::unique_ptr<DataLoader> loader = Loader(d, s, 4);
  loader->StartEpoch(1);
  std::vector<int64_t> ids;
  const std::vector<std::vector<int64_t>> batches = DrainEpoch(*loader, &ids);
  EXPECT_EQ(Flatten(batches), std::vector<int64_t>(full.begin() + 7, full.end()));
  ASSERT_EQ(batches.size(), 9u);  // 33 samples: 8 x 4 + 1
  EXPECT_EQ(ids.front(), 1);      // 7 / 4
  EXPECT_EQ(batches.back().size(), 1u);
}

TEST(DataLoaderTest, RestartingAnEpochDropsQueuedBatches) {
  const Dataset d = Synthetic(64);
  DistributedSampler s = Sampler(64);
  std::unique_ptr<DataLoader> loader = Loader(d, s, 8, false, 4);
  loader->StartEpoch(0);
  const std::vector<std::vector<int64_t>> reference = DrainEpoch(*loader, nullptr);
  loader->StartEpoch(0);
  ASSERT_TRUE(loader->Next().ok());
  loader->StartEpoch(0);
  EXPECT_EQ(loader->state(), (DataLoader::State{0, 0}));
  EXPECT_EQ(DrainEpoch(*loader, nullptr), reference);
}

TEST(DataLoaderTest, DestroyingMidEpochJoinsTheProducer) {
  const Dataset d = Synthetic(10000);
  DistributedSampler s = Sampler(10000);
  for (int consumed : {0, 1, 5}) {
    std::unique_ptr<DataLoader> loader = Loader(d, s, 16, false, 1);
    loader->StartEpoch(0);
    for (int b = 0; b < consumed; ++b) ASSERT_TRUE(loader->Next().ok());
    // Give the producer time to block on the full queue, then destroy.
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    loader.reset();
  }
  // Never started, and destroyed at once after starting.
  Loader(d, s, 16).reset();
  std::unique_ptr<DataLoader> loader = Loader(d, s, 16);
  loader->StartEpoch(0);
  loader.reset();
}

// Fails every allocation after the first `allowed`.
class FailingAllocator : public Allocator {
 public:
  explicit FailingAllocator(int allowed) : allowed_(allowed) {}
  absl::StatusOr<void*> Allocate(size_t bytes) override {
    if (allowed_.fetch_sub(1) <= 0) {
      return absl::ResourceExhaustedError(absl::StrCat("test allocator refuses ", bytes, " bytes"));
    }
    return CpuAllocator()->Allocate(bytes);
  }
  void Deallocate(void* ptr, size_t bytes) override { CpuAllocator()->Deallocate(ptr, bytes); }
  Device device() const override { return Device::Cpu(); }

 private:
  std::atomic<int> allowed_;
};

TEST(DataLoaderTest, ProducerErrorsReachNextAfterTheBatchesBeforeThem) {
  const Dataset d = Synthetic(40);
  DistributedSampler s = Sampler(40);
  FailingAllocator allocator(/*allowed=*/5);  // two batches (images + labels), then half a third
  std::unique_ptr<DataLoader> loader = Loader(d, s, 4, false, 2, &allocator);
  loader->StartEpoch(0);
  for (int b = 0; b < 2; ++b) {
    absl::StatusOr<std::optional<Batch>> batch = loader->Next();
    ASSERT_TRUE(batch.ok()) << batch.status();
    ASSERT_TRUE(batch->has_value());
    EXPECT_EQ((*batch)->index, b);
  }
  for (int attempt = 0; attempt < 2; ++attempt) {  // the error stays until the next StartEpoch
    absl::StatusOr<std::optional<Batch>> batch = loader->Next();
    EXPECT_EQ(batch.status().code(), absl::StatusCode::kResourceExhausted);
    EXPECT_THAT(
        std::string(batch.status().message()),
        HasSubstr("allocating batch 2 (4 samples) labels: test allocator refuses 32 bytes"));
  }
  EXPECT_EQ(loader->state(), (DataLoader::State{0, 8}));
}

TEST(DataLoaderDeathTest, NegativeEpochAborts) {
  std::unique_ptr<DataLoader> loader = Loader(Synthetic(4), Sampler(4), 2);
  EXPECT_DEATH(loader->StartEpoch(-1), "negative epoch");
}

}  // namespace
}  // namespace data
}  // namespace paddle
