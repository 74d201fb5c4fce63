// TaskFeed, read on its own thread (Start) and on the caller's (ReadNow) alike: rows come out in
// record order with the right ids, labels and normalized pixels, across slab and call
// boundaries; a corrupt record is an error after the rows before it; a range past the shard's
// end and a truncated shard are errors before any row. Start's feed, destroyed mid-range, does
// not wait for the range; a shared ShardIndexCache reads each shard's index once.
#include "paddle/data/task_feed.h"

#include <stdlib.h>
#include <unistd.h>

#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "paddle/data/record_file.h"
#include "paddle/data/shard_set.h"

namespace paddle {
namespace data {
namespace {

constexpr int64_t kPixels = 16;

std::string TempDir() {
  std::string tmpl =
      absl::StrCat(getenv("TEST_TMPDIR") ? getenv("TEST_TMPDIR") : "/tmp", "/feed.XXXXXX");
  return mkdtemp(&tmpl[0]);
}

uint8_t Pixel(int64_t id, int64_t k) { return static_cast<uint8_t>((id * 31 + k * 7) % 256); }

// Records of sample ids first_id + i: the id, a label (id % 10), kPixels pixels.
std::string WriteSamples(const std::string& path, int64_t first_id, int64_t n) {
  auto writer = RecordWriter::Open(path);
  EXPECT_TRUE(writer.ok()) << writer.status();
  for (int64_t i = 0; i < n; ++i) {
    const int64_t id = first_id + i;
    std::string label(1, static_cast<char>(id % 10)), image(kPixels, '\0');
    for (int64_t k = 0; k < kPixels; ++k) image[k] = static_cast<char>(Pixel(id, k));
    EXPECT_TRUE((*writer)->Write(EncodeSample(id, {label, image})).ok());
  }
  EXPECT_TRUE((*writer)->Close().ok());
  return path;
}

TaskFeedLayout Layout() {
  TaskFeedLayout l;
  l.record_bytes = 8 + 1 + kPixels;
  l.label_offset = 0;
  l.image_offset = 1;
  l.image_bytes = kPixels;
  l.mean = 0.25f;
  l.std = 0.5f;
  return l;
}

// The feed of `range`, started (false) or read now (true).
class TaskFeedModes : public ::testing::TestWithParam<bool> {
 protected:
  absl::StatusOr<std::unique_ptr<TaskFeed>> Open(RecordRange range, TaskFeedLayout layout,
                                                 TaskFeedOptions options = {}) {
    return GetParam() ? TaskFeed::ReadNow(std::move(range), layout, std::move(options))
                      : TaskFeed::Start(std::move(range), layout, std::move(options));
  }
};
INSTANTIATE_TEST_SUITE_P(StartAndReadNow, TaskFeedModes, ::testing::Bool());

TEST_P(TaskFeedModes, RowsInOrderAcrossSlabsAndCalls) {
  const std::string a = WriteSamples(TempDir() + "/a", 1000, 5000);
  TaskFeedOptions options;
  options.max_slabs = 1;  // the producer waits for the consumer often
  auto feed = Open({a, 123, 4321}, Layout(), options);
  ASSERT_TRUE(feed.ok()) << feed.status();
  std::vector<float> images(97 * kPixels);
  std::vector<int64_t> labels(97), ids;
  int64_t total = 0;
  while (true) {
    auto got = (*feed)->Take(97, images.data(), labels.data(), &ids);
    ASSERT_TRUE(got.ok()) << got.status();
    if (*got == 0) break;
    for (int64_t r = 0; r < *got; ++r) {
      const int64_t id = 1000 + 123 + total + r;
      ASSERT_EQ(ids[total + r], id);
      ASSERT_EQ(labels[r], id % 10);
      for (int64_t k = 0; k < kPixels; ++k) {
        ASSERT_NEAR(images[r * kPixels + k], (Pixel(id, k) / 255.0f - 0.25f) / 0.5f, 1e-6);
      }
    }
    total += *got;
  }
  EXPECT_EQ(total, 4321 - 123);
  EXPECT_EQ((*feed)->Take(5, images.data(), labels.data(), &ids).value(), 0);
}

TEST_P(TaskFeedModes, CorruptRecordIsAnErrorAfterTheRowsBeforeIt) {
  const std::string a = WriteSamples(TempDir() + "/a", 0, 100);
  std::vector<uint64_t> index = *ReadIndex(a);
  std::string bytes;
  {
    std::ifstream in(a, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  bytes[index[60] + 12 + 9] ^= 0x01;  // a pixel of record 60 (after the 12-byte frame header)
  {
    std::ofstream out(a, std::ios::binary | std::ios::trunc);
    out << bytes;
  }
  auto feed = Open({a, 50, 100}, Layout());
  ASSERT_TRUE(feed.ok());
  std::vector<float> images(100 * kPixels);
  std::vector<int64_t> labels(100), ids;
  auto got = (*feed)->Take(100, images.data(), labels.data(), &ids);
  EXPECT_EQ(got.status().code(), absl::StatusCode::kDataLoss) << got.status();
  EXPECT_NE(
      got.status().message().find(absl::StrCat(a, ": corrupt record at byte offset ", index[60])),
      std::string::npos)
      << got.status();
  EXPECT_EQ(ids.size(), 10u);  // records 50..59 came out first
  EXPECT_EQ((*feed)->Take(1, images.data(), labels.data(), &ids).status().code(),
            absl::StatusCode::kDataLoss);
}

TEST_P(TaskFeedModes, WrongRecordSizeAndBadLayout) {
  const std::string a = WriteSamples(TempDir() + "/a", 0, 10);
  TaskFeedLayout wide = Layout();
  wide.record_bytes += 1;
  wide.image_bytes += 1;
  auto feed = Open({a, 0, 10}, wide);
  ASSERT_TRUE(feed.ok());
  std::vector<float> images(10 * (kPixels + 1));
  std::vector<int64_t> labels(10), ids;
  auto got = (*feed)->Take(10, images.data(), labels.data(), &ids);
  EXPECT_EQ(got.status().code(), absl::StatusCode::kDataLoss) << got.status();
  EXPECT_NE(got.status().message().find("record 0 of " + a), std::string::npos) << got.status();
  TaskFeedLayout outside = Layout();
  outside.image_offset = 2;  // the image would end past the record
  EXPECT_EQ(Open({a, 0, 10}, outside).status().code(), absl::StatusCode::kInvalidArgument);
  auto past = Open({a, 5, 11}, Layout());
  ASSERT_TRUE(past.ok());
  got = (*past)->Take(6, images.data(), labels.data(), &ids);
  EXPECT_EQ(got.status().code(), absl::StatusCode::kOutOfRange) << got.status();
  EXPECT_NE(got.status().message().find(
                absl::StrCat("shard ", a, " has 10 records; the task asks for [5, 11)")),
            std::string::npos)
      << got.status();
}

TEST_P(TaskFeedModes, TruncatedShardIsAnErrorBeforeAnyRow) {
  const std::string a = WriteSamples(TempDir() + "/a", 0, 100);
  std::vector<uint64_t> index = *ReadIndex(a);
  ASSERT_EQ(truncate(a.c_str(), static_cast<off_t>(index[90] + 5)), 0);
  auto feed = Open({a, 0, 50}, Layout());  // the range itself is intact
  ASSERT_TRUE(feed.ok());
  std::vector<float> images(50 * kPixels);
  std::vector<int64_t> labels(50), ids;
  auto got = (*feed)->Take(50, images.data(), labels.data(), &ids);
  EXPECT_EQ(got.status().code(), absl::StatusCode::kDataLoss) << got.status();
  EXPECT_NE(got.status().message().find("truncated shard"), std::string::npos) << got.status();
  EXPECT_TRUE(ids.empty());
}

TEST(TaskFeedTest, DestroyedMidRangeStopsPromptlyAndIndexesAreShared) {
  const std::string dir = TempDir();
  const std::string a = WriteSamples(dir + "/a", 0, 200000);
  TaskFeedOptions options;
  options.index_cache = std::make_shared<ShardIndexCache>();
  for (int i = 0; i < 3; ++i) {
    auto feed = TaskFeed::Start({a, 1000 * i, 200000}, Layout(), options);
    ASSERT_TRUE(feed.ok());
    std::vector<float> images(kPixels);
    std::vector<int64_t> labels(1), ids;
    ASSERT_EQ((*feed)->Take(1, images.data(), labels.data(), &ids).value(), 1);
    EXPECT_EQ(ids[0], 1000 * i);
    const absl::Time t0 = absl::Now();
    feed->reset();
    EXPECT_LT(absl::Now() - t0, absl::Milliseconds(250));
  }
  EXPECT_EQ(options.index_cache->size(), 1);
}

}  // namespace
}  // namespace data
}  // namespace paddle
