// LocalSgd: periodic parameter averaging with a synchronous warm-up and optional outer momentum
// (Note [Local SGD schedule] in local_sgd.h).
#include "paddle/parallel/local_sgd.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "paddle/core/autograd/sparse_rows.h"
#include "paddle/core/status.h"

namespace paddle {
namespace {

// Bytes one rank sends in a ring allreduce of `bytes`, and in a ring allgather gathering `bytes`
// over all ranks (the model of Note [Sparse or dense]).
int64_t AllreduceBytes(int64_t bytes, int world) { return 2 * (world - 1) * bytes / world; }
int64_t AllgatherBytes(int64_t bytes, int world) { return (world - 1) * bytes / world; }

// The choice of Note [Local SGD of sparse tables] for E = `entries` touched ids over all ranks.
bool AverageTableDensely(int64_t entries, int64_t num_rows, int64_t dim) {
  const double row_bytes = static_cast<double>(dim) * sizeof(float);
  const double sparse_bound = 8.0 * static_cast<double>(entries) +
                              2.0 * static_cast<double>(std::min(entries, num_rows)) * row_bytes;
  return sparse_bound > 2.0 * static_cast<double>(num_rows) * row_bytes;
}

// Rows `ids` of a [num_rows, dim] table to or from `rows` ([ids.size(), dim]).
void CopyRows(float* table, float* rows, const std::vector<int64_t>& ids, int64_t dim,
              bool gather) {
  const size_t row_bytes = static_cast<size_t>(dim) * sizeof(float);
  for (size_t k = 0; k < ids.size(); ++k) {
    float* t = table + ids[k] * dim;
    float* r = rows + static_cast<int64_t>(k) * dim;
    if (gather) {
      std::memcpy(r, t, row_bytes);
    } else {
      std::memcpy(t, r, row_bytes);
    }
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<LocalSgd>> LocalSgd::Create(std::shared_ptr<nn::Module> module,
                                                           Communicator* comm,
                                                           const LocalSgdOptions& options,
                                                           DistributedDataParallel* ddp) {
  auto bad = [](const std::string& what) {
    return absl::InvalidArgumentError(absl::StrCat("LocalSgd: ", what));
  };
  if (module == nullptr || comm == nullptr) return bad("module and communicator are required");
  if (options.period < 1) return bad(absl::StrCat("period must be >= 1, got ", options.period));
  if (options.warmup_steps < 0) {
    return bad(absl::StrCat("warmup_steps must be >= 0, got ", options.warmup_steps));
  }
  if (!(options.outer_lr > 0 && std::isfinite(options.outer_lr))) {
    return bad(absl::StrCat("outer_lr must be positive and finite, got ", options.outer_lr));
  }
  if (!(options.outer_momentum >= 0 && options.outer_momentum < 1)) {
    return bad(absl::StrCat("outer_momentum must be in [0, 1), got ", options.outer_momentum));
  }
  if (ddp != nullptr && &ddp->module() != module.get()) {
    return bad("the DistributedDataParallel given wraps another module");
  }
  std::vector<Tensor> tensors;
  std::vector<SparseTable> tables;
  int64_t elements = 0;
  // Note [Local SGD of sparse tables]: outer momentum moves untouched rows too.
  const bool row_wise =
      options.sparse_tables && options.outer_momentum == 0 && options.outer_lr == 1.0;
  for (const auto& [name, p] : module->NamedParameters()) {
    const Tensor& t = p.data();
    if (t.dtype() != DType::kFloat32 || !t.device().is_cpu() || !t.is_contiguous()) {
      return absl::UnimplementedError(
          absl::StrCat("LocalSgd averages contiguous float32 CPU parameters; parameter '", name,
                       "' is ", t.ToString()));
    }
    if (row_wise && p.sparse() && t.dim() == 2) {
      SparseTable table;
      table.name = name;
      table.var = p;
      table.value = t;
      table.marked.assign(static_cast<size_t>(t.shape()[0]), false);
      tables.push_back(std::move(table));
      continue;
    }
    tensors.push_back(t);
    elements += t.numel();
  }
  const int64_t param_elements = elements;
  if (options.average_buffers) {
    for (const auto& [name, b] : module->NamedBuffers()) {
      const Tensor& t = b.data();
      // Integer buffers (counters) are the same on every rank; only statistics drift.
      if (t.dtype() != DType::kFloat32 || !t.device().is_cpu() || !t.is_contiguous()) continue;
      tensors.push_back(t);
      elements += t.numel();
    }
  }
  for (const Tensor& t : tensors) {
    RETURN_IF_ERROR(Annotate(comm->Broadcast(t, 0)->Wait(),
                             "LocalSgd: broadcasting rank 0's parameters and buffers"));
  }
  for (SparseTable& table : tables) {
    RETURN_IF_ERROR(
        Annotate(comm->Broadcast(table.value, 0)->Wait(),
                 absl::StrCat("LocalSgd: broadcasting rank 0's table '", table.name, "'")));
    table.version = table.value.version();
  }
  std::unique_ptr<LocalSgd> local(new LocalSgd(std::move(module), comm, options, ddp,
                                               std::move(tensors), elements, param_elements,
                                               std::move(tables)));
  return local;
}

LocalSgd::LocalSgd(std::shared_ptr<nn::Module> module, Communicator* comm,
                   const LocalSgdOptions& options, DistributedDataParallel* ddp,
                   std::vector<Tensor> tensors, int64_t elements, int64_t param_elements,
                   std::vector<SparseTable> tables)
    : module_(std::move(module)),
      comm_(comm),
      options_(options),
      ddp_(ddp),
      tensors_(std::move(tensors)),
      param_elements_(param_elements),
      tables_(std::move(tables)),
      flat_(elements) {
  if (options_.outer_momentum > 0 || options_.outer_lr != 1.0) {
    last_.resize(elements);
    momentum_.assign(param_elements, 0.0f);
    int64_t offset = 0;
    for (const Tensor& t : tensors_) {
      std::memcpy(last_.data() + offset, t.data(), t.nbytes());
      offset += t.numel();
    }
  }
  if (ddp_ != nullptr) ddp_->set_sync(in_warmup());
}

absl::StatusOr<bool> LocalSgd::AfterStep() {
  ++steps_;
  bool average;
  if (steps_ <= options_.warmup_steps) {
    average = ddp_ == nullptr;  // with DDP the gradients were averaged already
  } else {
    average = (steps_ - options_.warmup_steps) % options_.period == 0;
  }
  if (ddp_ != nullptr) ddp_->set_sync(in_warmup());
  // A warm-up step under DDP leaves the replicas identical without an average.
  const bool synchronous_step = steps_ <= options_.warmup_steps && ddp_ != nullptr;
  if (!synchronous_step) in_sync_ = false;
  RecordTouchedRows(synchronous_step);
  if (average) RETURN_IF_ERROR(Average());
  return average;
}

void LocalSgd::RecordTouchedRows(bool synchronous_step) {
  for (SparseTable& t : tables_) {
    const uint64_t version = t.value.version();
    const uint64_t writes = version - t.version;
    t.version = version;
    // A synchronous step applied the same averaged gradient on every rank.
    if (writes == 0 || synchronous_step) continue;
    const autograd::SparseRows* g = t.var.sparse_grad();
    if (writes != 1 || g == nullptr) {  // not one sparse optimizer step: rows unknown
      t.unknown_writes = true;
      continue;
    }
    // The Variable checked these ids against the table (CheckSparseRows) when it took them.
    const int64_t* ids = g->ids.data<int64_t>();
    for (int64_t i = 0; i < g->size(); ++i) {
      if (t.marked[ids[i]]) continue;
      t.marked[ids[i]] = true;
      t.touched.push_back(ids[i]);
    }
  }
}

absl::Status LocalSgd::Synchronize() {
  // Every rank took the same number of steps, so every rank takes the same branch.
  return in_sync_ ? absl::OkStatus() : Average();
}

absl::Status LocalSgd::Average() {
  const std::string what = absl::StrCat("LocalSgd: averaging parameters after step ", steps_);
  RETURN_IF_ERROR(AverageDense(what));
  RETURN_IF_ERROR(AverageTables(what));
  ++averages_;
  in_sync_ = true;
  return absl::OkStatus();
}

absl::Status LocalSgd::AverageDense(const std::string& what) {
  if (flat_.empty()) return absl::OkStatus();  // only sparse tables: the same on every rank
  int64_t offset = 0;
  for (const Tensor& t : tensors_) {
    std::memcpy(flat_.data() + offset, t.data(), t.nbytes());
    offset += t.numel();
  }
  ASSIGN_OR_RETURN(Tensor flat, Tensor::FromBlob(flat_.data(), {static_cast<int64_t>(flat_.size())},
                                                 DType::kFloat32, Device::Cpu()));
  RETURN_IF_ERROR(Annotate(comm_->Allreduce(flat, ReduceOp::kAvg)->Wait(), what));
  averaged_bytes_ += AllreduceBytes(static_cast<int64_t>(flat.nbytes()), comm_->world_size());
  if (!last_.empty()) {
    // Outer momentum (SlowMo): d = x_last - x_avg; u = b u + d; x = x_last - a u.
    const float a = static_cast<float>(options_.outer_lr);
    const float b = static_cast<float>(options_.outer_momentum);
    // Buffers (statistics, not trained) take the plain average.
    for (int64_t i = 0; i < param_elements_; ++i) {
      momentum_[i] = b * momentum_[i] + (last_[i] - flat_[i]);
      flat_[i] = last_[i] - a * momentum_[i];
      last_[i] = flat_[i];
    }
  }
  offset = 0;
  for (const Tensor& t : tensors_) {
    std::memcpy(t.data(), flat_.data() + offset, t.nbytes());
    offset += t.numel();
  }
  return absl::OkStatus();
}

// Note [Local SGD of sparse tables], steps 1 and 2.
absl::Status LocalSgd::AverageTables(const std::string& what) {
  if (tables_.empty()) return absl::OkStatus();
  const int world = comm_->world_size();
  const int64_t n = static_cast<int64_t>(tables_.size());
  // Step 1. A table with unknown writes claims every row, which makes E >= num_rows: dense.
  ASSIGN_OR_RETURN(Tensor mine, Tensor::Empty({n}, DType::kInt64));
  ASSIGN_OR_RETURN(Tensor all, Tensor::Empty({n * world}, DType::kInt64));
  for (int64_t i = 0; i < n; ++i) {
    SparseTable& t = tables_[i];
    std::sort(t.touched.begin(), t.touched.end());
    mine.data<int64_t>()[i] =
        t.unknown_writes ? t.value.shape()[0] : static_cast<int64_t>(t.touched.size());
  }
  RETURN_IF_ERROR(Annotate(comm_->Allgather(mine, all)->Wait(),
                           absl::StrCat(what, ": touched-row counts of ", n, " sparse tables")));
  averaged_bytes_ += AllgatherBytes(static_cast<int64_t>(all.nbytes()), world);
  // Step 2, table by table.
  for (int64_t i = 0; i < n; ++i) {
    SparseTable& t = tables_[i];
    const int64_t num_rows = t.value.shape()[0];
    const int64_t dim = t.value.shape()[1];
    std::vector<int64_t> counts(world);
    int64_t entries = 0;
    for (int r = 0; r < world; ++r) {
      counts[r] = all.data<int64_t>()[r * n + i];
      entries += counts[r];
    }
    const std::string table_what =
        absl::StrCat(what, ": table '", t.name, "' (", entries, " touched ids over ", world,
                     " ranks, ", num_rows, " rows)");
    if (entries == 0) {
      // Untouched everywhere: identical on every rank already.
    } else if (AverageTableDensely(entries, num_rows, dim)) {
      RETURN_IF_ERROR(Annotate(comm_->Allreduce(t.value, ReduceOp::kAvg)->Wait(),
                               absl::StrCat(table_what, " (dense)")));
      averaged_bytes_ += AllreduceBytes(static_cast<int64_t>(t.value.nbytes()), world);
    } else {
      const int64_t own = static_cast<int64_t>(t.touched.size());
      ASSIGN_OR_RETURN(Tensor ids, Tensor::Empty({own}, DType::kInt64));
      ASSIGN_OR_RETURN(Tensor all_ids, Tensor::Empty({entries}, DType::kInt64));
      std::copy(t.touched.begin(), t.touched.end(), ids.data<int64_t>());
      RETURN_IF_ERROR(Annotate(comm_->Allgatherv(ids, all_ids, counts)->Wait(),
                               absl::StrCat(table_what, " (ids)")));
      averaged_bytes_ += AllgatherBytes(static_cast<int64_t>(all_ids.nbytes()), world);
      std::vector<int64_t> rows_union(all_ids.data<int64_t>(), all_ids.data<int64_t>() + entries);
      std::sort(rows_union.begin(), rows_union.end());
      rows_union.erase(std::unique(rows_union.begin(), rows_union.end()), rows_union.end());
      const int64_t u = static_cast<int64_t>(rows_union.size());
      ASSIGN_OR_RETURN(Tensor rows, Tensor::Empty({u * dim}, DType::kFloat32));
      CopyRows(t.value.data<float>(), rows.data<float>(), rows_union, dim, /*gather=*/true);
      RETURN_IF_ERROR(Annotate(comm_->Allreduce(rows, ReduceOp::kAvg)->Wait(),
                               absl::StrCat(table_what, " (", u, " rows)")));
      averaged_bytes_ += AllreduceBytes(static_cast<int64_t>(rows.nbytes()), world);
      CopyRows(t.value.data<float>(), rows.data<float>(), rows_union, dim, /*gather=*/false);
    }
    for (int64_t id : t.touched) t.marked[id] = false;
    t.touched.clear();
    t.unknown_writes = false;
    t.version = t.value.version();
  }
  return absl::OkStatus();
}

}  // namespace paddle
