// ShardedEmbedding: a lookup table too large for one worker, its rows sharded across the ranks of
// a Communicator, with the optimizer applied by each row's owner (the distributed lookup table of
// CTR models, built on all-to-all instead of a parameter server).
//
// Ownership (Note [Embedding row owner]): id's owner is splitmix64(id ^ splitmix64(seed)) mod
// world_size. The splitmix64 finalizer is written out here rather than taken from absl::Hash,
// whose values may change between processes and builds; an owner must be the same in every
// process and in a checkpoint read by a later job. A row's initial value depends only on (seed,
// id), never on the world size, so a table re-sharded to another world size, and a replicated
// single table, hold the same rows.
//
// Storage: rows are created lazily. A row never updated is not stored: Lookup computes its initial
// value on the fly; Backward materializes it (with its optimizer state) on first update. CTR ids
// are Zipf-distributed over vocabularies of up to 1e7, so most rows are never trained, and a dense
// shard plus optimizer state for all of them would cost several times the memory of the rows that
// are. Memory per rank is O(rows this rank has updated), found through a hash map id -> slot.
//
// Lookup and Backward are collectives: every rank calls them, in the same order relative to other
// operations on the communicator, each with its own ids (any count, zero included). See Note
// [Embedding exchange] in the .cc for the messages. Bad input (an id out of range, a gradient of
// the wrong shape) fails on every rank: the rank that holds it names the id/shape, the others name
// that rank; no rank is left waiting in a collective.
//
// Not thread-safe: one thread per table drives it (as it drives its communicator).
#ifndef PADDLE_PARALLEL_SHARDED_EMBEDDING_H_
#define PADDLE_PARALLEL_SHARDED_EMBEDDING_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "paddle/collective/communicator.h"
#include "paddle/core/tensor.h"

namespace paddle {

enum class RowOptimizerKind { kSgd, kAdagrad };

// The owner-side update of one row with its summed, reduced gradient g (lazy: only rows that got
// a gradient this step move, and only their state changes).
//   kSgd:     buf = momentum * buf + g; row -= lr * buf   (PyTorch's rule; no buffer if momentum 0)
//   kAdagrad: acc += g * g; row -= lr * g / (sqrt(acc) + eps), acc starting at adagrad_initial
struct RowOptimizerOptions {
  RowOptimizerKind kind = RowOptimizerKind::kSgd;
  float lr = 0.01f;
  float momentum = 0.0f;
  float adagrad_initial = 0.0f;
  float adagrad_eps = 1e-10f;
};

// How an owner combines the gradient rows that all ranks sent for one id.
enum class GradReduction {
  kMeanOverRanks,  // sum over ranks and duplicate positions, divided by world size (DDP's average)
  kSum,            // the plain sum
};

struct ShardedEmbeddingOptions {
  std::string name = "embedding";  // names checkpoint files and errors
  int64_t num_rows = 0;            // ids are in [0, num_rows)
  int64_t dim = 0;
  uint64_t seed = 0;         // owner hash and initial rows
  float init_scale = 0.01f;  // initial element j of row id: uniform(-s, s) from (seed, id, j)
  GradReduction reduction = GradReduction::kMeanOverRanks;
  RowOptimizerOptions optimizer;
  absl::Duration timeout = absl::ZeroDuration();  // per collective; zero: the communicator's
};

class ShardedEmbedding {
 public:
  // Not collective. `comm` must outlive the table. Bad options: kInvalidArgument naming the field.
  static absl::StatusOr<std::unique_ptr<ShardedEmbedding>> Create(Communicator* comm,
                                                                  ShardedEmbeddingOptions options);
  ShardedEmbedding(const ShardedEmbedding&) = delete;
  ShardedEmbedding& operator=(const ShardedEmbedding&) = delete;

  // Note [Embedding row owner].
  static int OwnerOf(int64_t id, int world_size, uint64_t seed);
  // The value of row `id` before its first update; out.size() is the row's dim.
  static void InitialRow(uint64_t seed, int64_t id, float init_scale, absl::Span<float> out);

  // Collective. A float32 CPU tensor [ids.size(), dim]: row i is the row of ids[i].
  absl::StatusOr<Tensor> Lookup(absl::Span<const int64_t> ids);
  // Collective. `grad_rows`: float32, contiguous, CPU, [ids.size(), dim]; row i is the gradient
  // for the row of ids[i]. Owners sum duplicates over positions and ranks, apply `reduction` and
  // then their optimizer to the rows that got a gradient.
  absl::Status Backward(absl::Span<const int64_t> ids, const Tensor& grad_rows);

  // Collective: every rank writes <dir>/<name>-shard-<rank>-of-<world>.ckpt (paddle/checkpoint's
  // file format, written to a temporary name and renamed), then all wait in a barrier, so every
  // shard exists when Save returns on any rank. `dir` must exist.
  absl::Status Save(const std::string& dir);
  // Not collective: reads every shard in `dir` (saved at any world size) and keeps the rows this
  // rank owns now, with their optimizer state, replacing what it held. A checkpoint of another
  // table (name, num_rows, dim, seed or optimizer kind differ) is kFailedPrecondition naming the
  // field; missing shards are kNotFound; a corrupt file is paddle/checkpoint's kDataLoss, and so
  // are shards of different saves (each records the Backward count: an interrupted save). A
  // failed Load changes nothing.
  absl::Status Load(const std::string& dir);

  // This rank's shard: rows updated at least once.
  int64_t materialized_rows() const { return static_cast<int64_t>(slot_of_.size()); }
  // Row `id` if this rank owns it (its initial value if never updated); else kInvalidArgument.
  absl::StatusOr<std::vector<float>> LocalRow(int64_t id) const;

  // Payload bytes this rank sent to other ranks (ids, rows, gradients, counts; not to itself).
  struct Stats {
    int64_t lookups = 0;
    int64_t backwards = 0;
    int64_t lookup_bytes_sent = 0;
    int64_t backward_bytes_sent = 0;
  };
  const Stats& stats() const { return stats_; }
  int64_t num_rows() const { return options_.num_rows; }
  int64_t dim() const { return options_.dim; }
  const ShardedEmbeddingOptions& options() const { return options_; }

 private:
  ShardedEmbedding(Communicator* comm, ShardedEmbeddingOptions options);

  int StateSlots() const;  // optimizer state floats per element: 0 or 1
  // The slot of `id` on this rank, created (initial row, initial state) if absent.
  int64_t Materialize(int64_t id);
  // First bad id of `ids` as an error naming it, its position and the table; OK if none.
  absl::Status CheckIds(absl::Span<const int64_t> ids, const char* op) const;
  // Exchanges per-peer counts; `local_error` (not OK) makes every rank fail, naming this rank.
  absl::StatusOr<std::vector<int64_t>> ExchangeCounts(const std::vector<int64_t>& send_counts,
                                                      const absl::Status& local_error,
                                                      const char* op);
  absl::Status Wait(const std::shared_ptr<Work>& work, const char* what);
  CallOptions Call() const;
  std::string Where() const;  // "table 'x' (num_rows N, dim D) on rank r/w"

  Communicator* comm_;
  ShardedEmbeddingOptions options_;
  int rank_;
  int world_;
  absl::flat_hash_map<int64_t, int64_t> slot_of_;  // id -> slot in rows_ / state_
  std::vector<float> rows_;                        // slot-major, dim floats each
  std::vector<float> state_;                       // StateSlots() * dim floats per slot
  Stats stats_;
};

}  // namespace paddle

#endif  // PADDLE_PARALLEL_SHARDED_EMBEDDING_H_
