#include "paddle/checkpoint/checkpoint_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <set>
#include <utility>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "paddle/checkpoint/proto/checkpoint.pb.h"
#include "paddle/core/logging.h"
#include "paddle/core/status.h"

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "checkpoint files store tensors in memory byte order, which must be little-endian");

namespace paddle {
namespace checkpoint {
namespace {

// Bytes checksummed and handed to one write() or read() at a time: large enough that syscalls
// cost nothing, small enough that the bytes crc32 just read are still in L2 when write() copies
// them into the page cache.
constexpr size_t kIoChunk = size_t{1} << 20;

uint64_t AlignUp(uint64_t n) { return (n + kDataAlignment - 1) / kDataAlignment * kDataAlignment; }

void PutU32(char* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<char>((v >> (8 * i)) & 0xff);
}

uint32_t GetU32(const char* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i)
    v |= static_cast<uint32_t>(static_cast<unsigned char>(p[i])) << (8 * i);
  return v;
}

uint32_t Crc32(uint32_t crc, const void* data, size_t n) {
  return static_cast<uint32_t>(crc32_z(crc, static_cast<const Bytef*>(data), n));
}

std::string Hex32(uint32_t v) { return absl::StrFormat("0x%08x", v); }

// The file is damaged: every such error names the file and what is wrong with it.
absl::Status Corrupt(const std::string& path, absl::string_view what) {
  return absl::DataLossError(absl::StrCat("checkpoint ", path, ": ", what));
}

absl::Status IoError(int err, const std::string& path, absl::string_view what) {
  return absl::ErrnoToStatus(err, absl::StrCat(what, " ", path));
}

// Closes a file descriptor on every return path of the reader.
class FdCloser {
 public:
  explicit FdCloser(int fd) : fd_(fd) {}
  ~FdCloser() { close(fd_); }
  FdCloser(const FdCloser&) = delete;
  FdCloser& operator=(const FdCloser&) = delete;

 private:
  int fd_;
};

// Sequential positional writes: small pieces (padding, small tensors) are gathered into one
// buffer, large ones go straight from the caller's memory to write().
class FileWriter {
 public:
  FileWriter(int fd, const std::string& path, uint64_t offset)
      : fd_(fd), path_(path), file_offset_(offset) {
    buffer_.reserve(kIoChunk);
  }

  absl::Status Append(const char* data, size_t n) {
    if (n >= kIoChunk / 2) {
      RETURN_IF_ERROR(Flush());
      return WriteAt(fd_, path_, file_offset_, data, n, &file_offset_);
    }
    if (buffer_.size() + n > kIoChunk) RETURN_IF_ERROR(Flush());
    buffer_.insert(buffer_.end(), data, data + n);
    return absl::OkStatus();
  }

  absl::Status AppendZeros(size_t n) {
    static constexpr char kZeros[kDataAlignment] = {};
    PADDLE_CHECK(n <= sizeof(kZeros)) << n << " padding bytes";
    return Append(kZeros, n);
  }

  absl::Status Flush() {
    absl::Status s =
        WriteAt(fd_, path_, file_offset_, buffer_.data(), buffer_.size(), &file_offset_);
    buffer_.clear();
    return s;
  }

  // pwrite() until all `n` bytes are written; advances *end to the offset after them.
  static absl::Status WriteAt(int fd, const std::string& path, uint64_t offset, const char* data,
                              size_t n, uint64_t* end) {
    while (n > 0) {
      const ssize_t w = pwrite(fd, data, n, static_cast<off_t>(offset));
      if (w < 0) {
        if (errno == EINTR) continue;
        return IoError(errno, path,
                       absl::StrCat("writing ", n, " bytes at offset ", offset, " of"));
      }
      data += w;
      n -= static_cast<size_t>(w);
      offset += static_cast<uint64_t>(w);
    }
    if (end != nullptr) *end = offset;
    return absl::OkStatus();
  }

