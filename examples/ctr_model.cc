// The CTR model and its embedding sources (Note [CTR embedding sources] in ctr_model.h).
#include "examples/ctr_model.h"

#include <cmath>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "paddle/core/status.h"
#include "paddle/nn/embedding.h"
#include "paddle/nn/functional.h"
#include "paddle/nn/generator.h"
#include "paddle/parallel/sharded_embedding.h"

namespace paddle::examples {
namespace {

namespace F = nn::functional;

absl::StatusOr<Tensor> IdTensor(absl::Span<const int64_t> ids, int fields) {
  const int64_t n = static_cast<int64_t>(ids.size()) / fields;
  ASSIGN_OR_RETURN(Tensor t, Tensor::Empty({n, fields}, DType::kInt64));
  if (!ids.empty()) std::memcpy(t.data<int64_t>(), ids.data(), sizeof(int64_t) * ids.size());
  return t;
}

// The whole table on every rank, as a parameter averaged by DDP: a dense gradient, or with
// `sparse` the touched rows (SparseRows, exchanged by the reducer's sparse path).
class ReplicatedTable final : public nn::Module, public EmbeddingSource {
 public:
  ReplicatedTable(Tensor rows, int fields, bool sparse)
      : nn::Module("ReplicatedTable"), fields_(fields), dim_(rows.shape()[1]) {
    weight_ = RegisterParameter("weight", std::move(rows));
    weight_.set_sparse(sparse);
  }
  absl::StatusOr<autograd::Variable> Forward(const autograd::Variable&) override {
    return absl::UnimplementedError("ReplicatedTable: use Lookup(ids)");
  }
  absl::StatusOr<autograd::Variable> Lookup(absl::Span<const int64_t> ids, bool) override {
    ASSIGN_OR_RETURN(Tensor index, IdTensor(ids, fields_));
    ASSIGN_OR_RETURN(autograd::Variable rows, weight_.sparse()
                                                  ? nn::functional::SparseEmbedding(weight_, index)
                                                  : F::Embedding(weight_, index));
    return F::Reshape(rows, {index.shape()[0], fields_ * dim_});
  }
  absl::Status AfterBackward() override { return absl::OkStatus(); }
  int64_t BytesSent() const override { return 0; }

 private:
  int fields_;
  int64_t dim_;
  autograd::Variable weight_;
};

// Rows sharded over the ranks (paddle/parallel/sharded_embedding.h). Lookup returns the rows as a
// leaf that requires a gradient; AfterBackward sends that gradient to the owners.
class ShardedTable final : public EmbeddingSource {
 public:
  ShardedTable(std::unique_ptr<ShardedEmbedding> table, int fields)
      : table_(std::move(table)), fields_(fields) {}
  absl::StatusOr<autograd::Variable> Lookup(absl::Span<const int64_t> ids, bool train) override {
    ASSIGN_OR_RETURN(Tensor rows, table_->Lookup(ids));
    const int64_t n = static_cast<int64_t>(ids.size()) / fields_;
    if (!train) {
      return F::Reshape(autograd::Variable(std::move(rows)), {n, fields_ * table_->dim()});
    }
    ids_.assign(ids.begin(), ids.end());
    leaf_ = autograd::Variable(std::move(rows), /*requires_grad=*/true);
    return F::Reshape(leaf_, {n, fields_ * table_->dim()});
  }
  absl::Status AfterBackward() override {
    if (!leaf_.defined()) {
      return absl::FailedPreconditionError("ShardedTable: AfterBackward without a Lookup");
    }
    Tensor grad = leaf_.grad();
    if (!grad.defined()) {  // no gradient reached the rows (no samples on this rank)
      ASSIGN_OR_RETURN(grad, Tensor::Zeros(leaf_.shape(), DType::kFloat32));
    }
    ASSIGN_OR_RETURN(Tensor contiguous, grad.Contiguous());
    absl::Status st = table_->Backward(ids_, contiguous);
    leaf_ = autograd::Variable();
    return st;
  }
  int64_t BytesSent() const override {
    return table_->stats().lookup_bytes_sent + table_->stats().backward_bytes_sent;
  }

 private:
  std::unique_ptr<ShardedEmbedding> table_;
  int fields_;
  std::vector<int64_t> ids_;
  autograd::Variable leaf_;
};

void Rescale(const autograd::Variable& v, float factor) {
  Tensor t = v.data();  // the parameter's storage
  float* p = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] *= factor;
}

}  // namespace

