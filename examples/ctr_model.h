// The CTR example's model (examples/ctr.cc): an MLP over field embeddings and dense features, and
// the embedding sources it can take its rows from.
//
// Note [CTR embedding sources]: the example looks up one table of rows for every sample's field
// ids ([n * fields] global ids -> a Variable [n, fields * dim]) through EmbeddingSource, so where
// the rows live is one flag:
//   replicated  a Module holding the whole table, a child of the CtrModel, so DDP averages its
//               dense gradient with the MLP's and the model's SGD updates it;
//   sparse      the same replicated Module with its weight marked sparse (nn::functional::
//               SparseEmbedding): backward yields the touched rows (SparseRows), which DDP's
//               reducer exchanges by allgather, or by a dense allreduce when that is cheaper (Note
//               [Sparse or dense] in the reducer's sparse_exchange.h); SGD updates those rows only;
//   sharded     ShardedEmbedding (paddle/parallel/sharded_embedding.h): Lookup() is an all-to-all
//               to the rows' owners; AfterBackward() sends the rows' gradients back and each owner
//               applies SGD to its rows (mean over ranks, as DDP averages). The CtrModel then holds
//               the MLP only.
// Both start every row from ShardedEmbedding::InitialRow (a function of seed and id), and both
// update by plain SGD at the same learning rate, so on the same data they train the same model up
// to float rounding.
#ifndef EXAMPLES_CTR_MODEL_H_
#define EXAMPLES_CTR_MODEL_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "paddle/collective/communicator.h"
#include "paddle/nn/layers.h"
#include "paddle/nn/module.h"

namespace paddle::examples {

class EmbeddingSource {
 public:
  virtual ~EmbeddingSource() = default;
  // The rows of `ids` (global ids, `fields` per sample) as [ids.size() / fields, fields * dim].
  // Collective for a sharded table: every rank calls it, with any number of ids (also none).
  virtual absl::StatusOr<autograd::Variable> Lookup(absl::Span<const int64_t> ids, bool train) = 0;
  // After the backward pass of the last training Lookup: applies what the table owns.
  virtual absl::Status AfterBackward() = 0;
  // Payload bytes this rank has sent for the table so far (its dense gradient goes with DDP's).
  virtual int64_t BytesSent() const = 0;
};

struct CtrModelOptions {
  int fields = 26;
  int num_dense = 13;
  int64_t dim = 16;
  int64_t hidden = 128;
  int64_t table_rows = 0;
  float init_scale = 0.05f;
  float lr = 0.1f;  // the sharded table's own SGD
  uint64_t seed = 1;
};

// Score(embeddings, dense) -> two logits per sample (softmax = [1 - p, p]).
class CtrModel : public nn::Module {
 public:
  CtrModel(const CtrModelOptions& options, std::shared_ptr<nn::Module> table);
  // Not used: the model has two inputs (Score).
  absl::StatusOr<autograd::Variable> Forward(const autograd::Variable& x) override;
  absl::StatusOr<autograd::Variable> Score(const autograd::Variable& embeddings,
                                           const autograd::Variable& dense);
  // Parameters of the replicated table, if the model holds one (0 otherwise).
  int64_t TableParameters() const { return table_parameters_; }

 private:
  std::shared_ptr<nn::Linear> embedding_layer_, dense_layer_, hidden_layer_, output_layer_;
  int64_t table_parameters_ = 0;
};

struct CtrSetup {
  std::shared_ptr<CtrModel> model;
  std::shared_ptr<EmbeddingSource> table;  // the model's child when replicated
};

// `table` is "replicated", "sparse" or "sharded"; `comm` may be null (one process).
absl::StatusOr<CtrSetup> MakeCtr(const std::string& table, const CtrModelOptions& options,
                                 Communicator* comm);

}  // namespace paddle::examples

#endif  // EXAMPLES_CTR_MODEL_H_
