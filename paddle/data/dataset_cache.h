// The data set cache: data that a program can make itself from what is on the machine (record
// shards of Fashion-MNIST, the seeded synthetic click data) is made once, on first use, into
// $PADDLE_CACHE_DIR (default ~/.cache/paddle), and read from there after, as torchvision's
// datasets do with download=True.
//
// Note [Cache folders]: an entry is the folder <root>/<name>-<16 hex digits of its key>, where the
// key is a text naming everything the data depends on (the format version, the source files'
// sizes and times, the generator's flags); a new key is a new folder, and the older folders of the
// same name are removed once it is complete. The maker writes into <folder>.partial and renames it
// to <folder> only when it has finished, so a folder that exists is whole: a maker killed mid-way
// leaves a .partial that nothing reads and the next maker removes. Makers of one name take
// <root>/<name>.lock (flock) first, so processes that start together (the workers of one job) make
// it once and the others wait for it, within a deadline.
#ifndef PADDLE_DATA_DATASET_CACHE_H_
#define PADDLE_DATA_DATASET_CACHE_H_

#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace paddle {
namespace data {

// $PADDLE_CACHE_DIR, else $HOME/.cache/paddle. kFailedPrecondition when neither is set.
absl::StatusOr<std::string> DatasetCacheRoot();

// Makes `dir` (a fresh, empty folder) hold the entry's data.
using MakeFolderFn = std::function<absl::Status(const std::string& dir)>;

// The cache folder of entry `name` with `key` (Note [Cache folders]), made by `make` if it does
// not exist yet. kDeadlineExceeded naming the lock file when another process holds it past
// `wait`; make's error, naming the entry, otherwise.
absl::StatusOr<std::string> CachedFolder(const std::string& name, const std::string& key,
                                         const MakeFolderFn& make,
                                         absl::Duration wait = absl::Minutes(15));

// A progress line on stderr for a cache entry being made: rewritten in place on a terminal (at
// most 5 times a second), else one line when it starts and one when it is done.
class CacheProgress {
 public:
  CacheProgress(std::string what, std::string unit);
  void Update(int64_t done, int64_t total);
  void Done(absl::string_view where);  // `where`: the folder being made (its .partial name is fine)

 private:
  std::string what_, unit_;
  bool tty_;
  absl::Time start_, last_ = absl::InfinitePast();
};

}  // namespace data
}  // namespace paddle

#endif  // PADDLE_DATA_DATASET_CACHE_H_
