#include "paddle/data/fashion_mnist.h"

#include <sys/stat.h>
#include <zlib.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace paddle {
namespace data {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

// ---- Real files (Debian's dataset-fashion-mnist) ----

TEST(FashionMnistTest, TrainSplitShapesLabelsAndBalancedClasses) {
  absl::StatusOr<Dataset> train = LoadFashionMnist(Split::kTrain);
  ASSERT_TRUE(train.ok()) << train.status();
  EXPECT_EQ(train->size(), 60000);
  EXPECT_EQ(train->images.ToString(), "float32[60000, 1, 28, 28] on cpu");
  EXPECT_EQ(train->labels.ToString(), "int64[60000] on cpu");
  std::array<int64_t, kFashionMnistClasses> counts{};
  const int64_t* labels = train->labels.data<int64_t>();
  for (int64_t i = 0; i < train->size(); ++i) {
    ASSERT_GE(labels[i], 0) << "sample " << i;
    ASSERT_LT(labels[i], kFashionMnistClasses) << "sample " << i;
    ++counts[labels[i]];
  }
  for (int c = 0; c < kFashionMnistClasses; ++c) EXPECT_EQ(counts[c], 6000) << "class " << c;
  // The published order: ankle boot, T-shirt, T-shirt, dress, T-shirt.
  EXPECT_EQ(std::vector<int64_t>(labels, labels + 5), (std::vector<int64_t>{9, 0, 0, 3, 0}));
}

TEST(FashionMnistTest, TestSplitShapesAndBalancedClasses) {
  absl::StatusOr<Dataset> test = LoadFashionMnist(Split::kTest);
  ASSERT_TRUE(test.ok()) << test.status();
  EXPECT_EQ(test->size(), 10000);
  EXPECT_EQ(test->images.ToString(), "float32[10000, 1, 28, 28] on cpu");
  std::array<int64_t, kFashionMnistClasses> counts{};
  const int64_t* labels = test->labels.data<int64_t>();
  for (int64_t i = 0; i < test->size(); ++i) {
    ASSERT_GE(labels[i], 0);
    ASSERT_LT(labels[i], kFashionMnistClasses);
    ++counts[labels[i]];
  }
  for (int c = 0; c < kFashionMnistClasses; ++c) EXPECT_EQ(counts[c], 1000) << "class " << c;
}

struct Moments {
  double mean;
  double std;
  float min;
  float max;
};

Moments ComputeMoments(const Tensor& t) {
  const float* p = t.data<float>();
  double sum = 0, sum_sq = 0;
  float lo = p[0], hi = p[0];
  for (int64_t i = 0; i < t.numel(); ++i) {
    sum += p[i];
    sum_sq += static_cast<double>(p[i]) * p[i];
    lo = std::min(lo, p[i]);
    hi = std::max(hi, p[i]);
  }
  const double mean = sum / t.numel();
  return {mean, std::sqrt(sum_sq / t.numel() - mean * mean), lo, hi};
}

// The constants the loader normalizes with are the statistics of the training images.
TEST(FashionMnistTest, NormalizationConstantsAreTheTrainStatistics) {
  absl::StatusOr<Dataset> raw = LoadFashionMnist(Split::kTrain, kDefaultFashionMnistDir, false);
  ASSERT_TRUE(raw.ok()) << raw.status();
  const Moments m = ComputeMoments(raw->images);
  EXPECT_NEAR(m.mean, kFashionMnistMean, 5e-4);
  EXPECT_NEAR(m.std, kFashionMnistStd, 5e-4);
  EXPECT_EQ(m.min, 0.0f);
  EXPECT_EQ(m.max, 1.0f);

  absl::StatusOr<Dataset> normalized = LoadFashionMnist(Split::kTrain);
  ASSERT_TRUE(normalized.ok()) << normalized.status();
  const Moments n = ComputeMoments(normalized->images);
  EXPECT_NEAR(n.mean, 0.0, 2e-3);
  EXPECT_NEAR(n.std, 1.0, 2e-3);
  const float* r = raw->images.data<float>();
  const float* z = normalized->images.data<float>();
  for (int64_t i = 0; i < raw->images.numel(); i += 997) {
    // One division and one add (paddle/data/pixels.h): within 1e-6 of the two-step formula.
    ASSERT_NEAR(z[i], (r[i] - kFashionMnistMean) / kFashionMnistStd, 1e-6) << "pixel " << i;
  }
}

// ---- Hand-made files: exact parsing and every error ----

// A fresh folder under TEST_TMPDIR for one test.
std::string TempDir(const std::string& name) {
  const char* root = std::getenv("TEST_TMPDIR");
  const std::string dir = absl::StrCat(root != nullptr ? root : "/tmp", "/", name);
  mkdir(dir.c_str(), 0755);
  return dir;
}

void AppendBigEndian(std::vector<uint8_t>* out, uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8) out->push_back(static_cast<uint8_t>(v >> shift));
}

