#include "paddle/data/fashion_mnist.h"

#include <sys/stat.h>
#include <zlib.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "paddle/data/pixels.h"

namespace paddle {
namespace data {
namespace {

// idx magic numbers: two zero bytes, the element type (0x08: unsigned byte), the dimension count.
constexpr uint32_t kImagesMagic = 2051;  // 0x00000803: ubyte, 3 dimensions
constexpr uint32_t kLabelsMagic = 2049;  // 0x00000801: ubyte, 1 dimension
constexpr unsigned kReadChunkBytes = 1u << 20;
constexpr char kInstallHint[] =
    "install Debian's dataset-fashion-mnist (apt-get install dataset-fashion-mnist)";

std::string NotFoundHint(const std::string& what) { return absl::StrCat(what, "; ", kInstallHint); }

// An open gzip file, closed on destruction.
class GzReader {
 public:
  explicit GzReader(gzFile file) : file_(file) {}
  ~GzReader() { gzclose(file_); }
  GzReader(const GzReader&) = delete;
  GzReader& operator=(const GzReader&) = delete;

  // Reads up to `bytes` bytes; returns how many arrived (fewer only at the end or on an error).
  int64_t Read(void* out, int64_t bytes) {
    int64_t done = 0;
    while (done < bytes) {
      const unsigned want = static_cast<unsigned>(std::min<int64_t>(bytes - done, kReadChunkBytes));
      const int got = gzread(file_, static_cast<char*>(out) + done, want);
      if (got <= 0) break;
      done += got;
    }
    return done;
  }

  // zlib's description of a decompression error (a cut-off or corrupt gzip stream); "" if none.
  std::string ErrorText() {
    int code = Z_OK;
    const char* text = gzerror(file_, &code);
    if (code == Z_OK || code == Z_STREAM_END || text == nullptr) return "";
    return absl::StrCat(" (zlib: ", text, ")");
  }

