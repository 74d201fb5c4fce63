// Sparse gradient exchange: counts allgather, ids/rows allgatherv or the dense fallback.
#include "paddle/parallel/reducer/sparse_exchange.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "paddle/collective/reduction.h"
#include "paddle/core/autograd/sparse_rows.h"
#include "paddle/core/status.h"

namespace paddle {
namespace {

using autograd::SparseRows;
using autograd::Variable;

// `work`'s status with the operation, this rank and the parameter named.
absl::Status Wait(const std::shared_ptr<Work>& work, Communicator* comm, const char* op,
                  int64_t bytes, const std::string& what) {
  return ErrorContext()
      .Rank(comm->rank(), comm->world_size())
      .Op(op, static_cast<int64_t>(work->seq()))
      .Bytes(bytes)
      .Wrap(Annotate(work->Wait(), what));
}

template <typename T>
void ScatterWithCount(const SparseRows& g, T* table, int64_t dim) {
  const int64_t* ids = g.ids.data<int64_t>();
  const T* rows = g.rows.data<T>();
  for (int64_t i = 0; i < g.size(); ++i) {
    T* dst = table + ids[i] * (dim + 1);
    for (int64_t j = 0; j < dim; ++j) dst[j] += rows[i * dim + j];
    dst[dim] += T(1);
  }
}

template <typename T>
absl::StatusOr<SparseRows> NonzeroRows(const Tensor& table, int64_t num_rows, int64_t dim) {
  const T* t = table.data<T>();
  int64_t n = 0;
  for (int64_t r = 0; r < num_rows; ++r) n += t[r * (dim + 1) + dim] != T(0);
  SparseRows out;
  out.num_rows = num_rows;
  ASSIGN_OR_RETURN(out.ids, Tensor::Empty({n}, DType::kInt64));
  ASSIGN_OR_RETURN(out.rows, Tensor::Empty({n, dim}, table.dtype()));
  int64_t k = 0;
  for (int64_t r = 0; r < num_rows; ++r) {
    const T* src = t + r * (dim + 1);
    if (src[dim] == T(0)) continue;
    out.ids.data<int64_t>()[k] = r;
    std::memcpy(out.rows.data<T>() + k * dim, src, sizeof(T) * dim);
    ++k;
  }
  return out;
}

// The dense fallback of Note [Sparse exchange], step 3.
absl::StatusOr<SparseRows> ExchangeDense(const SparseRows& local, Communicator* comm,
                                         CallOptions call, const std::string& what) {
  const int64_t num_rows = local.num_rows;
  const int64_t dim = local.dim();
  const DType dtype = local.rows.dtype();
  ASSIGN_OR_RETURN(Tensor table, Tensor::Zeros({num_rows * (dim + 1)}, dtype));
  if (dtype == DType::kFloat32) {
    ScatterWithCount(local, table.data<float>(), dim);
  } else {
    ScatterWithCount(local, table.data<double>(), dim);
  }
  RETURN_IF_ERROR(Wait(comm->Allreduce(table, ReduceOp::kAvg, call), comm, "allreduce",
                       static_cast<int64_t>(table.nbytes()),
                       absl::StrCat(what, " (dense fallback, Note [Sparse or dense])")));
  if (dtype == DType::kFloat32) return NonzeroRows<float>(table, num_rows, dim);
  return NonzeroRows<double>(table, num_rows, dim);
}

// The sparse way of Note [Sparse exchange], step 3.
absl::StatusOr<SparseRows> ExchangeSparse(const SparseRows& local,
                                          const std::vector<int64_t>& counts, Communicator* comm,
                                          CallOptions call, const std::string& what) {
  int64_t total = 0;
  for (int64_t c : counts) total += c;
  const int64_t dim = local.dim();
  SparseRows all;
  all.num_rows = local.num_rows;
  ASSIGN_OR_RETURN(all.ids, Tensor::Empty({total}, DType::kInt64));
  ASSIGN_OR_RETURN(all.rows, Tensor::Empty({total, dim}, local.rows.dtype()));
  ASSIGN_OR_RETURN(Tensor flat_rows, local.rows.View({local.size() * dim}));
  ASSIGN_OR_RETURN(Tensor all_flat_rows, all.rows.View({total * dim}));
  std::vector<int64_t> row_counts;
  for (int64_t c : counts) row_counts.push_back(c * dim);
  // Both issued before either is waited for: the communicator runs them in this order.
  std::shared_ptr<Work> ids = comm->Allgatherv(local.ids, all.ids, counts, call);
  std::shared_ptr<Work> rows = comm->Allgatherv(flat_rows, all_flat_rows, row_counts, call);
  RETURN_IF_ERROR(Wait(ids, comm, "allgatherv", static_cast<int64_t>(all.ids.nbytes()),
                       absl::StrCat(what, " (ids)")));
  RETURN_IF_ERROR(Wait(rows, comm, "allgatherv", static_cast<int64_t>(all.rows.nbytes()),
                       absl::StrCat(what, " (rows)")));
  ASSIGN_OR_RETURN(SparseRows merged, autograd::Coalesce(all));
  RETURN_IF_ERROR(
      FinishAvg(merged.rows.data(), merged.rows.numel(), merged.rows.dtype(), comm->world_size()));
  return merged;
}

}  // namespace

SparseExchangeChoice ChooseSparseExchange(int64_t total_entries, int64_t num_rows, int64_t dim,
                                          int64_t element_size, int world_size) {
  SparseExchangeChoice c;
  const double w = world_size;
  const double sparse_total = static_cast<double>(total_entries) * (8 + dim * element_size);
  const double dense_total = 2.0 * num_rows * (dim + 1) * element_size;
  c.dense = sparse_total > dense_total;
  c.sparse_bytes = static_cast<int64_t>(sparse_total * (w - 1) / w);
  c.dense_bytes = static_cast<int64_t>(dense_total * (w - 1) / w);
  return c;
}

absl::StatusOr<SparseExchangeStats> ExchangeSparseGradients(
    absl::Span<const std::pair<std::string, Variable>> params, Communicator* comm,
    absl::Duration timeout) {
  SparseExchangeStats stats;
  const int64_t n = static_cast<int64_t>(params.size());
  if (n == 0) return stats;
  const int world = comm->world_size();
  const CallOptions call{timeout};
  // Step 1: local coalesce.
  std::vector<SparseRows> local;
  for (const auto& [name, var] : params) {
    const std::string what = absl::StrCat("sparse gradient of '", name, "'");
    if (var.sparse_grad() == nullptr) {
      ASSIGN_OR_RETURN(SparseRows empty, autograd::EmptySparseRows(var.data()));
      local.push_back(std::move(empty));
      continue;
    }
    RETURN_IF_ERROR(autograd::CheckSparseRows(*var.sparse_grad(), var.data(), what));
    ASSIGN_OR_RETURN(SparseRows coalesced, autograd::Coalesce(*var.sparse_grad()));
    local.push_back(std::move(coalesced));
  }
  // Step 2: every rank's counts.
  ASSIGN_OR_RETURN(Tensor mine, Tensor::Empty({n}, DType::kInt64));
  ASSIGN_OR_RETURN(Tensor all, Tensor::Empty({n * world}, DType::kInt64));
  for (int64_t i = 0; i < n; ++i) mine.data<int64_t>()[i] = local[i].size();
  RETURN_IF_ERROR(Wait(comm->Allgather(mine, all, call), comm, "allgather",
                       static_cast<int64_t>(all.nbytes()), "sparse gradient entry counts"));
  stats.bytes_sent += static_cast<int64_t>(mine.nbytes()) * (world - 1);
  // Step 3, parameter by parameter.
  for (int64_t i = 0; i < n; ++i) {
    const auto& [name, var] = params[i];
    std::vector<int64_t> counts(world);
    int64_t total = 0;
    for (int r = 0; r < world; ++r) {
      counts[r] = all.data<int64_t>()[r * n + i];
      total += counts[r];
    }
    stats.entries += total;
    if (total == 0) {
      autograd::Variable(var).ZeroGrad();  // a copy shares the slots: drops the sparse gradient
      continue;
    }
    const SparseRows& g = local[i];
    const SparseExchangeChoice choice = ChooseSparseExchange(
        total, g.num_rows, g.dim(), static_cast<int64_t>(DTypeSize(g.rows.dtype())), world);
    const std::string what = absl::StrCat("exchanging the sparse gradient of '", name, "' (", total,
                                          " entries over ", world, " ranks)");
    SparseRows merged;
    if (choice.dense) {
      ASSIGN_OR_RETURN(merged, ExchangeDense(g, comm, call, what));
      stats.bytes_sent += choice.dense_bytes;
      ++stats.dense_fallbacks;
    } else {
      ASSIGN_OR_RETURN(merged, ExchangeSparse(g, counts, comm, call, what));
      stats.bytes_sent += choice.sparse_bytes;
    }
    autograd::Variable target = var;
    RETURN_IF_ERROR(target.set_sparse_grad(std::move(merged)));
  }
  return stats;
}

}  // namespace paddle
