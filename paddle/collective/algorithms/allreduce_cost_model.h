// The simulator's cost model of the flat allreduce algorithms, evaluated in C++ so that the
// algorithm selector can follow a fitted model at start-up without Python (docs/simulator.md,
// "Tuning the engine from the model").
//
// A step in which a rank sends b bytes in P messages and its receiver reduces r of them costs
//   alpha + overhead (P - 1) + beta b + gamma r                       (microseconds)
// on one link (one host: no link is shared), plus two terms a link may carry (docs/simulator.md,
// "The model"): messages larger than eager_bytes cost rendezvous_us more each and their bytes
// rendezvous_beta instead of beta (Note [Eager and rendezvous] in tools/simulator/engine.py), and
// in an allreduce of N > cache_bytes bytes the share 1 - cache_bytes / N of the bytes moved and
// reduced costs memory_us_per_byte more (Note [Cache knee]); in an allreduce of fewer than
// huge_page_bytes bytes each rendezvous byte costs small_page_us_per_byte more (Note [Small
// pages]: the host allocator's buffers are on 4 KiB pages there). PredictAllreduceUs sums the steps
// of the ring, the tree (recursive doubling on piece-sized segments) and halving-doubling (segments
// of p2 pieces), each folded when n is not a power of two, exactly as
// tools/simulator/schedules.py lays them out; tests/tools/tuning_agreement_test.py checks that
// both pick the same algorithm at every size of the fixture's sweep.
//
// The parameters come from a tuning file written by `tools/simulate tune --emit=FILE`:
//
//   paddle_tuning_params 1
//   # link NAME alpha_us overhead_us beta_us_per_byte gamma_us_per_byte [memory_us_per_byte
//   #   rendezvous_us rendezvous_beta_us_per_byte cache_bytes eager_bytes
//   #   [small_page_us_per_byte huge_page_bytes]]
//   link tcp@2 182.5 197.1 0.00061 0.00008
//
// NAME is a transport ("tcp", "shm", "ucx"), optionally with "@R": fitted with R ranks per host.
// An optional line from `tools/simulate step --search --emit=FILE`,
//
//   bucket FIRST_BYTES BUCKET_BYTES
//
// gives the reducer's bucket caps the step model found fastest for a model's timeline (DDP takes
// them where DdpOptions leaves the caps 0). '#' starts a comment. A file needs at least one link
// or bucket line; a malformed file is kInvalidArgument naming the file, line and field.
#ifndef PADDLE_COLLECTIVE_ALGORITHMS_ALLREDUCE_COST_MODEL_H_
#define PADDLE_COLLECTIVE_ALGORITHMS_ALLREDUCE_COST_MODEL_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace paddle {

// One link's parameters (microseconds, microseconds per byte); all finite and >= 0.
struct LinkCost {
  double alpha_us = 0;
  double overhead_us = 0;
  double beta_us_per_byte = 0;
  double gamma_us_per_byte = 0;
  double memory_us_per_byte = 0;
  double rendezvous_us = 0;
  double rendezvous_beta_us_per_byte = 0;
  double cache_bytes = 0;  // 0: no knee
  double eager_bytes = 0;  // 0: every message eager
  double small_page_us_per_byte = 0;
  double huge_page_bytes = 0;  // 0: no small-page term
};

// The algorithms the model compares, in the order ties are broken (the first one wins).
enum class ModelAlgorithm { kTree, kHalvingDoubling, kRing };

// Predicted time of one allreduce of `bytes` on `world_size` ranks over `link`, the pipelined
// algorithms cutting `piece_bytes` pieces (AlgorithmContext's piece size). 0 for one rank or no
// bytes.
double PredictAllreduceUs(ModelAlgorithm algorithm, const LinkCost& link, int world_size,
                          double bytes, int64_t piece_bytes);

// The fastest of the three by PredictAllreduceUs; times within a relative 1e-9 of the best count
// as equal, and then the tree beats halving-doubling beats the ring.
ModelAlgorithm ModelAllreduceChoice(const LinkCost& link, int world_size, int64_t bytes,
                                    int64_t piece_bytes);

// The reducer's bucket caps of a tuning file's "bucket" line (Note [Bucket caps] in
// paddle/parallel/reducer/bucket_assigner.h).
struct TunedBucketCaps {
  int64_t first_bytes = 0;
  int64_t bytes = 0;
};

// The links and bucket caps of one tuning file.
class TuningParams {
 public:
  // Reads and checks `path`; errors name the file, line and field.
  static absl::StatusOr<TuningParams> Load(const std::string& path);
  // Parses `text` as the contents of a file called `path`.
  static absl::StatusOr<TuningParams> Parse(absl::string_view text, const std::string& path);

  // The entry for `transport` as tools/simulator/cost_model.py ParamSet.get picks it:
  // "transport@R" for R ranks per host, else "transport", else the "transport@R" with the nearest
  // R (the smaller on a tie). nullptr when the file has none; `*name` gets the entry's name.
  const LinkCost* Find(absl::string_view transport, int ranks_per_host, std::string* name) const;

  const std::string& path() const { return path_; }
  const std::map<std::string, LinkCost>& links() const { return links_; }
  const std::optional<TunedBucketCaps>& buckets() const { return buckets_; }

 private:
  absl::Status ParseBucket(const std::vector<absl::string_view>& words, const std::string& where);

  std::string path_;
  std::map<std::string, LinkCost> links_;
  std::optional<TunedBucketCaps> buckets_;
};

}  // namespace paddle

#endif  // PADDLE_COLLECTIVE_ALGORITHMS_ALLREDUCE_COST_MODEL_H_