 private:
  gzFile file_;
};

uint32_t BigEndian32(const unsigned char* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

// The payload of one idx file of unsigned bytes: checks the magic number, that the dimensions
// after the first are `item_dims`, that exactly count * prod(item_dims) bytes follow the header;
// returns the bytes and stores the first dimension in `count`.
absl::StatusOr<std::vector<uint8_t>> ReadIdx(const std::string& path, uint32_t magic,
                                             absl::Span<const int64_t> item_dims,
                                             const char* item_name, int64_t* count) {
  gzFile file = gzopen(path.c_str(), "rb");
  if (file == nullptr) {
    const int err = errno;
    if (err == ENOENT) return absl::NotFoundError(NotFoundHint(absl::StrCat(path, " not found")));
    return absl::PermissionDeniedError(
        absl::StrCat("cannot open ", path, ": ", std::strerror(err)));
  }
  GzReader reader(file);
  gzbuffer(file, kReadChunkBytes);  // 1 MiB reads instead of zlib's default 8 KiB

  const int64_t rank = 1 + static_cast<int64_t>(item_dims.size());
  const int64_t header_bytes = 4 * (1 + rank);
  std::array<unsigned char, 16> header{};
  const int64_t got_header = reader.Read(header.data(), 4);
  if (got_header < 4) {
    return absl::DataLossError(absl::StrCat(path, " is truncated: ", got_header,
                                            " bytes, shorter than the 4-byte idx magic number",
                                            reader.ErrorText()));
  }
  const uint32_t found_magic = BigEndian32(header.data());
  if (found_magic != magic) {
    return absl::DataLossError(absl::StrCat(
        path, " has idx magic number ", found_magic, ", expected ", magic, " (unsigned bytes, ",
        rank, " dimensions); the file is corrupt or not a Fashion-MNIST ", item_name, " file"));
  }
  const int64_t got_dims = reader.Read(header.data() + 4, header_bytes - 4);
  if (got_dims < header_bytes - 4) {
    return absl::DataLossError(absl::StrCat(path, " is truncated: ", 4 + got_dims, " of the ",
                                            header_bytes, " header bytes", reader.ErrorText()));
  }
  std::vector<int64_t> dims;
  for (int64_t d = 0; d < rank; ++d) dims.push_back(BigEndian32(header.data() + 4 * (1 + d)));
  if (!std::equal(item_dims.begin(), item_dims.end(), dims.begin() + 1)) {
    return absl::DataLossError(absl::StrCat(path, " has dimensions [", absl::StrJoin(dims, ", "),
                                            "], expected [N, ", absl::StrJoin(item_dims, ", "),
                                            "]"));
  }

  *count = dims[0];
  int64_t item_bytes = 1;
  for (int64_t d : item_dims) item_bytes *= d;
  const int64_t payload = *count * item_bytes;
  // Grow the buffer as data arrives rather than trusting the header's count: a corrupt count
  // must not turn into a multi-terabyte allocation.
  std::vector<uint8_t> bytes;
  while (static_cast<int64_t>(bytes.size()) < payload) {
    const int64_t start = static_cast<int64_t>(bytes.size());
    const int64_t want = std::min<int64_t>(payload - start, int64_t{64} << 20);
    bytes.resize(start + want);
    const int64_t got = reader.Read(bytes.data() + start, want);
    if (got < want) {
      return absl::DataLossError(absl::StrCat(path, " is truncated: its header declares ", *count,
                                              " ", item_name, "s (", payload, " bytes after the ",
                                              header_bytes, "-byte header) but only ", start + got,
                                              " bytes follow", reader.ErrorText()));
    }
  }
  unsigned char extra = 0;
  if (reader.Read(&extra, 1) != 0) {
    return absl::DataLossError(absl::StrCat(path, " has more data after the ", *count, " ",
                                            item_name, "s (", payload,
                                            " bytes) its header declares"));
  }
  return bytes;
}

const char* SplitPrefix(Split split) { return split == Split::kTrain ? "train" : "t10k"; }

}  // namespace

absl::StatusOr<Dataset> LoadFashionMnist(Split split, const std::string& dir, bool normalize) {
  struct stat info {};
  if (stat(dir.c_str(), &info) != 0 || !S_ISDIR(info.st_mode)) {
    return absl::NotFoundError(
        NotFoundHint(absl::StrCat("Fashion-MNIST directory ", dir, " does not exist")));
  }
  const std::string images_path =
      absl::StrCat(dir, "/", SplitPrefix(split), "-images-idx3-ubyte.gz");
  const std::string labels_path =
      absl::StrCat(dir, "/", SplitPrefix(split), "-labels-idx1-ubyte.gz");

  int64_t num_labels = 0;
  absl::StatusOr<std::vector<uint8_t>> labels =
      ReadIdx(labels_path, kLabelsMagic, {}, "label", &num_labels);
  if (!labels.ok()) return labels.status();
  int64_t num_images = 0;
  absl::StatusOr<std::vector<uint8_t>> pixels = ReadIdx(
      images_path, kImagesMagic, {kFashionMnistRows, kFashionMnistCols}, "image", &num_images);
  if (!pixels.ok()) return pixels.status();
  if (num_images != num_labels) {
    return absl::DataLossError(absl::StrCat(images_path, " holds ", num_images, " images but ",
                                            labels_path, " holds ", num_labels,
                                            " labels; they must match one to one"));
  }

  Dataset dataset;
  absl::StatusOr<Tensor> label_tensor = Tensor::Empty({num_labels}, DType::kInt64);
  if (!label_tensor.ok()) return label_tensor.status();
  int64_t* label_out = label_tensor->data<int64_t>();
  for (int64_t i = 0; i < num_labels; ++i) {
    const uint8_t label = (*labels)[i];
    if (label >= kFashionMnistClasses) {
      return absl::DataLossError(absl::StrCat(labels_path, ": label ", label, " at index ", i,
                                              " is outside [0, ", kFashionMnistClasses, ")"));
    }
    label_out[i] = label;
  }
  dataset.labels = *std::move(label_tensor);

  absl::StatusOr<Tensor> image_tensor =
      Tensor::Empty({num_images, 1, kFashionMnistRows, kFashionMnistCols}, DType::kFloat32);
  if (!image_tensor.ok()) return image_tensor.status();
  // The task feed decodes shards with the same function (Note [One pixel conversion]).
  NormalizePixels(pixels->data(), pixels->size(),
                  normalize ? PixelNormalization::MeanStd(kFashionMnistMean, kFashionMnistStd)
                            : PixelNormalization{},
                  image_tensor->data<float>());
  dataset.images = *std::move(image_tensor);
  return dataset;
}

}  // namespace data
}  // namespace paddle
