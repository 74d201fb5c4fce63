// make_shards: writes a data set as record shards (paddle/data/record_file.h) with a MANIFEST
// (paddle/data/shard_set.h), for `examples:fashion_mnist --data=tasks` and the task master.
//
//   bazel run //tools:make_shards -- --out=DIR --fashion-mnist[=DIR] [--split=train|test]
//   bazel run //tools:make_shards -- --out=DIR --npy=x.npy[,y.npy,...]
//   bazel run //tools:make_shards -- --index-only=FILE   (index a TFRecord file from elsewhere)
//
// Options: --records-per-shard=N (default 10000). Sample i of the source becomes the record with
// id i; its fields are Fashion-MNIST's label and 28x28 uint8 image, or row i of each .npy array
// (C order, little-endian, every array with the same first dimension).
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "paddle/core/status.h"
#include "paddle/data/fashion_mnist.h"
#include "paddle/data/record_file.h"
#include "paddle/data/shard_set.h"

namespace paddle {
namespace data {
namespace {

constexpr char kUsage[] =
    "usage: make_shards --out=DIR (--fashion-mnist[=DIR] [--split=train|test] | "
    "--npy=a.npy[,b.npy...]) [--records-per-shard=N]\n"
    "       make_shards --index-only=FILE";

constexpr uint32_t kMaxNpyHeaderBytes = 1 << 20;

// One .npy array, read row by row.
struct NpyArray {
  std::string path;
  std::string dtype;  // numpy name
  std::vector<int64_t> shape;
  int64_t row_bytes = 0;
  std::unique_ptr<std::ifstream> in;
};

// The text after `'key':` in a .npy header dict: a quoted string, a (tuple) or a word.
std::string HeaderField(const std::string& header, const std::string& key) {
  size_t at = header.find("'" + key + "':");
  if (at == std::string::npos) return "";
  at = header.find_first_not_of(' ', at + key.size() + 3);
  if (at == std::string::npos) return "";
  size_t end;
  if (header[at] == '\'') {
    end = header.find('\'', at + 1);
  } else if (header[at] == '(') {
    end = header.find(')', at);
  } else {
    end = header.find_first_of(",}", at) - 1;
  }
  if (end == std::string::npos) return "";
  return header.substr(at, end - at + 1);
}

absl::StatusOr<NpyArray> OpenNpy(const std::string& path) {
  NpyArray a;
  a.path = path;
  a.in = std::make_unique<std::ifstream>(path, std::ios::binary);
  if (!*a.in) return absl::NotFoundError(absl::StrCat("cannot open ", path));
  char magic[8];
  a.in->read(magic, 8);
  if (!*a.in || std::string(magic, 6) != "\x93NUMPY") {
    return absl::InvalidArgumentError(absl::StrCat(path, " is not a .npy file (bad magic)"));
  }
  if (magic[6] < 1 || magic[6] > 3) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": .npy format version ", static_cast<int>(magic[6]), " is unknown"));
  }
  uint32_t header_len = 0;
  unsigned char len[4] = {0, 0, 0, 0};
  a.in->read(reinterpret_cast<char*>(len), magic[6] == 1 ? 2 : 4);
  header_len = len[0] | (len[1] << 8) | (len[2] << 16) | (static_cast<uint32_t>(len[3]) << 24);
  // numpy writes headers of a few hundred bytes; a larger length is damage, not a reason to
  // allocate up to 4 GiB.
  if (!*a.in || header_len > kMaxNpyHeaderBytes) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": .npy header length ", header_len,
                                                   " is over ", kMaxNpyHeaderBytes,
                                                   " bytes (damaged file?)"));
  }
  std::string header(header_len, '\0');
  a.in->read(&header[0], header_len);
  if (!*a.in) return absl::InvalidArgumentError(absl::StrCat(path, ": truncated .npy header"));
  const std::string descr = HeaderField(header, "descr");
  const std::string fortran = HeaderField(header, "fortran_order");
  const std::string shape = HeaderField(header, "shape");
  static const std::pair<const char*, const char*> kDtypes[] = {
      {"'|u1'", "uint8"},   {"'|i1'", "int8"},    {"'|b1'", "bool"},   {"'<u2'", "uint16"},
      {"'<i2'", "int16"},   {"'<f2'", "float16"}, {"'<u4'", "uint32"}, {"'<i4'", "int32"},
      {"'<f4'", "float32"}, {"'<u8'", "uint64"},  {"'<i8'", "int64"},  {"'<f8'", "float64"}};
  for (const auto& d : kDtypes) {
    if (descr == d.first) a.dtype = d.second;
  }
  if (a.dtype.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": dtype ", descr, " is not supported (little-endian numbers and bool only)"));
  }
  if (fortran != "False") {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": fortran_order arrays are not supported; save np.ascontiguousarray"));
  }
  absl::string_view dims = shape;
  absl::ConsumePrefix(&dims, "(");
  absl::ConsumeSuffix(&dims, ")");
  for (absl::string_view d : absl::StrSplit(dims, ',', absl::SkipWhitespace())) {
    int64_t v;
    if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(d), &v) || v < 0) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": bad shape ", shape));
    }
    a.shape.push_back(v);
  }
  if (a.shape.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": a 0-d array has no rows"));
  }
  a.row_bytes = DtypeBytes(a.dtype);
  for (size_t i = 1; i < a.shape.size(); ++i) {
    // A row becomes one record: at most kMaxRecordBytes, checked before multiplying so that a
    // damaged shape cannot overflow; an empty row would make a MANIFEST LoadShardSet refuses.
    if (a.shape[i] == 0 || a.shape[i] > kMaxRecordBytes / a.row_bytes) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": shape ", shape,
                                                     " makes rows that are empty or over ",
                                                     kMaxRecordBytes, " bytes"));
    }
    a.row_bytes *= a.shape[i];
  }
  return a;
}

