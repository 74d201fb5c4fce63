// The synthetic click data of tools/make-ctr-data, read into memory for examples/ctr.cc.
//
// Note [CTR data layout]: one file per split, little-endian:
//   header:  8-byte magic "PDCTR01\0", u32 num_categorical, u32 num_dense, u64 num_samples,
//            u64 vocab[num_categorical]
//   records: num_samples x { u32 ids[num_categorical]; f32 dense[num_dense]; f32 label }
// with ids[f] < vocab[f] and label 0 or 1. The manifest (manifest.json, next to the files) holds
// the generator's flags and best_auc, the AUC of the true click probabilities on the test split.
// tools/make-ctr-data writes this layout and bench/peers/ctr_torch.py reads it with numpy.
//
// Reading checks everything a damaged or foreign file could get wrong (magic, field counts, the
// file size against the header, every id against its vocabulary, every label and dense value)
// and fails with kInvalidArgument naming the file, and the sample and field where it applies.
#ifndef EXAMPLES_CTR_DATA_H_
#define EXAMPLES_CTR_DATA_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace paddle::examples {

struct CtrData {
  int64_t num_samples = 0;
  int num_categorical = 0;
  int num_dense = 0;
  std::vector<int64_t> vocab;    // per field
  std::vector<int64_t> offsets;  // per field: the first global id of the field's rows
  // Row-major [num_samples, num_categorical] global ids (offsets[f] + id): one table holds the
  // rows of every field.
  std::vector<int64_t> ids;
  std::vector<float> dense;   // [num_samples, num_dense]
  std::vector<float> labels;  // [num_samples], 0 or 1

  int64_t total_rows() const { return offsets.empty() ? 0 : offsets.back() + vocab.back(); }
};

absl::StatusOr<CtrData> ReadCtrData(const std::string& path);

// best_auc from DIR/manifest.json; kNotFound if there is no manifest, kInvalidArgument if it has
// no best_auc number.
absl::StatusOr<double> ReadBestAuc(const std::string& dir);

// The folder of the default data set (tools/make-ctr-data --max-vocab=100000, the flags the docs
// use), made on first use into the data set cache (paddle/data/dataset_cache.h) by running the
// generator, which is found among this binary's runfiles or under $PADDLE_WORKSPACE/tools.
absl::StatusOr<std::string> DefaultCtrData();

}  // namespace paddle::examples

#endif  // EXAMPLES_CTR_DATA_H_
