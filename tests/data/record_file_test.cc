// Record shards and ShardReader: CRC-32C against its published check value, the TFRecord mask,
// round trips with and without an index, and every way a shard can be damaged (a flipped data
// byte, a flipped length byte, a truncated file, a stale index) failing with an error that names
// the shard and the byte offset. Also the ShardReader's ranges, memory bound and timeout path.
#include "paddle/data/record_file.h"

#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "paddle/data/shard_reader.h"
#include "paddle/data/shard_set.h"

namespace paddle {
namespace data {
namespace {

std::string TempDir() {
  std::string tmpl =
      absl::StrCat(getenv("TEST_TMPDIR") ? getenv("TEST_TMPDIR") : "/tmp", "/records.XXXXXX");
  return mkdtemp(&tmpl[0]);
}

std::string RecordText(int64_t i) {  // records of varying length, including empty ones
  return std::string(static_cast<size_t>(i % 7) * 13, static_cast<char>('a' + i % 26)) +
         absl::StrCat(i % 5 == 0 ? "" : "#", i);
}

std::string WriteShard(const std::string& path, int64_t n) {
  auto writer = RecordWriter::Open(path);
  EXPECT_TRUE(writer.ok()) << writer.status();
  for (int64_t i = 0; i < n; ++i) EXPECT_TRUE((*writer)->Write(RecordText(i)).ok());
  EXPECT_TRUE((*writer)->Close().ok());
  return path;
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void WriteAll(const std::string& path, const std::string& data) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << data;
}

absl::Status ReadEverything(const std::string& path, int64_t* count) {
  auto reader = RecordReader::Open(path);
  if (!reader.ok()) return reader.status();
  std::string record;
  *count = 0;
  while (true) {
    absl::StatusOr<bool> got = (*reader)->Read(&record);
    if (!got.ok()) return got.status();
    if (!*got) return absl::OkStatus();
    EXPECT_EQ(record, RecordText(*count));
    ++*count;
  }
}

bool Contains(const absl::Status& s, const std::string& text) {
  return std::string(s.message()).find(text) != std::string::npos;
}

TEST(Crc32cTest, MatchesTheCheckValueAndMasks) {
  EXPECT_EQ(Crc32c("123456789"), 0xE3069283u);
  EXPECT_EQ(Crc32c(""), 0u);
  EXPECT_EQ(Crc32c(std::string(32, '\0')), 0x8A9136AAu);  // RFC 3720 B.4
  for (uint32_t c : {0u, 1u, 0xE3069283u, 0xffffffffu}) EXPECT_EQ(UnmaskCrc(MaskCrc(c)), c);
  EXPECT_NE(MaskCrc(0), 0u);
}

TEST(RecordFileTest, RoundTripWithTfRecordFramingAndIndex) {
  const std::string path = WriteShard(TempDir() + "/s0", 100);
  const std::string bytes = ReadAll(path);
  // The first record by hand: little-endian length, masked CRC of it, data, masked CRC of data.
  const std::string r0 = RecordText(0);
  ASSERT_GE(bytes.size(), 16 + r0.size());
  EXPECT_EQ(static_cast<unsigned char>(bytes[0]), r0.size());
  EXPECT_EQ(bytes.substr(12, r0.size()), r0);
  uint32_t stored = 0;
  for (int i = 3; i >= 0; --i) stored = (stored << 8) | static_cast<unsigned char>(bytes[8 + i]);
  EXPECT_EQ(UnmaskCrc(stored), Crc32c(bytes.substr(0, 8)));

  int64_t count = 0;
  ASSERT_TRUE(ReadEverything(path, &count).ok());
  EXPECT_EQ(count, 100);

  absl::StatusOr<std::vector<uint64_t>> index = ReadIndex(path);
  ASSERT_TRUE(index.ok()) << index.status();
  ASSERT_EQ(index->size(), 101u);
  EXPECT_EQ(index->back(), bytes.size());
  // The index lets a reader start at any record.
  auto reader = RecordReader::Open(path, static_cast<int64_t>((*index)[42]));
  ASSERT_TRUE(reader.ok());
  std::string record;
  ASSERT_TRUE(*(*reader)->Read(&record));
  EXPECT_EQ(record, RecordText(42));

  // A file written elsewhere (no index) gets one from WriteIndex, identical to the writer's.
  const std::string index_bytes = ReadAll(IndexPath(path));
  ASSERT_EQ(::unlink(IndexPath(path).c_str()), 0);
  EXPECT_TRUE(absl::IsNotFound(ReadIndex(path).status()));
  absl::StatusOr<int64_t> n = WriteIndex(path);
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(*n, 100);
  EXPECT_EQ(ReadAll(IndexPath(path)), index_bytes);
}

TEST(RecordFileTest, UnclosedWriterLeavesNoShard) {
  const std::string path = TempDir() + "/s0";
  {
    auto writer = RecordWriter::Open(path);
    ASSERT_TRUE(writer.ok());
    ASSERT_TRUE((*writer)->Write("x").ok());
  }
  struct stat st;
  EXPECT_NE(::stat(path.c_str(), &st), 0);
  EXPECT_NE(::stat((path + ".tmp").c_str(), &st), 0);
}

TEST(RecordFileTest, FlippedDataByteNamesShardAndOffset) {
  const std::string path = WriteShard(TempDir() + "/s0", 20);
  std::vector<uint64_t> index = *ReadIndex(path);
  std::string bytes = ReadAll(path);
  bytes[index[7] + 12] ^= 0x01;  // first data byte of record 7
  WriteAll(path, bytes);
  int64_t count = 0;
  absl::Status s = ReadEverything(path, &count);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  EXPECT_EQ(count, 7);  // the records before it were fine
  EXPECT_TRUE(Contains(s, path)) << s;
  EXPECT_TRUE(Contains(s, absl::StrCat("byte offset ", index[7]))) << s;
  EXPECT_TRUE(Contains(s, "data CRC mismatch")) << s;
}

TEST(RecordFileTest, FlippedLengthByteIsCaughtBeforeAllocating) {
  const std::string path = WriteShard(TempDir() + "/s0", 20);
  std::vector<uint64_t> index = *ReadIndex(path);
  std::string bytes = ReadAll(path);
  bytes[index[3] + 6] ^= 0x40;  // makes the length ~2^54
  WriteAll(path, bytes);
  int64_t count = 0;
  absl::Status s = ReadEverything(path, &count);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  EXPECT_EQ(count, 3);
  EXPECT_TRUE(Contains(s, absl::StrCat("byte offset ", index[3], ": length CRC mismatch"))) << s;
}

TEST(RecordFileTest, TruncatedShardNamesShardAndOffset) {
  const std::string path = WriteShard(TempDir() + "/s0", 20);
  std::vector<uint64_t> index = *ReadIndex(path);
  for (uint64_t cut : {index[12] + 14, index[12] + 5}) {  // inside the data, then the header
    ASSERT_EQ(::truncate(path.c_str(), static_cast<off_t>(cut)), 0);
    int64_t count = 0;
    absl::Status s = ReadEverything(path, &count);
    EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
    EXPECT_EQ(count, 12);
    EXPECT_TRUE(Contains(s, absl::StrCat("byte offset ", index[12]))) << s;
    EXPECT_TRUE(Contains(s, "truncated shard")) << s;
  }
}

std::vector<ShardRecord> Drain(ShardReader& reader, absl::Status* error) {
  std::vector<ShardRecord> out;
  while (true) {
    absl::StatusOr<std::optional<ShardRecord>> r = reader.Next();
    if (!r.ok()) {
      *error = r.status();
      return out;
    }
    if (!r->has_value()) return out;
    out.push_back(std::move(**r));
  }
}

TEST(ShardReaderTest, ReadsRangesInOrderWithinTheMemoryBound) {
  const std::string dir = TempDir();
  const std::string a = WriteShard(dir + "/a", 50);
  const std::string b = WriteShard(dir + "/b", 30);
  ShardReaderOptions options;
  options.max_buffered_bytes = 64;  // smaller than some records: one at a time still flows
  auto reader = ShardReader::Create({{a, 10, 20}, {b, 0, 30}, {a, 49, 50}, {b, 5, 5}}, options);
  ASSERT_TRUE(reader.ok()) << reader.status();
  absl::Status error;
  std::vector<ShardRecord> got = Drain(**reader, &error);
  ASSERT_TRUE(error.ok()) << error;
  ASSERT_EQ(got.size(), 10u + 30u + 1u);
  for (size_t i = 0; i < got.size(); ++i) {
    int64_t want = i < 10 ? 10 + i : i < 40 ? i - 10 : 49;
    EXPECT_EQ(got[i].record, want);
    EXPECT_EQ(got[i].data, RecordText(want));
    EXPECT_EQ(got[i].range, i < 10 ? 0u : i < 40 ? 1u : 2u);
  }
  // Again at the end: still nullopt.
  absl::StatusOr<std::optional<ShardRecord>> end = (*reader)->Next();
  ASSERT_TRUE(end.ok());
  EXPECT_FALSE(end->has_value());
}

TEST(ShardReaderTest, TruncatedShardFailsBeforeItsFirstRecord) {
  const std::string dir = TempDir();
  const std::string a = WriteShard(dir + "/a", 20);
  const std::string b = WriteShard(dir + "/b", 20);
  std::vector<uint64_t> index = *ReadIndex(b);
  ASSERT_EQ(::truncate(b.c_str(), static_cast<off_t>(index.back() - 3)), 0);
  auto reader = ShardReader::Create({{a, 0, 20}, {b, 0, 2}});
  ASSERT_TRUE(reader.ok());
  absl::Status error;
  std::vector<ShardRecord> got = Drain(**reader, &error);
  EXPECT_EQ(got.size(), 20u);  // all of a, nothing of b
  EXPECT_EQ(error.code(), absl::StatusCode::kDataLoss) << error;
  EXPECT_TRUE(Contains(error, b + " is " + std::to_string(index.back() - 3) + " bytes")) << error;
  EXPECT_TRUE(Contains(error, "truncated shard")) << error;
  // The error sticks.
  EXPECT_EQ((*reader)->Next().status().code(), absl::StatusCode::kDataLoss);
}

TEST(ShardReaderTest, CorruptRecordInsideARangeStopsAtIt) {
  const std::string a = WriteShard(TempDir() + "/a", 20);
  std::vector<uint64_t> index = *ReadIndex(a);
  std::string bytes = ReadAll(a);
  bytes[index[15] + 13] ^= 0x20;
  WriteAll(a, bytes);
  auto reader = ShardReader::Create({{a, 10, 20}});
  ASSERT_TRUE(reader.ok());
  absl::Status error;
  std::vector<ShardRecord> got = Drain(**reader, &error);
  EXPECT_EQ(got.size(), 5u);
  EXPECT_TRUE(Contains(error, absl::StrCat(a, ": corrupt record at byte offset ", index[15])))
      << error;
}

TEST(ShardReaderTest, BadRangesAndMissingFiles) {
  const std::string a = WriteShard(TempDir() + "/a", 5);
  EXPECT_EQ(ShardReader::Create({{a, 3, 2}}).status().code(), absl::StatusCode::kInvalidArgument);
  auto reader = ShardReader::Create({{a, 0, 6}});
  ASSERT_TRUE(reader.ok());
  absl::Status error;
  Drain(**reader, &error);
  EXPECT_EQ(error.code(), absl::StatusCode::kOutOfRange) << error;
  EXPECT_TRUE(Contains(error, "has 5 records")) << error;

  reader = ShardReader::Create({{a + ".missing", 0, 1}});
  ASSERT_TRUE(reader.ok());
  Drain(**reader, &error);
  EXPECT_EQ(error.code(), absl::StatusCode::kNotFound) << error;
  EXPECT_TRUE(Contains(error, "make_shards -- --index-only=")) << error;
}

TEST(ShardReaderTest, DestroyedMidRangeJoinsPromptly) {
  const std::string a = WriteShard(TempDir() + "/a", 2000);
  ShardReaderOptions options;
  options.max_buffered_bytes = 256;  // the producer blocks on a full queue
  auto reader = ShardReader::Create({{a, 0, 2000}}, options);
  ASSERT_TRUE(reader.ok());
  ASSERT_TRUE((*reader)->Next().ok());
  reader->reset();  // must not hang
}

// With room in the queue the producer is reading, not waiting: destruction must still stop it
// within a record or so, not after the chunk or the ranges it has left (here 40 x 20000 records,
// seconds of reading).
TEST(ShardReaderTest, DestroyedWhileReadingStopsWithinARecord) {
  const std::string a = WriteShard(TempDir() + "/a", 20000);
  std::vector<RecordRange> ranges(40, RecordRange{a, 0, 20000});
  ShardReaderOptions options;
  options.max_buffered_bytes = int64_t{1} << 30;
  auto reader = ShardReader::Create(ranges, options);
  ASSERT_TRUE(reader.ok());
  ASSERT_TRUE((*reader)->Next().ok());
  const absl::Time t0 = absl::Now();
  reader->reset();
  EXPECT_LT(absl::Now() - t0, absl::Milliseconds(250));
}

// An infinite timeout means no limit; converted naively to a std::chrono deadline it overflowed
// and every Next() that had to wait failed at once.
TEST(ShardReaderTest, InfiniteTimeoutWaits) {
  const std::string a = WriteShard(TempDir() + "/a", 50);
  ShardReaderOptions options;
  options.timeout = absl::InfiniteDuration();
  auto reader = ShardReader::Create({{a, 0, 50}}, options);
  ASSERT_TRUE(reader.ok());
  absl::Status error;
  EXPECT_EQ(Drain(**reader, &error).size(), 50u);
  EXPECT_TRUE(error.ok()) << error;
}

// A stalled open of a shard's index (a FIFO nobody writes) times out naming the shard; once the
// stall ends the reader is destroyed without hanging.
TEST(ShardReaderTest, StalledIndexTimesOutNamingTheShard) {
  const std::string a = TempDir() + "/stalled";
  ASSERT_EQ(mkfifo(IndexPath(a).c_str(), 0600), 0);
  ShardReaderOptions options;
  options.timeout = absl::Milliseconds(200);
  auto reader = ShardReader::Create({{a, 0, 1}}, options);
  ASSERT_TRUE(reader.ok());
  absl::StatusOr<std::optional<ShardRecord>> next = (*reader)->Next();
  EXPECT_EQ(next.status().code(), absl::StatusCode::kDeadlineExceeded) << next.status();
  EXPECT_TRUE(Contains(next.status(), "index of shard " + a)) << next.status();
  // End the stall: open the FIFO for writing (the producer's open is waiting) and close it.
  int fd = -1;
  for (int i = 0; i < 1000 && fd < 0; ++i) {
    fd = open(IndexPath(a).c_str(), O_WRONLY | O_NONBLOCK);
    if (fd < 0) usleep(1000);
  }
  ASSERT_GE(fd, 0);
  close(fd);
  reader->reset();
}

// An index whose offsets wrap around 2^64 (each CRC-valid) must be refused, not read as
// increasing offsets: the check adds nothing that could overflow.
TEST(RecordFileTest, IndexWithWrappingOffsetsIsRefused) {
  const std::string shard = WriteShard(TempDir() + "/a", 3);
  auto u64 = [](uint64_t v) {
    std::string b(8, '\0');
    for (int i = 0; i < 8; ++i) b[i] = static_cast<char>(v >> (8 * i));
    return b;
  };
  auto writer = RecordWriter::Open(IndexPath(shard));  // renamed into place as shard.index
  ASSERT_TRUE(writer.ok());
  ASSERT_TRUE((*writer)->Write(u64(0) + u64(~uint64_t{0} - 7) + u64(20)).ok());
  ASSERT_TRUE((*writer)->Close().ok());
  absl::StatusOr<std::vector<uint64_t>> index = ReadIndex(shard);
  EXPECT_EQ(index.status().code(), absl::StatusCode::kDataLoss) << index.status();
  EXPECT_TRUE(Contains(index.status(), "offset 1")) << index.status();
}

std::string WriteManifestText(const std::string& text) {
  const std::string dir = TempDir();
  WriteAll(dir + "/" + kManifestName, text);
  return dir;
}

TEST(ShardSetTest, BlankLinesOfSpacesAreSkipped) {
  absl::StatusOr<ShardSet> set = LoadShardSet(
      WriteManifestText("paddle-shards 1\n   \nfield image uint8 28,28\n \nshard s0 5\n"));
  ASSERT_TRUE(set.ok()) << set.status();
  EXPECT_EQ(set->RecordBytes(), 8 + 28 * 28);
  EXPECT_EQ(set->NumRecords(), 5);
}

TEST(ShardSetTest, SizesThatWouldOverflowAreRefused) {
  absl::StatusOr<ShardSet> set = LoadShardSet(WriteManifestText(
      "paddle-shards 1\nfield x float64 100000,100000,100000,100000\nshard s0 1\n"));
  EXPECT_EQ(set.status().code(), absl::StatusCode::kDataLoss) << set.status();
  EXPECT_TRUE(Contains(set.status(), "MANIFEST:2")) << set.status();
  set = LoadShardSet(WriteManifestText(
      "paddle-shards 1\nshard s0 9223372036854775807\nshard s1 9223372036854775807\n"));
  EXPECT_EQ(set.status().code(), absl::StatusCode::kDataLoss) << set.status();
}

}  // namespace
}  // namespace data
}  // namespace paddle