// Writes samples [0, n) as shards of `per_shard` records; `sample(i, fields)` fills the fields.
template <typename Fn>
absl::Status WriteShards(ShardSet& set, int64_t n, int64_t per_shard, Fn sample) {
  const int64_t num_shards = std::max<int64_t>(1, (n + per_shard - 1) / per_shard);
  std::vector<std::string> fields;
  for (int64_t s = 0; s < num_shards; ++s) {
    std::string name = absl::StrFormat("shard-%05d-of-%05d", s, num_shards);
    ASSIGN_OR_RETURN(std::unique_ptr<RecordWriter> w, RecordWriter::Open(set.dir + "/" + name));
    const int64_t end = std::min(n, (s + 1) * per_shard);
    for (int64_t i = s * per_shard; i < end; ++i) {
      RETURN_IF_ERROR(sample(i, fields));
      std::vector<absl::string_view> views(fields.begin(), fields.end());
      RETURN_IF_ERROR(w->Write(EncodeSample(i, views)));
    }
    RETURN_IF_ERROR(w->Close());
    set.shards.push_back(name);
    set.record_counts.push_back(end - s * per_shard);
  }
  RETURN_IF_ERROR(WriteManifest(set));
  std::cout << "make_shards: wrote " << n << " samples in " << num_shards << " shard(s) of "
            << set.RecordBytes() << "-byte records to " << set.dir << "\n";
  return absl::OkStatus();
}

