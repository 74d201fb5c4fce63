// SparseRows checks and arithmetic: coalescing, concatenation, conversion to dense.
#include "paddle/core/autograd/sparse_rows.h"

#include <algorithm>
#include <cstring>
#include <numeric>
#include <vector>

#include "absl/strings/str_cat.h"
#include "paddle/core/status.h"

namespace paddle::autograd {
namespace {

bool IsFloat(DType d) { return d == DType::kFloat32 || d == DType::kFloat64; }

template <typename T>
void SumRows(const SparseRows& g, const std::vector<int64_t>& order, T* out, int64_t* out_ids) {
  const int64_t dim = g.dim();
  const int64_t* ids = g.ids.data<int64_t>();
  const T* rows = g.rows.data<T>();
  int64_t k = -1;
  for (size_t i = 0; i < order.size(); ++i) {
    const int64_t src = order[i];
    const T* row = rows + src * dim;
    if (k < 0 || out_ids[k] != ids[src]) {
      ++k;
      out_ids[k] = ids[src];
      std::memcpy(out + k * dim, row, sizeof(T) * dim);
    } else {
      T* dst = out + k * dim;
      for (int64_t j = 0; j < dim; ++j) dst[j] += row[j];
    }
  }
}

template <typename T>
void ScatterAdd(const SparseRows& g, T* out) {
  const int64_t dim = g.dim();
  const int64_t* ids = g.ids.data<int64_t>();
  const T* rows = g.rows.data<T>();
  for (int64_t i = 0; i < g.size(); ++i) {
    T* dst = out + ids[i] * dim;
    const T* row = rows + i * dim;
    for (int64_t j = 0; j < dim; ++j) dst[j] += row[j];
  }
}

}  // namespace

absl::Status CheckSparseRows(const SparseRows& g, const Tensor& param, absl::string_view what) {
  if (param.dim() != 2 || !IsFloat(param.dtype()) || !param.device().is_cpu()) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": a sparse gradient needs a 2-D float32/float64 CPU parameter, not ",
                     param.ToString()));
  }
  if (g.num_rows != param.shape()[0]) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": sparse gradient for ", g.num_rows,
                                                   " rows, parameter is ", param.ToString()));
  }
  if (!g.ids.defined() || g.ids.dtype() != DType::kInt64 || g.ids.dim() != 1 ||
      !g.ids.is_contiguous() || !g.ids.device().is_cpu()) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": sparse gradient ids must be a contiguous int64 [n] CPU tensor, not ",
                     g.ids.defined() ? g.ids.ToString() : "undefined"));
  }
  const Shape want{g.ids.numel(), param.shape()[1]};
  if (!g.rows.defined() || g.rows.dtype() != param.dtype() || g.rows.shape() != want ||
      !g.rows.is_contiguous() || !g.rows.device().is_cpu()) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": sparse gradient rows must be a contiguous ", DTypeName(param.dtype()),
                     ShapeToString(want), " CPU tensor, not ",
                     g.rows.defined() ? g.rows.ToString() : "undefined"));
  }
  const int64_t* ids = g.ids.data<int64_t>();
  for (int64_t i = 0; i < g.ids.numel(); ++i) {
    if (ids[i] < 0 || ids[i] >= g.num_rows) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": id ", ids[i], " at position ", i,
                                                     " is outside [0, ", g.num_rows, ")"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<SparseRows> EmptySparseRows(const Tensor& param) {
  if (param.dim() != 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("sparse gradient of a non-2-D parameter ", param.ToString()));
  }
  SparseRows g;
  g.num_rows = param.shape()[0];
  ASSIGN_OR_RETURN(g.ids, Tensor::Empty({0}, DType::kInt64));
  ASSIGN_OR_RETURN(g.rows, Tensor::Empty({0, param.shape()[1]}, param.dtype()));
  return g;
}

absl::StatusOr<SparseRows> Coalesce(const SparseRows& g) {
  const int64_t n = g.size();
  const int64_t* ids = g.ids.data<int64_t>();
  std::vector<int64_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  // Stable: equal ids keep their order of appearance, so the sums are the same on every rank.
  std::stable_sort(order.begin(), order.end(),
                   [ids](int64_t a, int64_t b) { return ids[a] < ids[b]; });
  int64_t unique = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (i == 0 || ids[order[i]] != ids[order[i - 1]]) ++unique;
  }
  SparseRows out;
  out.num_rows = g.num_rows;
  ASSIGN_OR_RETURN(out.ids, Tensor::Empty({unique}, DType::kInt64));
  ASSIGN_OR_RETURN(out.rows, Tensor::Empty({unique, g.dim()}, g.rows.dtype()));
  if (g.rows.dtype() == DType::kFloat32) {
    SumRows(g, order, out.rows.data<float>(), out.ids.data<int64_t>());
  } else if (g.rows.dtype() == DType::kFloat64) {
    SumRows(g, order, out.rows.data<double>(), out.ids.data<int64_t>());
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("coalesce of sparse rows of dtype ", DTypeName(g.rows.dtype())));
  }
  return out;
}

absl::StatusOr<SparseRows> ConcatSparseRows(const SparseRows& a, const SparseRows& b) {
  if (a.num_rows != b.num_rows || a.dim() != b.dim() || a.rows.dtype() != b.rows.dtype()) {
    return absl::InvalidArgumentError(
        absl::StrCat("concatenating sparse gradients of different tables: ", a.num_rows, " rows ",
                     a.rows.ToString(), " and ", b.num_rows, " rows ", b.rows.ToString()));
  }
  SparseRows out;
  out.num_rows = a.num_rows;
  const int64_t n = a.size() + b.size();
  ASSIGN_OR_RETURN(out.ids, Tensor::Empty({n}, DType::kInt64));
  ASSIGN_OR_RETURN(out.rows, Tensor::Empty({n, a.dim()}, a.rows.dtype()));
  char* ids = static_cast<char*>(out.ids.data());
  char* rows = static_cast<char*>(out.rows.data());
  if (a.size() > 0) {
    std::memcpy(ids, a.ids.data(), a.ids.nbytes());
    std::memcpy(rows, a.rows.data(), a.rows.nbytes());
  }
  if (b.size() > 0) {
    std::memcpy(ids + a.ids.nbytes(), b.ids.data(), b.ids.nbytes());
    std::memcpy(rows + a.rows.nbytes(), b.rows.data(), b.rows.nbytes());
  }
  return out;
}

absl::StatusOr<Tensor> SparseRowsToDense(const SparseRows& g) {
  ASSIGN_OR_RETURN(Tensor out, Tensor::Zeros({g.num_rows, g.dim()}, g.rows.dtype()));
  if (g.rows.dtype() == DType::kFloat32) {
    ScatterAdd(g, out.data<float>());
  } else if (g.rows.dtype() == DType::kFloat64) {
    ScatterAdd(g, out.data<double>());
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("dense copy of sparse rows of dtype ", DTypeName(g.rows.dtype())));
  }
  return out;
}

}  // namespace paddle::autograd