std::vector<uint8_t> Idx(uint32_t magic, const std::vector<uint32_t>& dims,
                         const std::vector<uint8_t>& payload) {
  std::vector<uint8_t> out;
  AppendBigEndian(&out, magic);
  for (uint32_t d : dims) AppendBigEndian(&out, d);
  out.insert(out.end(), payload.begin(), payload.end());
  return out;
}

void WriteGz(const std::string& path, const std::vector<uint8_t>& bytes) {
  gzFile f = gzopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr) << path;
  if (!bytes.empty()) {
    ASSERT_EQ(gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())),
              static_cast<int>(bytes.size()));
  }
  ASSERT_EQ(gzclose(f), Z_OK);
}

// Pixel j of image i in the hand-made files.
uint8_t Pixel(int i, int j) { return static_cast<uint8_t>((i * 31 + j * 7) % 256); }

std::vector<uint8_t> Pixels(int count) {
  std::vector<uint8_t> out;
  for (int i = 0; i < count; ++i) {
    for (int j = 0; j < 28 * 28; ++j) out.push_back(Pixel(i, j));
  }
  return out;
}

// Writes a valid 3-sample test split into `dir`.
void WriteValidSplit(const std::string& dir) {
  WriteGz(dir + "/t10k-images-idx3-ubyte.gz", Idx(2051, {3, 28, 28}, Pixels(3)));
  WriteGz(dir + "/t10k-labels-idx1-ubyte.gz", Idx(2049, {3}, {7, 0, 9}));
}

TEST(FashionMnistTest, ParsesHandMadeFilesExactly) {
  const std::string dir = TempDir("valid");
  WriteValidSplit(dir);
  absl::StatusOr<Dataset> d = LoadFashionMnist(Split::kTest, dir, /*normalize=*/false);
  ASSERT_TRUE(d.ok()) << d.status();
  ASSERT_EQ(d->size(), 3);
  EXPECT_EQ(d->images.ToString(), "float32[3, 1, 28, 28] on cpu");
  EXPECT_EQ(std::vector<int64_t>(d->labels.data<int64_t>(), d->labels.data<int64_t>() + 3),
            (std::vector<int64_t>{7, 0, 9}));
  for (int i = 0; i < 3; ++i) {
    for (int j = 0; j < 28 * 28; ++j) {
      ASSERT_EQ(**d->images.At<float>({i, 0, j / 28, j % 28}),
                static_cast<float>(Pixel(i, j)) / 255.0f)
          << "image " << i << " pixel " << j;
    }
  }
}

TEST(FashionMnistTest, MissingDirectorySaysHowToInstall) {
  const std::string dir = TempDir("missing") + "/nowhere";
  absl::StatusOr<Dataset> d = LoadFashionMnist(Split::kTrain, dir);
  EXPECT_EQ(d.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(d.status().message()),
              AllOf(HasSubstr(dir), HasSubstr("apt-get install dataset-fashion-mnist")));
}

TEST(FashionMnistTest, MissingFileNamesItAndSaysHowToInstall) {
  const std::string dir = TempDir("missing_file");
  WriteGz(dir + "/t10k-labels-idx1-ubyte.gz", Idx(2049, {1}, {1}));
  absl::StatusOr<Dataset> d = LoadFashionMnist(Split::kTest, dir);
  EXPECT_EQ(d.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(d.status().message()),
              AllOf(HasSubstr(dir + "/t10k-images-idx3-ubyte.gz"),
                    HasSubstr("apt-get install dataset-fashion-mnist")));
}

TEST(FashionMnistTest, BadMagicNumberNamesFileAndNumbers) {
  const std::string dir = TempDir("bad_magic");
  WriteValidSplit(dir);
  // A labels file (2049) where the images belong.
  WriteGz(dir + "/t10k-images-idx3-ubyte.gz", Idx(2049, {3}, {1, 2, 3}));
  absl::StatusOr<Dataset> d = LoadFashionMnist(Split::kTest, dir);
  EXPECT_EQ(d.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(d.status().message()),
              AllOf(HasSubstr("t10k-images-idx3-ubyte.gz"), HasSubstr("magic number 2049"),
                    HasSubstr("expected 2051")));
}

TEST(FashionMnistTest, WrongImageSizeNamesDimensions) {
  const std::string dir = TempDir("bad_dims");
  WriteValidSplit(dir);
  WriteGz(dir + "/t10k-images-idx3-ubyte.gz",
          Idx(2051, {3, 32, 32}, std::vector<uint8_t>(3 * 32 * 32, 1)));
  absl::StatusOr<Dataset> d = LoadFashionMnist(Split::kTest, dir);
  EXPECT_EQ(d.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(d.status().message()),
              AllOf(HasSubstr("t10k-images-idx3-ubyte.gz"), HasSubstr("[3, 32, 32]"),
                    HasSubstr("expected [N, 28, 28]")));
}