absl::Status Run(int argc, char** argv) {
  std::string out, fashion_dir, npy, split = "train", index_only;
  bool fashion = false;
  int64_t per_shard = 10000;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    std::pair<std::string, std::string> kv = absl::StrSplit(arg, absl::MaxSplits('=', 1));
    if (kv.first == "--out") {
      out = kv.second;
    } else if (kv.first == "--fashion-mnist") {
      fashion = true;
      fashion_dir = kv.second.empty() ? kDefaultFashionMnistDir : kv.second;
    } else if (kv.first == "--split" && (kv.second == "train" || kv.second == "test")) {
      split = kv.second;
    } else if (kv.first == "--npy" && !kv.second.empty()) {
      npy = kv.second;
    } else if (kv.first == "--index-only" && !kv.second.empty()) {
      index_only = kv.second;
    } else if (kv.first == "--records-per-shard" && absl::SimpleAtoi(kv.second, &per_shard) &&
               per_shard > 0) {
    } else {
      return absl::InvalidArgumentError(absl::StrCat("bad argument ", arg, "\n", kUsage));
    }
  }
  if (!index_only.empty()) {
    ASSIGN_OR_RETURN(int64_t n, WriteIndex(index_only));
    std::cout << "make_shards: indexed " << n << " records of " << index_only << "\n";
    return absl::OkStatus();
  }
  if (out.empty() || fashion == !npy.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("give --out and exactly one of --fashion-mnist and --npy\n", kUsage));
  }
  ShardSet set;
  set.dir = out;
  if (fashion) {
    ASSIGN_OR_RETURN(Dataset d, LoadFashionMnist(split == "train" ? Split::kTrain : Split::kTest,
                                                 fashion_dir, /*normalize=*/false));
    set.fields = {{"label", "uint8", {1}, 1}, {"image", "uint8", {28, 28}, 28 * 28}};
    const float* pixels = d.images.data<float>();
    const int64_t* labels = d.labels.data<int64_t>();
    return WriteShards(set, d.size(), per_shard, [&](int64_t i, std::vector<std::string>& f) {
      f.assign(2, std::string());
      f[0].push_back(static_cast<char>(labels[i]));
      f[1].resize(28 * 28);
      for (int p = 0; p < 28 * 28; ++p) {  // pixels are b / 255 exactly: back to the byte
        f[1][p] = static_cast<char>(static_cast<int>(pixels[i * 784 + p] * 255.0f + 0.5f));
      }
      return absl::OkStatus();
    });
  }
  std::vector<NpyArray> arrays;
  for (absl::string_view p : absl::StrSplit(npy, ',')) {
    ASSIGN_OR_RETURN(NpyArray a, OpenNpy(std::string(p)));
    if (!arrays.empty() && a.shape[0] != arrays[0].shape[0]) {
      return absl::InvalidArgumentError(absl::StrCat(a.path, " has ", a.shape[0], " rows but ",
                                                     arrays[0].path, " has ", arrays[0].shape[0]));
    }
    absl::string_view base = p.substr(p.rfind('/') + 1);
    absl::ConsumeSuffix(&base, ".npy");
    std::string name(base);
    std::vector<int64_t> row(a.shape.begin() + 1, a.shape.end());
    if (row.empty()) row.push_back(1);
    set.fields.push_back({name, a.dtype, row, a.row_bytes});
    arrays.push_back(std::move(a));
  }
  return WriteShards(set, arrays[0].shape[0], per_shard,
                     [&](int64_t i, std::vector<std::string>& f) -> absl::Status {
                       f.resize(arrays.size());
                       for (size_t k = 0; k < arrays.size(); ++k) {
                         f[k].resize(static_cast<size_t>(arrays[k].row_bytes));
                         arrays[k].in->read(&f[k][0], arrays[k].row_bytes);
                         if (!*arrays[k].in) {
                           return absl::DataLossError(absl::StrCat(
                               arrays[k].path, " ends inside row ", i, " (truncated .npy)"));
                         }
                       }
                       return absl::OkStatus();
                     });
}

}  // namespace
}  // namespace data
}  // namespace paddle

int main(int argc, char** argv) {
  absl::Status s = paddle::data::Run(argc, argv);
  if (!s.ok()) {
    std::cerr << "make_shards: " << s << "\n";
    return 1;
  }
  return 0;
}
