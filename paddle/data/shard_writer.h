// Writing record shards: a data set as numbered record files (paddle/data/record_file.h) plus the
// MANIFEST that describes them (paddle/data/shard_set.h), the input of the task master
// (paddle/data/task_master.h). //tools:make_shards writes any data set this way by hand;
// FashionMnistShards makes Fashion-MNIST's once, into the data set cache, when a job asks for it
// (`examples:fashion_mnist --data=tasks` without --shards).
#ifndef PADDLE_DATA_SHARD_WRITER_H_
#define PADDLE_DATA_SHARD_WRITER_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "paddle/data/fashion_mnist.h"
#include "paddle/data/shard_set.h"

namespace paddle {
namespace data {

// Fills `fields` (one string per field of the set, in its order) with sample i's bytes.
using SampleFn = std::function<absl::Status(int64_t i, std::vector<std::string>& fields)>;
// Called after each shard with the samples written so far and the total.
using ShardProgressFn = std::function<void(int64_t done, int64_t total)>;

// Writes samples [0, n) as shards of `per_shard` records (sample i is the record with id i) into
// set->dir, which must exist, then its MANIFEST; fills set->shards and set->record_counts. The
// first error of `sample` or of a write is returned, naming the file.
absl::Status WriteShards(ShardSet* set, int64_t n, int64_t per_shard, const SampleFn& sample,
                         const ShardProgressFn& progress = nullptr);

// Fashion-MNIST's `split` from `fashion_dir` as shards in `out_dir` (which must exist): fields
// "label" (uint8) and "image" (uint8 28x28, the file's bytes). Returns the samples written.
absl::StatusOr<int64_t> WriteFashionMnistShards(const std::string& fashion_dir, Split split,
                                                const std::string& out_dir, int64_t per_shard,
                                                const ShardProgressFn& progress = nullptr);

// The folder of Fashion-MNIST `split` as shards of 10,000 records in the data set cache
// (paddle/data/dataset_cache.h), made on first use with a progress line on stderr and again
// whenever the source files or the shard format change.
absl::StatusOr<std::string> FashionMnistShards(const std::string& fashion_dir, Split split);

}  // namespace data
}  // namespace paddle

#endif  // PADDLE_DATA_SHARD_WRITER_H_
