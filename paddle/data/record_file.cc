// Record shards in TFRecord framing: the writer, the sequential reader and the index.
#include "paddle/data/record_file.h"

#include <errno.h>
#include <fcntl.h>
#include <isa-l/crc.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "paddle/core/status.h"

namespace paddle {
namespace data {
namespace {

constexpr size_t kWriteBufferBytes = size_t{1} << 20;
constexpr size_t kReadBufferBytes = size_t{1} << 20;

// Little-endian fields, byte by byte so the format does not depend on the host.
void Store64(char* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<char>(v >> (8 * i));
}
void Store32(char* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<char>(v >> (8 * i));
}
uint64_t Load64(const char* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(p[i]);
  return v;
}
uint32_t Load32(const char* p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(p[i]);
  return v;
}

absl::Status ErrnoError(int err, absl::string_view what, const std::string& path) {
  std::string message = absl::StrCat(what, " ", path, ": ", strerror(err));
  if (err == ENOENT) return absl::NotFoundError(message);
  if (err == EACCES || err == EPERM) return absl::PermissionDeniedError(message);
  return absl::InternalError(message);
}

void AppendU64(std::string* out, uint64_t v) {
  char b[8];
  Store64(b, v);
  out->append(b, 8);
}

void AppendU32(std::string* out, uint32_t v) {
  char b[4];
  Store32(b, v);
  out->append(b, 4);
}

void AppendRecord(std::string* out, absl::string_view record) {
  char length[8];
  Store64(length, record.size());
  out->append(length, 8);
  AppendU32(out, MaskCrc(Crc32c(absl::string_view(length, 8))));
  out->append(record.data(), record.size());
  AppendU32(out, MaskCrc(Crc32c(record)));
}

absl::Status WriteAll(int fd, absl::string_view data, const std::string& path) {
  while (!data.empty()) {
    ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoError(errno, "writing", path);
    data.remove_prefix(static_cast<size_t>(n));
  }
  return absl::OkStatus();
}

// Writes `data` to `path` through a .tmp file and a rename.
absl::Status WriteFileAtomically(const std::string& path, absl::string_view data) {
  std::string tmp = path + ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoError(errno, "creating", tmp);
  absl::Status s = WriteAll(fd, data, tmp);
  if (s.ok() && ::fsync(fd) != 0) s = ErrnoError(errno, "fsync of", tmp);
  ::close(fd);
  if (s.ok() && ::rename(tmp.c_str(), path.c_str()) != 0) s = ErrnoError(errno, "renaming", tmp);
  if (!s.ok()) ::unlink(tmp.c_str());
  return s;
}

}  // namespace

uint32_t Crc32c(absl::string_view data) {
  // ISA-L's crc32_iscsi neither inverts its input nor its output; CRC-32C does both. Its length
  // is an int, so feed it at most 1 GiB at a time.
  uint32_t crc = 0xffffffffu;
  const unsigned char* p = reinterpret_cast<const unsigned char*>(data.data());
  size_t left = data.size();
  while (left > 0) {
    int n = static_cast<int>(std::min<size_t>(left, size_t{1} << 30));
    crc = crc32_iscsi(const_cast<unsigned char*>(p), n, crc);
    p += n;
    left -= static_cast<size_t>(n);
  }
  return ~crc;
}

uint32_t MaskCrc(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }

uint32_t UnmaskCrc(uint32_t masked) {
  uint32_t rot = masked - 0xa282ead8u;
  return (rot >> 17) | (rot << 15);
}

std::string IndexPath(const std::string& shard_path) { return shard_path + ".index"; }

// ---------------------------------------------------------------------------------------------
// RecordWriter

absl::StatusOr<std::unique_ptr<RecordWriter>> RecordWriter::Open(const std::string& path) {
  std::string tmp = path + ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoError(errno, "creating shard", tmp);
  return std::unique_ptr<RecordWriter>(new RecordWriter(path, fd));
}

RecordWriter::~RecordWriter() {
  if (fd_ >= 0) {
    ::close(fd_);
    ::unlink((path_ + ".tmp").c_str());
  }
}

absl::Status RecordWriter::Write(absl::string_view record) {
  if (fd_ < 0) return absl::FailedPreconditionError(absl::StrCat(path_, ": write after Close"));
  if (static_cast<int64_t>(record.size()) > kMaxRecordBytes) {
    return absl::InvalidArgumentError(absl::StrCat(path_, ": record ", offsets_.size(), " is ",
                                                   record.size(), " bytes, over the limit of ",
                                                   kMaxRecordBytes));
  }
  offsets_.push_back(static_cast<uint64_t>(bytes_));
  AppendRecord(&buffer_, record);
  bytes_ += kRecordHeaderBytes + static_cast<int64_t>(record.size()) + kRecordFooterBytes;
  if (buffer_.size() >= kWriteBufferBytes) return Flush();
  return absl::OkStatus();
}

absl::Status RecordWriter::Flush() {
  absl::Status s = WriteAll(fd_, buffer_, path_ + ".tmp");
  buffer_.clear();
  return s;
}

absl::Status RecordWriter::Close() {
  if (fd_ < 0) return absl::FailedPreconditionError(absl::StrCat(path_, ": closed twice"));
  std::string tmp = path_ + ".tmp";
  absl::Status s = Flush();
  if (s.ok() && ::fsync(fd_) != 0) s = ErrnoError(errno, "fsync of", tmp);
  ::close(fd_);
  fd_ = -1;
  if (!s.ok()) {
    ::unlink(tmp.c_str());
    return s;
  }
  std::string index;
  for (uint64_t o : offsets_) AppendU64(&index, o);
  AppendU64(&index, static_cast<uint64_t>(bytes_));
  std::string framed;
  AppendRecord(&framed, index);
  // The index goes first: a shard that exists always has the index that describes it.
  s = WriteFileAtomically(IndexPath(path_), framed);
  if (s.ok() && ::rename(tmp.c_str(), path_.c_str()) != 0) s = ErrnoError(errno, "renaming", tmp);
  if (!s.ok()) ::unlink(tmp.c_str());
  return s;
}

// ---------------------------------------------------------------------------------------------
// RecordReader

absl::StatusOr<std::unique_ptr<RecordReader>> RecordReader::Open(const std::string& path,
                                                                 int64_t offset) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoError(errno, "opening shard", path);
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    return ErrnoError(err, "stat of shard", path);
  }
  if (offset < 0 || offset > st.st_size) {
    ::close(fd);
    return absl::OutOfRangeError(absl::StrCat("shard ", path, ": start offset ", offset,
                                              " is outside the file (", st.st_size, " bytes)"));
  }
  if (offset > 0 && ::lseek(fd, offset, SEEK_SET) != offset) {
    int err = errno;
    ::close(fd);
    return ErrnoError(err, "seeking in shard", path);
  }
  return std::unique_ptr<RecordReader>(new RecordReader(path, fd, offset, st.st_size));
}