TEST(FashionMnistTest, ShortPayloadIsTruncationWithCounts) {
  const std::string dir = TempDir("short_payload");
  WriteValidSplit(dir);
  // The header promises 3 images; 2 and a half follow.
  std::vector<uint8_t> pixels = Pixels(3);
  pixels.resize(2 * 784 + 392);
  WriteGz(dir + "/t10k-images-idx3-ubyte.gz", Idx(2051, {3, 28, 28}, pixels));
  absl::StatusOr<Dataset> d = LoadFashionMnist(Split::kTest, dir);
  EXPECT_EQ(d.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(d.status().message()),
              AllOf(HasSubstr("t10k-images-idx3-ubyte.gz is truncated"), HasSubstr("3 images"),
                    HasSubstr("2352 bytes"), HasSubstr("only 1960 bytes follow")));
}

TEST(FashionMnistTest, CutGzipStreamIsTruncation) {
  const std::string dir = TempDir("cut_gzip");
  WriteValidSplit(dir);
  const std::string path = dir + "/t10k-images-idx3-ubyte.gz";
  // Random-looking pixels so the compressed stream is long, then cut it in the middle.
  std::vector<uint8_t> pixels(3 * 784);
  uint32_t x = 12345;
  for (uint8_t& p : pixels) {
    x = x * 1103515245u + 12345u;
    p = static_cast<uint8_t>(x >> 24);
  }
  WriteGz(path, Idx(2051, {3, 28, 28}, pixels));
  std::ifstream in(path, std::ios::binary);
  std::vector<char> gz((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_GT(gz.size(), 1000u);
  std::ofstream(path, std::ios::binary | std::ios::trunc).write(gz.data(), gz.size() / 2);
  absl::StatusOr<Dataset> d = LoadFashionMnist(Split::kTest, dir);
  EXPECT_EQ(d.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(d.status().message()),
              AllOf(HasSubstr("t10k-images-idx3-ubyte.gz is truncated"), HasSubstr("3 images")));
}

TEST(FashionMnistTest, TruncatedHeaderAndEmptyFile) {
  const std::string dir = TempDir("short_header");
  WriteValidSplit(dir);
  WriteGz(dir + "/t10k-labels-idx1-ubyte.gz", {0, 0, 8});
  absl::StatusOr<Dataset> d = LoadFashionMnist(Split::kTest, dir);
  EXPECT_EQ(d.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(d.status().message()),
              AllOf(HasSubstr("t10k-labels-idx1-ubyte.gz is truncated"), HasSubstr("3 bytes")));

  WriteGz(dir + "/t10k-labels-idx1-ubyte.gz", {0, 0, 8, 1, 0, 0});
  d = LoadFashionMnist(Split::kTest, dir);
  EXPECT_EQ(d.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(d.status().message()), HasSubstr("6 of the 8 header bytes"));
}

TEST(FashionMnistTest, TrailingDataIsAnError) {
  const std::string dir = TempDir("trailing");
  WriteValidSplit(dir);
  WriteGz(dir + "/t10k-labels-idx1-ubyte.gz", Idx(2049, {3}, {7, 0, 9, 4}));
  absl::StatusOr<Dataset> d = LoadFashionMnist(Split::kTest, dir);
  EXPECT_EQ(d.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(d.status().message()),
              AllOf(HasSubstr("t10k-labels-idx1-ubyte.gz has more data after the 3 labels")));
}

TEST(FashionMnistTest, MismatchedCountsNameBothFiles) {
  const std::string dir = TempDir("mismatch");
  WriteValidSplit(dir);
  WriteGz(dir + "/t10k-labels-idx1-ubyte.gz", Idx(2049, {2}, {7, 0}));
  absl::StatusOr<Dataset> d = LoadFashionMnist(Split::kTest, dir);
  EXPECT_EQ(d.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(d.status().message()),
              AllOf(HasSubstr("t10k-images-idx3-ubyte.gz holds 3 images"),
                    HasSubstr("t10k-labels-idx1-ubyte.gz holds 2 labels")));
}

TEST(FashionMnistTest, LabelOutOfRangeNamesIndexAndValue) {
  const std::string dir = TempDir("bad_label");
  WriteValidSplit(dir);
  WriteGz(dir + "/t10k-labels-idx1-ubyte.gz", Idx(2049, {3}, {7, 10, 9}));
  absl::StatusOr<Dataset> d = LoadFashionMnist(Split::kTest, dir);
  EXPECT_EQ(d.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(d.status().message()),
              AllOf(HasSubstr("t10k-labels-idx1-ubyte.gz"), HasSubstr("label 10 at index 1"),
                    HasSubstr("[0, 10)")));
}

}  // namespace
}  // namespace data
}  // namespace paddle
