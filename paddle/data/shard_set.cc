// ShardSet: the MANIFEST of a shard directory and the sample record layout.
#include "paddle/data/shard_set.h"

#include <fstream>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace paddle {
namespace data {
namespace {

// Limits on what a MANIFEST may declare, far above any real data set, so that sizes and counts
// computed from it cannot overflow int64.
constexpr int64_t kMaxFieldBytes = int64_t{1} << 30;
constexpr int64_t kMaxRecordsPerSet = int64_t{1} << 48;

}  // namespace

int64_t ShardSet::NumRecords() const {
  int64_t n = 0;
  for (int64_t c : record_counts) n += c;
  return n;
}

int64_t ShardSet::RecordBytes() const {
  int64_t n = 8;
  for (const ShardField& f : fields) n += f.bytes;
  return n;
}

int64_t DtypeBytes(absl::string_view dtype) {
  if (dtype == "uint8" || dtype == "int8" || dtype == "bool") return 1;
  if (dtype == "uint16" || dtype == "int16" || dtype == "float16") return 2;
  if (dtype == "uint32" || dtype == "int32" || dtype == "float32") return 4;
  if (dtype == "uint64" || dtype == "int64" || dtype == "float64") return 8;
  return 0;
}

absl::StatusOr<ShardSet> LoadShardSet(const std::string& dir) {
  const std::string path = dir + "/" + kManifestName;
  std::ifstream in(path);
  if (!in) {
    return absl::NotFoundError(
        absl::StrCat("no shard manifest at ", path,
                     "; write the shards with `bazel run //tools:make_shards -- --out=", dir, "`"));
  }
  ShardSet set;
  set.dir = dir;
  std::string line;
  int lineno = 0;
  int64_t total = 0;  // records in the shards so far
  auto bad = [&](absl::string_view why) {
    return absl::DataLossError(
        absl::StrCat(path, ":", lineno, ": ", why, " (line \"", line.substr(0, 80), "\")"));
  };
  while (std::getline(in, line)) {
    ++lineno;
    std::vector<std::string> w = absl::StrSplit(line, ' ', absl::SkipEmpty());
    if (w.empty()) continue;  // a blank line, or one of spaces only
    if (lineno == 1) {
      if (line != "paddle-shards 1") return bad("not a paddle-shards 1 manifest");
      continue;
    }
    if (w[0] == "field" && w.size() == 4) {
      ShardField f{w[1], w[2], {}, DtypeBytes(w[2])};
      if (f.bytes == 0) return bad("unknown dtype");
      for (absl::string_view d : absl::StrSplit(w[3], ',')) {
        int64_t v;
        if (!absl::SimpleAtoi(d, &v) || v <= 0) return bad("bad shape");
        // Bounded so that a sample's size (and RecordBytes) cannot overflow.
        if (v > kMaxFieldBytes / f.bytes) return bad("a sample of this shape is over 1 GiB");
        f.shape.push_back(v);
        f.bytes *= v;
      }
      set.fields.push_back(std::move(f));
    } else if (w[0] == "shard" && w.size() == 3) {
      int64_t n;
      if (!absl::SimpleAtoi(w[2], &n) || n < 0) return bad("bad record count");
      if (n > kMaxRecordsPerSet - total) return bad("the shards hold over 2^48 records in all");
      total += n;
      if (w[1].find('/') != std::string::npos) return bad("shard names are plain file names");
      set.shards.push_back(w[1]);
      set.record_counts.push_back(n);
    } else {
      return bad("expected `field NAME DTYPE SHAPE` or `shard NAME RECORDS`");
    }
  }
  if (lineno == 0) return bad("empty manifest");
  if (set.shards.empty()) return absl::DataLossError(absl::StrCat(path, ": lists no shards"));
  return set;
}

absl::Status WriteManifest(const ShardSet& set) {
  std::ostringstream out;
  out << "paddle-shards 1\n";
  for (const ShardField& f : set.fields) {
    out << "field " << f.name << " " << f.dtype << " " << absl::StrJoin(f.shape, ",") << "\n";
  }
  for (size_t i = 0; i < set.shards.size(); ++i) {
    out << "shard " << set.shards[i] << " " << set.record_counts[i] << "\n";
  }
  const std::string path = set.dir + "/" + kManifestName;
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::trunc);
    f << out.str();
    f.flush();
    if (!f) return absl::InternalError(absl::StrCat("cannot write ", tmp));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    return absl::InternalError(absl::StrCat("cannot rename ", tmp, " to ", path));
  }
  return absl::OkStatus();
}

std::string EncodeSample(int64_t id, const std::vector<absl::string_view>& fields) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>(static_cast<uint64_t>(id) >> (8 * i));
  for (absl::string_view f : fields) out.append(f.data(), f.size());
  return out;
}

absl::StatusOr<int64_t> DecodeSampleId(absl::string_view record) {
  if (record.size() < 8) {
    return absl::DataLossError(
        absl::StrCat("a sample record is at least 8 bytes (its id); this one is ", record.size()));
  }
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(record[i]);
  return static_cast<int64_t>(v);
}

}  // namespace data
}  // namespace paddle