 private:
  int fd_;
  const std::string& path_;
  uint64_t file_offset_;
  std::vector<char> buffer_;
};

// pread() until all `n` bytes are read. The caller checked the file size first, so running out of
// bytes here means the file shrank underneath us.
absl::Status ReadAt(int fd, const std::string& path, uint64_t offset, char* data, size_t n) {
  while (n > 0) {
    const ssize_t r = pread(fd, data, n, static_cast<off_t>(offset));
    if (r < 0) {
      if (errno == EINTR) continue;
      return IoError(errno, path, absl::StrCat("reading ", n, " bytes at offset ", offset, " of"));
    }
    if (r == 0) {
      return Corrupt(path, absl::StrCat("file ended at byte ", offset, " with ", n,
                                        " bytes still to read (truncated while being read?)"));
    }
    data += r;
    n -= static_cast<size_t>(r);
    offset += static_cast<uint64_t>(r);
  }
  return absl::OkStatus();
}

// Checks an entry's dtype, shape and length; returns its DType.
absl::StatusOr<DType> CheckEntry(const std::string& path, const proto::TensorEntry& entry) {
  const DType dtype = static_cast<DType>(entry.dtype());
  if (entry.dtype() > 0xff || DTypeSize(dtype) == 0) {
    return Corrupt(
        path, absl::StrCat("tensor '", entry.name(), "' has unknown dtype value ", entry.dtype()));
  }
  const Shape shape(entry.shape().begin(), entry.shape().end());
  uint64_t numel = 1;
  for (int64_t d : shape) {
    if (d < 0 || (d > 0 && numel > std::numeric_limits<uint64_t>::max() / 8 / d)) {
      return Corrupt(path, absl::StrCat("tensor '", entry.name(), "' has invalid shape ",
                                        ShapeToString(shape)));
    }
    numel *= static_cast<uint64_t>(d);
  }
  if (numel * DTypeSize(dtype) != entry.length()) {
    return Corrupt(path, absl::StrCat("tensor '", entry.name(), "' of ", DTypeName(dtype),
                                      ShapeToString(shape), " needs ", numel * DTypeSize(dtype),
                                      " bytes, manifest says ", entry.length()));
  }
  if (!entry.has_crc32()) {
    return Corrupt(path, absl::StrCat("tensor '", entry.name(), "' has no crc32 in the manifest"));
  }
  return dtype;
}

// Note [Huge pages on load]: a loaded tensor is fresh memory, and on virtual machines a first
// touch of a 4 KiB page can cost tens of microseconds: measured here, faulting in 50 MB took
// ~450 ms, far longer than reading and checksumming it (~40 ms). Asking for transparent huge
// pages on the 2 MiB-aligned interior of large tensors before reading into them cuts that to
// ~5 ms. It is advice: where THP is off or the kernel declines, nothing changes.
void AdviseHugePages(void* data, size_t bytes) {
  constexpr uintptr_t kHugePage = uintptr_t{2} << 20;
  const uintptr_t begin = (reinterpret_cast<uintptr_t>(data) + kHugePage - 1) & ~(kHugePage - 1);
  const uintptr_t end = (reinterpret_cast<uintptr_t>(data) + bytes) & ~(kHugePage - 1);
  if (end > begin) {
    madvise(reinterpret_cast<void*>(begin), end - begin, MADV_HUGEPAGE);  // advice; may fail
  }
}

absl::Status ManifestTooLarge(const std::string& path, uint64_t bytes,
                              const CheckpointState& state) {
  return absl::InvalidArgumentError(
      absl::StrCat("checkpoint ", path, ": manifest of at least ", bytes, " bytes (",
                   state.tensors.size(), " tensors, ", state.ints.size(), " ints, ",
                   state.strings.size(), " strings) is over the limit of ", kMaxManifestBytes,
                   " bytes (protobuf's 2 GiB); store large strings as uint8 tensors"));
}

// Reads one tensor and the zero padding after it, checking its crc32 on the way in.
absl::StatusOr<Tensor> ReadTensor(int fd, const std::string& path, uint64_t data_start,
                                  const proto::TensorEntry& entry, DType dtype) {
  const Shape shape(entry.shape().begin(), entry.shape().end());
  ASSIGN_OR_RETURN(Tensor t, Tensor::Empty(shape, dtype));
  char* dst = static_cast<char*>(t.data());
  AdviseHugePages(dst, entry.length());  // Note [Huge pages on load]
  uint32_t crc = Crc32(0, nullptr, 0);
  for (uint64_t done = 0; done < entry.length(); done += kIoChunk) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(kIoChunk, entry.length() - done));
    RETURN_IF_ERROR(ReadAt(fd, path, data_start + entry.offset() + done, dst + done, n));
    crc = Crc32(crc, dst + done, n);
  }
  if (crc != entry.crc32()) {
    return Corrupt(path, absl::StrCat("tensor '", entry.name(), "' crc mismatch: stored ",
                                      Hex32(entry.crc32()), ", computed ", Hex32(crc)));
  }
  const uint64_t end = entry.offset() + entry.length();
  char pad[kDataAlignment];
  const size_t pad_bytes = static_cast<size_t>(AlignUp(end) - end);
  RETURN_IF_ERROR(ReadAt(fd, path, data_start + end, pad, pad_bytes));
  for (size_t i = 0; i < pad_bytes; ++i) {
    if (pad[i] != 0) {
      return Corrupt(path, absl::StrCat("nonzero padding byte at offset ", data_start + end + i,
                                        " after tensor '", entry.name(), "'"));
    }
  }
  return t;
}

}  // namespace