RecordReader::~RecordReader() { ::close(fd_); }

absl::Status RecordReader::Corrupt(absl::string_view what) const {
  return absl::DataLossError(
      absl::StrCat("shard ", path_, ": corrupt record at byte offset ", offset_, ": ", what));
}

absl::StatusOr<bool> RecordReader::ReadExactly(char* out, int64_t n) {
  while (n > 0) {
    if (buffer_pos_ == buffer_.size()) {
      buffer_.resize(kReadBufferBytes);
      buffer_pos_ = 0;
      ssize_t got;
      do {
        got = ::read(fd_, &buffer_[0], buffer_.size());
      } while (got < 0 && errno == EINTR);
      if (got < 0) {
        buffer_.clear();
        return ErrnoError(errno, "reading shard", path_);
      }
      buffer_.resize(static_cast<size_t>(got));
      if (got == 0) return false;
    }
    size_t take = std::min<size_t>(static_cast<size_t>(n), buffer_.size() - buffer_pos_);
    std::memcpy(out, buffer_.data() + buffer_pos_, take);
    buffer_pos_ += take;
    out += take;
    n -= static_cast<int64_t>(take);
  }
  return true;
}

absl::StatusOr<bool> RecordReader::Read(std::string* record) {
  char header[kRecordHeaderBytes];
  if (offset_ == file_size_) return false;
  ASSIGN_OR_RETURN(bool got, ReadExactly(header, kRecordHeaderBytes));
  if (!got) {
    return Corrupt(absl::StrCat("the file ends (at ", file_size_, " bytes) inside the ",
                                kRecordHeaderBytes, "-byte record header: truncated shard"));
  }
  uint32_t stored = UnmaskCrc(Load32(header + 8));
  uint32_t computed = Crc32c(absl::string_view(header, 8));
  if (stored != computed) {
    return Corrupt(
        absl::StrFormat("length CRC mismatch (stored 0x%08x, computed 0x%08x)", stored, computed));
  }
  uint64_t length = Load64(header);
  if (length > static_cast<uint64_t>(kMaxRecordBytes)) {
    return Corrupt(absl::StrCat("length ", length, " is over the limit of ", kMaxRecordBytes));
  }
  int64_t end = offset_ + kRecordHeaderBytes + static_cast<int64_t>(length) + kRecordFooterBytes;
  if (end > file_size_) {
    return Corrupt(absl::StrCat("the record needs bytes up to ", end, " but the file ends at ",
                                file_size_, ": truncated shard"));
  }
  record->resize(length);
  char footer[kRecordFooterBytes];
  ASSIGN_OR_RETURN(bool body, ReadExactly(&(*record)[0], static_cast<int64_t>(length)));
  ASSIGN_OR_RETURN(bool tail, ReadExactly(footer, kRecordFooterBytes));
  if (!body || !tail) return Corrupt("the file shrank while being read: truncated shard");
  stored = UnmaskCrc(Load32(footer));
  computed = Crc32c(*record);
  if (stored != computed) {
    return Corrupt(
        absl::StrFormat("data CRC mismatch over %d bytes (stored 0x%08x, computed "
                        "0x%08x)",
                        length, stored, computed));
  }
  offset_ = end;
  return true;
}

