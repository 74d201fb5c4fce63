// Record shards: the on-disk format of data sets that do not fit in memory.
//
// A shard is a file of records in TFRecord's framing, so users can bring the TFRecord files they
// already have and tools that read TFRecord read ours:
//
//   uint64 length (little-endian) | uint32 masked CRC-32C of those 8 bytes |
//   length bytes of data          | uint32 masked CRC-32C of the data
//
// CRC-32C (Castagnoli) comes from Intel ISA-L (Debian's libisal-dev, crc32_iscsi), which uses the
// SSE4.2 crc32 instruction; the mask is TFRecord's ((crc >> 15 | crc << 17) + 0xa282ead8), which
// keeps a CRC of data that itself holds CRCs from being trivially zero. Every record is checked
// on read, so a flipped bit or a torn write is an error naming the shard and the byte offset of
// the record, never a sample trained on garbage.
//
// Index: next to `shard` lives `shard.index`, itself a one-record file in the same framing whose
// data is the little-endian uint64 offsets of every record followed by the shard's total size
// (n + 1 numbers for n records). It lets a reader start at record k without scanning, and it is
// how a reader tells a truncated shard from a short one. WriteIndex builds one for a TFRecord
// file written elsewhere (`bazel run //tools:make_shards -- --index-only=FILE`).
//
// RecordWriter writes `shard.tmp` and renames it (and its index) into place on Close, so a shard
// that exists is complete. RecordReader reads one shard sequentially through a 1 MiB buffer.
// Neither is thread-safe; ShardReader (shard_reader.h) adds the prefetch thread.
#ifndef PADDLE_DATA_RECORD_FILE_H_
#define PADDLE_DATA_RECORD_FILE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace paddle {
namespace data {

// CRC-32C of `data` (the standard one: "123456789" gives 0xE3069283).
uint32_t Crc32c(absl::string_view data);
// TFRecord's masking of a CRC stored next to the data it covers, and its inverse.
uint32_t MaskCrc(uint32_t crc);
uint32_t UnmaskCrc(uint32_t masked);

// Framing overhead per record: 8 + 4 bytes before the data, 4 after.
inline constexpr int64_t kRecordHeaderBytes = 12;
inline constexpr int64_t kRecordFooterBytes = 4;
// Records larger than this are refused on write and reported as corrupt on read, so a damaged
// length field cannot make a reader allocate the machine's memory.
inline constexpr int64_t kMaxRecordBytes = int64_t{1} << 30;

// The index file of `shard_path`.
std::string IndexPath(const std::string& shard_path);

class RecordWriter {
 public:
  // Creates `path`.tmp (truncating one left by a crashed writer). kInvalidArgument/kNotFound/
  // kPermissionDenied naming the path if it cannot be created.
  static absl::StatusOr<std::unique_ptr<RecordWriter>> Open(const std::string& path);
  // Without Close, removes the .tmp file: an unfinished shard never appears.
  ~RecordWriter();
  RecordWriter(const RecordWriter&) = delete;
  RecordWriter& operator=(const RecordWriter&) = delete;

  absl::Status Write(absl::string_view record);
  // Flushes, fsyncs, writes the index, and renames both into place.
  absl::Status Close();

  int64_t num_records() const { return static_cast<int64_t>(offsets_.size()); }

 private:
  RecordWriter(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}
  absl::Status Flush();

  std::string path_;
  int fd_;
  std::string buffer_;
  int64_t bytes_ = 0;  // written to the file so far, buffer included
  std::vector<uint64_t> offsets_;
};

class RecordReader {
 public:
  // Opens `path` for reading from byte `offset` (which must be the start of a record; 0 for the
  // first). kNotFound naming the path if it does not exist.
  static absl::StatusOr<std::unique_ptr<RecordReader>> Open(const std::string& path,
                                                            int64_t offset = 0);
  ~RecordReader();
  RecordReader(const RecordReader&) = delete;
  RecordReader& operator=(const RecordReader&) = delete;

  // Reads the next record into `record`: true, or false at a clean end of file. kDataLoss naming
  // the shard and the record's byte offset for a CRC mismatch, an impossible length or a file
  // that ends inside a record.
  absl::StatusOr<bool> Read(std::string* record);

  // Byte offset of the next record.
  int64_t offset() const { return offset_; }
  const std::string& path() const { return path_; }

 private:
  RecordReader(std::string path, int fd, int64_t offset, int64_t file_size)
      : path_(std::move(path)), fd_(fd), offset_(offset), file_size_(file_size) {}
  // Copies `n` bytes at the read position into `out`; false if the file ends first.
  absl::StatusOr<bool> ReadExactly(char* out, int64_t n);
  absl::Status Corrupt(absl::string_view what) const;

  std::string path_;
  int fd_;
  int64_t offset_;  // start of the record being read
  int64_t file_size_;
  std::string buffer_;
  size_t buffer_pos_ = 0;
};

// Checks one whole framed record held in memory (`framed`: header, data and footer, exactly as
// long as the index says the record is) and returns its data, a view into `framed`. For readers
// that read many records with one read (TaskFeed). kDataLoss in RecordReader's words, naming
// `path` and the record's byte `offset`, for a CRC mismatch or a length that disagrees with the
// record's size.
absl::StatusOr<absl::string_view> CheckFramedRecord(absl::string_view framed,
                                                    const std::string& path, int64_t offset);

// Reads `shard_path`.index: n + 1 offsets for n records. kDataLoss naming the index file if it is
// corrupt or its offsets are not increasing; kNotFound (with the fix) if it is missing.
absl::StatusOr<std::vector<uint64_t>> ReadIndex(const std::string& shard_path);
// Scans `shard_path` (checking every record) and writes its index; returns the record count.
absl::StatusOr<int64_t> WriteIndex(const std::string& shard_path);

}  // namespace data
}  // namespace paddle

#endif  // PADDLE_DATA_RECORD_FILE_H_
