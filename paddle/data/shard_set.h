// ShardSet: a directory of record shards that make-shards wrote, described by its MANIFEST.
//
// Each record of such a set is one sample: its uint64 little-endian sample id (its row in the
// source data set, so a sample ledger can name it) followed by the bytes of each field in order
// (Fashion-MNIST: `label uint8 [1]`, `image uint8 [28,28]`; numpy: one field per .npy file, its
// row). MANIFEST is text, so it can be read and written by hand:
//
//   paddle-shards 1
//   field label uint8 1
//   field image uint8 28,28
//   shard shard-00000-of-00006 10000
//   ...
//
// Shard names are relative to the directory; the task master cuts the shards into tasks by the
// record counts here (each shard's own index, record_file.h, is checked against them on read).
#ifndef PADDLE_DATA_SHARD_SET_H_
#define PADDLE_DATA_SHARD_SET_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace paddle {
namespace data {

struct ShardField {
  std::string name;
  std::string dtype;           // numpy's names: uint8, int64, float32, ...
  std::vector<int64_t> shape;  // of one sample
  int64_t bytes = 0;           // of one sample: product(shape) x the dtype's size
};

struct ShardSet {
  std::string dir;
  std::vector<ShardField> fields;
  std::vector<std::string> shards;  // file names in `dir`
  std::vector<int64_t> record_counts;

  int64_t NumRecords() const;
  // 8 (the sample id) + every field's bytes.
  int64_t RecordBytes() const;
  std::string ShardPath(size_t i) const { return dir + "/" + shards[i]; }
};

inline constexpr char kManifestName[] = "MANIFEST";

// Bytes per element of a numpy dtype name; 0 if unknown.
int64_t DtypeBytes(absl::string_view dtype);

// Reads `dir`/MANIFEST. kNotFound (naming make-shards) if missing, kDataLoss naming the line for
// anything malformed.
absl::StatusOr<ShardSet> LoadShardSet(const std::string& dir);
absl::Status WriteManifest(const ShardSet& set);

// A sample record: the id then the fields' bytes, and back. DecodeSampleId fails (kDataLoss) on a
// record shorter than 8 bytes.
std::string EncodeSample(int64_t id, const std::vector<absl::string_view>& fields);
absl::StatusOr<int64_t> DecodeSampleId(absl::string_view record);

}  // namespace data
}  // namespace paddle

#endif  // PADDLE_DATA_SHARD_SET_H_