// Note [One pass]: the manifest precedes the data and holds each tensor's crc32, but the crc is
// only known once the bytes have gone by. Rather than read every tensor twice (once to checksum,
// once to write), the writer lays out the manifest with placeholder checksums (fixed32 fields
// with explicit presence, so the manifest's size does not depend on their values), writes the
// data section after where the manifest will go while checksumming each chunk just before
// writing it, then writes header and manifest with the real checksums at offset 0.
absl::Status WriteCheckpointFile(int fd, const std::string& path, int64_t step,
                                 const CheckpointState& state) {
  // The manifest holds a copy of every name, key and string: a state whose bytes alone pass the
  // limit fails here, before that copy is made (the exact check follows once it is built).
  uint64_t named_bytes = 0;
  for (const auto& [name, tensor] : state.tensors) named_bytes += name.size();
  for (const auto& [key, value] : state.ints) named_bytes += key.size();
  for (const auto& [key, value] : state.strings) named_bytes += key.size() + value.size();
  if (named_bytes > kMaxManifestBytes) return ManifestTooLarge(path, named_bytes, state);

  proto::CheckpointManifest manifest;
  manifest.set_format_version(kFormatVersion);
  manifest.set_step(step);
  manifest.set_create_time_us(absl::ToUnixMicros(absl::Now()));
  uint64_t offset = 0;
  for (const auto& [name, tensor] : state.tensors) {
    if (!tensor.defined()) {
      return absl::InvalidArgumentError(
          absl::StrCat("checkpoint ", path, ": tensor '", name, "' is undefined (no storage)"));
    }
    if (!tensor.device().is_cpu()) {
      return absl::InvalidArgumentError(absl::StrCat("checkpoint ", path, ": tensor '", name,
                                                     "' is ", tensor.ToString(),
                                                     "; copy it to the CPU before saving"));
    }
    proto::TensorEntry* entry = manifest.add_tensors();
    entry->set_name(name);
    entry->set_dtype(static_cast<uint32_t>(tensor.dtype()));
    for (int64_t d : tensor.shape()) entry->add_shape(d);
    entry->set_offset(offset);
    entry->set_length(tensor.nbytes());
    entry->set_crc32(0);  // placeholder, Note [One pass]
    offset = AlignUp(offset + tensor.nbytes());
  }
  manifest.set_data_length(offset);
  for (const auto& [key, value] : state.ints) {
    proto::IntValue* v = manifest.add_ints();
    v->set_key(key);
    v->set_value(value);
  }
  for (const auto& [key, value] : state.strings) {
    proto::StringValue* v = manifest.add_strings();
    v->set_key(key);
    v->set_value(value);
  }

  const size_t manifest_bytes = manifest.ByteSizeLong();
  if (manifest_bytes > kMaxManifestBytes) return ManifestTooLarge(path, manifest_bytes, state);
  const uint64_t header_end = kHeaderBytes + manifest_bytes + 4;
  const uint64_t data_start = AlignUp(header_end);

  FileWriter writer(fd, path, data_start);
  int index = 0;
  for (const auto& [name, tensor] : state.tensors) {
    absl::StatusOr<Tensor> contiguous = tensor.Contiguous();
    if (!contiguous.ok()) {
      return Annotate(contiguous.status(), absl::StrCat("checkpoint ", path, ": tensor '", name,
                                                        "' (", tensor.ToString(), ")"));
    }
    const char* src = static_cast<const char*>(contiguous->data());
    const size_t nbytes = contiguous->nbytes();
    uint32_t crc = Crc32(0, nullptr, 0);
    for (size_t done = 0; done < nbytes; done += kIoChunk) {
      const size_t n = std::min(kIoChunk, nbytes - done);
      crc = Crc32(crc, src + done, n);
      RETURN_IF_ERROR(writer.Append(src + done, n));
    }
    RETURN_IF_ERROR(writer.AppendZeros(AlignUp(nbytes) - nbytes));
    manifest.mutable_tensors(index++)->set_crc32(crc);
  }
  RETURN_IF_ERROR(writer.Flush());

  std::string head(data_start, '\0');
  std::memcpy(head.data(), kMagic, sizeof(kMagic));
  PutU32(head.data() + 8, kFormatVersion);
  PutU32(head.data() + 12, static_cast<uint32_t>(manifest_bytes));
  PADDLE_CHECK(
      manifest.ByteSizeLong() == manifest_bytes &&
      manifest.SerializeToArray(head.data() + kHeaderBytes, static_cast<int>(manifest_bytes)))
      << "checkpoint manifest changed size after filling in checksums, Note [One pass]";
  PutU32(head.data() + kHeaderBytes + manifest_bytes,
         Crc32(0, head.data(), kHeaderBytes + manifest_bytes));
  return FileWriter::WriteAt(fd, path, 0, head.data(), head.size(), nullptr);
}

