#include "paddle/data/shard_writer.h"

#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "paddle/core/status.h"
#include "paddle/data/dataset_cache.h"
#include "paddle/data/record_file.h"

namespace paddle {
namespace data {
namespace {

// The version of what FashionMnistShards writes: change it when the records or the MANIFEST
// change, so that caches made by older builds are made again (Note [Cache folders]).
constexpr int kFashionShardsVersion = 1;
constexpr int64_t kFashionRecordsPerShard = 10000;

}  // namespace

absl::Status WriteShards(ShardSet* set, int64_t n, int64_t per_shard, const SampleFn& sample,
                         const ShardProgressFn& progress) {
  const int64_t num_shards = std::max<int64_t>(1, (n + per_shard - 1) / per_shard);
  std::vector<std::string> fields;
  set->shards.clear();
  set->record_counts.clear();
  for (int64_t s = 0; s < num_shards; ++s) {
    std::string name = absl::StrFormat("shard-%05d-of-%05d", s, num_shards);
    ASSIGN_OR_RETURN(std::unique_ptr<RecordWriter> w, RecordWriter::Open(set->dir + "/" + name));
    const int64_t end = std::min(n, (s + 1) * per_shard);
    for (int64_t i = s * per_shard; i < end; ++i) {
      RETURN_IF_ERROR(sample(i, fields));
      std::vector<absl::string_view> views(fields.begin(), fields.end());
      RETURN_IF_ERROR(w->Write(EncodeSample(i, views)));
    }
    RETURN_IF_ERROR(w->Close());
    set->shards.push_back(name);
    set->record_counts.push_back(end - s * per_shard);
    if (progress) progress(end, n);
  }
  return WriteManifest(*set);
}

absl::StatusOr<int64_t> WriteFashionMnistShards(const std::string& fashion_dir, Split split,
                                                const std::string& out_dir, int64_t per_shard,
                                                const ShardProgressFn& progress) {
  ASSIGN_OR_RETURN(Dataset d, LoadFashionMnist(split, fashion_dir, /*normalize=*/false));
  ShardSet set;
  set.dir = out_dir;
  set.fields = {{"label", "uint8", {1}, 1}, {"image", "uint8", {28, 28}, 28 * 28}};
  const float* pixels = d.images.data<float>();
  const int64_t* labels = d.labels.data<int64_t>();
  RETURN_IF_ERROR(WriteShards(
      &set, d.size(), per_shard,
      [&](int64_t i, std::vector<std::string>& f) {
        f.assign(2, std::string());
        f[0].push_back(static_cast<char>(labels[i]));
        f[1].resize(28 * 28);
        for (int p = 0; p < 28 * 28; ++p) {  // pixels are b / 255 exactly: back to the byte
          f[1][p] = static_cast<char>(std::lround(pixels[i * 784 + p] * 255.0f));
        }
        return absl::OkStatus();
      },
      progress));
  return d.size();
}

absl::StatusOr<std::string> FashionMnistShards(const std::string& fashion_dir, Split split) {
  const char* prefix = split == Split::kTrain ? "train" : "t10k";
  // The key: the format and every input file's identity (a changed file is a new entry).
  std::string key = absl::StrCat("fashion-mnist shards v", kFashionShardsVersion,
                                 " records-per-shard ", kFashionRecordsPerShard);
  for (const char* kind : {"images-idx3", "labels-idx1"}) {
    const std::string path = absl::StrCat(fashion_dir, "/", prefix, "-", kind, "-ubyte.gz");
    struct stat st {};
    if (stat(path.c_str(), &st) != 0) {
      // LoadFashionMnist's error says what is missing and how to install it.
      return LoadFashionMnist(split, fashion_dir, false).status();
    }
    absl::StrAppend(&key, "; ", path, " ", st.st_size, " bytes, modified ", st.st_mtim.tv_sec, ".",
                    st.st_mtim.tv_nsec);
  }
  const std::string name = absl::StrCat("fashion-mnist-", prefix, "-shards");
  return CachedFolder(name, key, [&](const std::string& dir) -> absl::Status {
    CacheProgress progress(absl::StrCat("making Fashion-MNIST ", prefix, " record shards"),
                           "samples");
    RETURN_IF_ERROR(
        WriteFashionMnistShards(fashion_dir, split, dir, kFashionRecordsPerShard,
                                [&](int64_t done, int64_t total) { progress.Update(done, total); })
            .status());
    progress.Done(dir);
    return absl::OkStatus();
  });
}

}  // namespace data
}  // namespace paddle