absl::StatusOr<absl::string_view> CheckFramedRecord(absl::string_view framed,
                                                    const std::string& path, int64_t offset) {
  auto corrupt = [&](absl::string_view what) {
    return absl::DataLossError(
        absl::StrCat("shard ", path, ": corrupt record at byte offset ", offset, ": ", what));
  };
  const int64_t size = static_cast<int64_t>(framed.size());
  if (size < kRecordHeaderBytes + kRecordFooterBytes) {
    return corrupt(absl::StrCat("the index gives it ", size, " bytes, less than its framing"));
  }
  uint32_t stored = UnmaskCrc(Load32(framed.data() + 8));
  uint32_t computed = Crc32c(framed.substr(0, 8));
  if (stored != computed) {
    return corrupt(
        absl::StrFormat("length CRC mismatch (stored 0x%08x, computed 0x%08x)", stored, computed));
  }
  const uint64_t length = Load64(framed.data());
  if (length != static_cast<uint64_t>(size - kRecordHeaderBytes - kRecordFooterBytes)) {
    return corrupt(absl::StrCat("length ", length, " disagrees with the index, which gives it ",
                                size - kRecordHeaderBytes - kRecordFooterBytes, " data bytes"));
  }
  absl::string_view data = framed.substr(kRecordHeaderBytes, length);
  stored = UnmaskCrc(Load32(framed.data() + kRecordHeaderBytes + length));
  computed = Crc32c(data);
  if (stored != computed) {
    return corrupt(
        absl::StrFormat("data CRC mismatch over %d bytes (stored 0x%08x, computed 0x%08x)", length,
                        stored, computed));
  }
  return data;
}

// ---------------------------------------------------------------------------------------------
// Index

absl::StatusOr<std::vector<uint64_t>> ReadIndex(const std::string& shard_path) {
  std::string path = IndexPath(shard_path);
  absl::StatusOr<std::unique_ptr<RecordReader>> reader = RecordReader::Open(path);
  if (absl::IsNotFound(reader.status())) {
    return absl::NotFoundError(absl::StrCat("index ", path, " of shard ", shard_path,
                                            " is missing; build it with `bazel run "
                                            "//tools:make_shards -- --index-only=",
                                            shard_path, "`"));
  }
  if (!reader.ok()) return reader.status();
  std::string data;
  ASSIGN_OR_RETURN(bool got, (*reader)->Read(&data));
  if (!got || data.size() % 8 != 0 || data.size() < 8) {
    return absl::DataLossError(absl::StrCat("index ", path,
                                            ": expected one record of n + 1 "
                                            "uint64 offsets, found ",
                                            got ? absl::StrCat(data.size(), " bytes") : "none"));
  }
  std::vector<uint64_t> offsets(data.size() / 8);
  for (size_t i = 0; i < offsets.size(); ++i) {
    offsets[i] = Load64(data.data() + 8 * i);
    if (i == 0 && offsets[0] != 0) {
      return absl::DataLossError(
          absl::StrCat("index ", path, ": the first offset is ", offsets[0], ", not 0"));
    }
    // Subtracting, not adding: a crafted offset near 2^64 must not wrap past the check.
    if (i > 0 && (offsets[i] < offsets[i - 1] ||
                  offsets[i] - offsets[i - 1] <
                      static_cast<uint64_t>(kRecordHeaderBytes + kRecordFooterBytes) ||
                  offsets[i] > static_cast<uint64_t>(INT64_MAX))) {
      return absl::DataLossError(absl::StrCat("index ", path, ": offset ", i, " (", offsets[i],
                                              ") does not follow offset ", i - 1, " (",
                                              offsets[i - 1], ") by at least one record"));
    }
  }
  return offsets;
}

absl::StatusOr<int64_t> WriteIndex(const std::string& shard_path) {
  ASSIGN_OR_RETURN(std::unique_ptr<RecordReader> reader, RecordReader::Open(shard_path));
  std::string index;
  std::string record;
  int64_t n = 0;
  while (true) {
    int64_t at = reader->offset();
    ASSIGN_OR_RETURN(bool got, reader->Read(&record));
    AppendU64(&index, static_cast<uint64_t>(at));
    if (!got) break;
    ++n;
  }
  std::string framed;
  AppendRecord(&framed, index);
  RETURN_IF_ERROR(WriteFileAtomically(IndexPath(shard_path), framed));
  return n;
}

}  // namespace data
}  // namespace paddle