absl::StatusOr<CheckpointFileContents> ReadCheckpointFile(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return IoError(errno, path, "opening checkpoint");
  FdCloser closer(fd);
  struct stat st;
  if (fstat(fd, &st) != 0) return IoError(errno, path, "stat of checkpoint");
  const uint64_t file_size = static_cast<uint64_t>(st.st_size);

  // Header: magic and version first, so that a file of another kind or a newer format gets that
  // error rather than a checksum mismatch.
  if (file_size < kHeaderBytes) {
    return Corrupt(path, absl::StrCat("file is ", file_size, " bytes, shorter than the ",
                                      kHeaderBytes, "-byte header: truncated"));
  }
  char header[kHeaderBytes];
  RETURN_IF_ERROR(ReadAt(fd, path, 0, header, kHeaderBytes));
  if (std::memcmp(header, kMagic, sizeof(kMagic)) != 0) {
    return Corrupt(path, absl::StrCat("bad magic bytes '", absl::CHexEscape({header, 8}),
                                      "', expected '", absl::CHexEscape({kMagic, 8}),
                                      "': not a checkpoint file, or its header is corrupt"));
  }
  const uint32_t version = GetU32(header + 8);
  if (version > kFormatVersion) {
    return absl::FailedPreconditionError(
        absl::StrCat("checkpoint ", path, ": format version ", version,
                     " is newer than this build reads (version ", kFormatVersion,
                     "); load it with a newer Paddle Collective"));
  }
  if (version == 0) {
    return Corrupt(path, absl::StrCat("format version 0 is not a valid version (this build reads "
                                      "version ",
                                      kFormatVersion, ")"));
  }

  // Manifest, its crc and the padding up to the data section.
  const uint64_t manifest_bytes = GetU32(header + 12);
  if (manifest_bytes > kMaxManifestBytes) {
    return Corrupt(path, absl::StrCat("manifest length ", manifest_bytes, " is over the ",
                                      kMaxManifestBytes, "-byte limit no writer exceeds"));
  }
  const uint64_t header_end = kHeaderBytes + manifest_bytes + 4;
  const uint64_t data_start = AlignUp(header_end);
  if (data_start > file_size) {
    return Corrupt(
        path, absl::StrCat("the ", manifest_bytes, "-byte manifest and its padding end at byte ",
                           data_start, ", past the end of the file (", file_size,
                           " bytes): truncated, or a corrupt manifest length"));
  }
  std::string head(data_start, '\0');
  RETURN_IF_ERROR(ReadAt(fd, path, 0, head.data(), head.size()));
  const uint32_t stored_crc = GetU32(head.data() + kHeaderBytes + manifest_bytes);
  const uint32_t computed_crc = Crc32(0, head.data(), kHeaderBytes + manifest_bytes);
  if (stored_crc != computed_crc) {
    return Corrupt(path, absl::StrCat("header and manifest crc mismatch: stored ",
                                      Hex32(stored_crc), ", computed ", Hex32(computed_crc)));
  }
  for (uint64_t i = header_end; i < data_start; ++i) {
    if (head[i] != 0) {
      return Corrupt(
          path, absl::StrCat("nonzero padding byte at offset ", i, " before the data section"));
    }
  }
  proto::CheckpointManifest manifest;
  if (!manifest.ParseFromArray(head.data() + kHeaderBytes, static_cast<int>(manifest_bytes))) {
    return Corrupt(path, absl::StrCat("the ", manifest_bytes,
                                      "-byte manifest does not parse (its crc matched, so the "
                                      "writer was broken)"));
  }
  if (manifest.format_version() != version) {
    return Corrupt(path, absl::StrCat("manifest says format version ", manifest.format_version(),
                                      ", header says ", version));
  }
  if (manifest.data_length() > file_size || data_start + manifest.data_length() != file_size) {
    return Corrupt(
        path,
        absl::StrCat(
            "file is ", file_size, " bytes, manifest expects ", data_start + manifest.data_length(),
            " (a data section of ", manifest.data_length(), " bytes at offset ", data_start, "): ",
            file_size < data_start + manifest.data_length() ? "truncated" : "trailing bytes"));
  }

  // Tensors, packed in manifest order; the layout is checked before any bytes are read.
  CheckpointFileContents out;
  std::set<std::string> names;
  uint64_t expected_offset = 0;
  std::vector<DType> dtypes;
  for (const proto::TensorEntry& entry : manifest.tensors()) {
    ASSIGN_OR_RETURN(DType dtype, CheckEntry(path, entry));
    dtypes.push_back(dtype);
    if (!names.insert(entry.name()).second) {
      return Corrupt(path, absl::StrCat("tensor '", entry.name(), "' appears twice"));
    }
    if (entry.offset() != expected_offset) {
      return Corrupt(path, absl::StrCat("tensor '", entry.name(), "' at data offset ",
                                        entry.offset(), ", expected ", expected_offset,
                                        " (tensors are packed in manifest order)"));
    }
    // offset <= data_length here, so neither side overflows.
    if (entry.length() > manifest.data_length() - entry.offset() ||
        AlignUp(entry.offset() + entry.length()) > manifest.data_length()) {
      return Corrupt(path,
                     absl::StrCat("tensor '", entry.name(), "' (", entry.length(),
                                  " bytes at data offset ", entry.offset(), ") ends past the ",
                                  manifest.data_length(), "-byte data section"));
    }
    expected_offset = AlignUp(entry.offset() + entry.length());
  }
  if (expected_offset != manifest.data_length()) {
    return Corrupt(path, absl::StrCat("tensors fill ", expected_offset, " bytes of the ",
                                      manifest.data_length(), "-byte data section"));
  }
  for (int i = 0; i < manifest.tensors_size(); ++i) {
    const proto::TensorEntry& entry = manifest.tensors(i);
    ASSIGN_OR_RETURN(Tensor t, ReadTensor(fd, path, data_start, entry, dtypes[i]));
    out.state.tensors.emplace(entry.name(), std::move(t));
  }
  for (const proto::IntValue& v : manifest.ints()) {
    if (!out.state.ints.emplace(v.key(), v.value()).second) {
      return Corrupt(path, absl::StrCat("int '", v.key(), "' appears twice"));
    }
  }
  for (const proto::StringValue& v : manifest.strings()) {
    if (!out.state.strings.emplace(v.key(), v.value()).second) {
      return Corrupt(path, absl::StrCat("string '", v.key(), "' appears twice"));
    }
  }
  out.step = manifest.step();
  out.create_time_us = manifest.create_time_us();
  return out;
}

}  // namespace checkpoint
}  // namespace paddle