CtrModel::CtrModel(const CtrModelOptions& o, std::shared_ptr<nn::Module> table)
    : nn::Module("CtrModel") {
  nn::Generator init(o.seed, /*stream=*/0);
  if (table != nullptr) {
    table_parameters_ = table->NumParameters();
    RegisterModule("embedding", std::move(table));
  }
  embedding_layer_ = RegisterModule(
      "embedding_layer", std::make_shared<nn::Linear>(o.fields * o.dim, o.hidden, &init));
  dense_layer_ = RegisterModule(
      "dense_layer", std::make_shared<nn::Linear>(o.num_dense, o.hidden, &init, /*bias=*/false));
  // Weights as PyTorch's Linear(fields * dim + num_dense, hidden) starts them: uniform in
  // +-1/sqrt(fan_in) with the concatenation's fan_in, not each half's own.
  const float concat_fan_in = static_cast<float>(o.fields * o.dim + o.num_dense);
  Rescale(embedding_layer_->weight(),
          std::sqrt(static_cast<float>(o.fields * o.dim) / concat_fan_in));
  Rescale(embedding_layer_->bias(),
          std::sqrt(static_cast<float>(o.fields * o.dim) / concat_fan_in));
  Rescale(dense_layer_->weight(), std::sqrt(static_cast<float>(o.num_dense) / concat_fan_in));
  hidden_layer_ =
      RegisterModule("hidden_layer", std::make_shared<nn::Linear>(o.hidden, o.hidden / 2, &init));
  output_layer_ =
      RegisterModule("output_layer", std::make_shared<nn::Linear>(o.hidden / 2, 2, &init));
}

absl::StatusOr<autograd::Variable> CtrModel::Forward(const autograd::Variable&) {
  return absl::UnimplementedError("CtrModel: call Score(embeddings, dense)");
}

absl::StatusOr<autograd::Variable> CtrModel::Score(const autograd::Variable& embeddings,
                                                   const autograd::Variable& dense) {
  // Linear(concat(e, d)) = W_e e + W_d d + b: the concatenation without a copy.
  ASSIGN_OR_RETURN(autograd::Variable a, embedding_layer_->Forward(embeddings));
  ASSIGN_OR_RETURN(autograd::Variable b, dense_layer_->Forward(dense));
  ASSIGN_OR_RETURN(autograd::Variable h, F::Add(a, b));
  ASSIGN_OR_RETURN(h, F::Relu(h));
  ASSIGN_OR_RETURN(h, hidden_layer_->Forward(h));
  ASSIGN_OR_RETURN(h, F::Relu(h));
  return output_layer_->Forward(h);
}

absl::StatusOr<CtrSetup> MakeCtr(const std::string& table, const CtrModelOptions& o,
                                 Communicator* comm) {
  CtrSetup setup;
  if (table == "replicated" || table == "sparse") {
    ASSIGN_OR_RETURN(Tensor rows, Tensor::Empty({o.table_rows, o.dim}, DType::kFloat32));
    float* p = rows.data<float>();
    for (int64_t id = 0; id < o.table_rows; ++id) {
      ShardedEmbedding::InitialRow(o.seed, id, o.init_scale, absl::MakeSpan(p + id * o.dim, o.dim));
    }
    auto t = std::make_shared<ReplicatedTable>(std::move(rows), o.fields, table == "sparse");
    setup.model = std::make_shared<CtrModel>(o, t);
    setup.table = t;
    return setup;
  }
  if (table == "sharded") {
    if (comm == nullptr) {
      return absl::InvalidArgumentError(
          "--table=sharded needs a communicator: start it under the launcher (--nproc=1 works)");
    }
    ShardedEmbeddingOptions so;
    so.name = "ctr_embedding";
    so.num_rows = o.table_rows;
    so.dim = o.dim;
    so.seed = o.seed;
    so.init_scale = o.init_scale;
    so.reduction = GradReduction::kMeanOverRanks;
    so.optimizer.kind = RowOptimizerKind::kSgd;
    so.optimizer.lr = o.lr;
    ASSIGN_OR_RETURN(std::unique_ptr<ShardedEmbedding> t, ShardedEmbedding::Create(comm, so));
    setup.model = std::make_shared<CtrModel>(o, nullptr);
    setup.table = std::make_unique<ShardedTable>(std::move(t), o.fields);
    return setup;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("table '", table, "': expected replicated, sparse or sharded"));
}

}  // namespace paddle::examples
