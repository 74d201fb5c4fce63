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
#include <filesystem>
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
#include "paddle/data/shard_writer.h"

namespace paddle {
namespace data {
namespace {

constexpr char kUsage[] =
    "usage: make_shards --out=DIR (--fashion-mnist[=DIR] [--split=train|test] | "
    "--npy=a.npy[,b.npy...]) [--records-per-shard=N]\n"
    "       make_shards --index-only=FILE\n"
    "Writes a data set as record shards and a MANIFEST in --out (made if missing), for\n"
    "`examples:fashion_mnist --data=tasks --shards=DIR` (which without --shards makes\n"
    "Fashion-MNIST's itself, in $PADDLE_CACHE_DIR). --records-per-shard=N (default 10000).";

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

absl::Status Run(int argc, char** argv) {
  std::string out, fashion_dir, npy, split = "train", index_only;
  bool fashion = false;
  int64_t per_shard = 10000;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    std::pair<std::string, std::string> kv = absl::StrSplit(arg, absl::MaxSplits('=', 1));
    if (arg == "--help" || arg == "-h") {
      std::cout << kUsage << "\n";
      return absl::OkStatus();
    }
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
  std::error_code error;
  std::filesystem::create_directories(out, error);
  if (error) {
    return absl::PermissionDeniedError(
        absl::StrCat("cannot create --out=", out, ": ", error.message()));
  }
  auto report = [&out](int64_t n) {
    std::cout << "make_shards: wrote " << n << " samples to " << out << "\n";
    return absl::OkStatus();
  };
  if (fashion) {
    ASSIGN_OR_RETURN(int64_t n, WriteFashionMnistShards(
                                    fashion_dir, split == "train" ? Split::kTrain : Split::kTest,
                                    out, per_shard));
    return report(n);
  }
  ShardSet set;
  set.dir = out;
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
  RETURN_IF_ERROR(WriteShards(&set, arrays[0].shape[0], per_shard,
                              [&](int64_t i, std::vector<std::string>& f) -> absl::Status {
                                f.resize(arrays.size());
                                for (size_t k = 0; k < arrays.size(); ++k) {
                                  f[k].resize(static_cast<size_t>(arrays[k].row_bytes));
                                  arrays[k].in->read(&f[k][0], arrays[k].row_bytes);
                                  if (!*arrays[k].in) {
                                    return absl::DataLossError(absl::StrCat(arrays[k].path,
                                                                            " ends inside row ", i,
                                                                            " (truncated .npy)"));
                                  }
                                }
                                return absl::OkStatus();
                              }));
  return report(arrays[0].shape[0]);
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
