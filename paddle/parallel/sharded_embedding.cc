// ShardedEmbedding (sharded_embedding.h): the all-to-all lookup and gradient exchange, the
// owner-side row optimizers, and per-rank shard checkpoints re-sharded on load.
#include "paddle/parallel/sharded_embedding.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "paddle/checkpoint/checkpoint_file.h"
#include "paddle/core/status.h"

namespace paddle {
namespace {

uint64_t SplitMix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Salts keep the owner hash and the initial values independent streams of one seed.
constexpr uint64_t kOwnerSalt = 0x6f776e6572ull;  // "owner"
constexpr uint64_t kInitSalt = 0x696e6974ull;     // "init"
constexpr char kHashName[] = "splitmix64-v1";     // recorded in checkpoints

int64_t Sum(const std::vector<int64_t>& v) {
  int64_t s = 0;
  for (int64_t x : v) s += x;
  return s;
}

// Bytes of `counts` (in elements of `bytes_each`) that go to ranks other than `self`.
int64_t BytesToOthers(const std::vector<int64_t>& counts, int self, int64_t bytes_each) {
  return (Sum(counts) - counts[self]) * bytes_each;
}

std::vector<int64_t> Scaled(const std::vector<int64_t>& counts, int64_t factor) {
  std::vector<int64_t> out(counts);
  for (int64_t& c : out) c *= factor;
  return out;
}

const char* KindName(RowOptimizerKind kind) {
  return kind == RowOptimizerKind::kSgd ? "sgd" : "adagrad";
}

std::string ShardFileName(const std::string& name, int rank, int world) {
  return absl::StrCat(name, "-shard-", rank, "-of-", world, ".ckpt");
}

}  // namespace

// Note [Embedding row owner]: see sharded_embedding.h.
int ShardedEmbedding::OwnerOf(int64_t id, int world_size, uint64_t seed) {
  const uint64_t h = SplitMix64(static_cast<uint64_t>(id) ^ SplitMix64(seed ^ kOwnerSalt));
  return static_cast<int>(h % static_cast<uint64_t>(world_size));
}

void ShardedEmbedding::InitialRow(uint64_t seed, int64_t id, float init_scale,
                                  absl::Span<float> out) {
  const uint64_t base = SplitMix64(static_cast<uint64_t>(id) ^ SplitMix64(seed ^ kInitSalt));
  for (size_t j = 0; j < out.size(); ++j) {
    const double u = static_cast<double>(SplitMix64(base + j) >> 40) * 0x1p-24;  // [0, 1)
    out[j] = static_cast<float>((2.0 * u - 1.0) * init_scale);
  }
}

absl::StatusOr<std::unique_ptr<ShardedEmbedding>> ShardedEmbedding::Create(
    Communicator* comm, ShardedEmbeddingOptions options) {
  if (comm == nullptr) return absl::InvalidArgumentError("ShardedEmbedding: comm is null");
  const std::string what = absl::StrCat("ShardedEmbedding '", options.name, "': ");
  if (options.name.empty() || options.name.find('/') != std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, "name must be non-empty without '/' (it names checkpoint files)"));
  }
  if (options.num_rows <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, "num_rows must be > 0, got ", options.num_rows));
  }
  if (options.dim <= 0 || options.dim > (int64_t{1} << 20)) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, "dim must be in [1, 2^20], got ", options.dim));
  }
  if (!(options.init_scale >= 0) || !std::isfinite(options.init_scale)) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, "init_scale must be finite and >= 0, got ", options.init_scale));
  }
  const RowOptimizerOptions& o = options.optimizer;
  if (!(o.lr >= 0) || !std::isfinite(o.lr)) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, "optimizer.lr must be finite and >= 0, got ", o.lr));
  }
  if (!(o.momentum >= 0 && o.momentum < 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, "optimizer.momentum must be in [0, 1), got ", o.momentum));
  }
  if (o.kind == RowOptimizerKind::kAdagrad && !(o.adagrad_initial >= 0 && o.adagrad_eps > 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, "optimizer.adagrad_initial must be >= 0 and adagrad_eps > 0, got ",
                     o.adagrad_initial, " and ", o.adagrad_eps));
  }
  if (o.kind == RowOptimizerKind::kAdagrad && o.momentum != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, "optimizer.momentum applies to kSgd only, got ", o.momentum));
  }
  return std::unique_ptr<ShardedEmbedding>(new ShardedEmbedding(comm, std::move(options)));
}

ShardedEmbedding::ShardedEmbedding(Communicator* comm, ShardedEmbeddingOptions options)
    : comm_(comm), options_(std::move(options)), rank_(comm->rank()), world_(comm->world_size()) {}

int ShardedEmbedding::StateSlots() const {
  const RowOptimizerOptions& o = options_.optimizer;
  return (o.kind == RowOptimizerKind::kAdagrad || o.momentum != 0) ? 1 : 0;
}

std::string ShardedEmbedding::Where() const {
  return absl::StrCat("table '", options_.name, "' (num_rows ", options_.num_rows, ", dim ",
                      options_.dim, ") on rank ", rank_, "/", world_);
}

CallOptions ShardedEmbedding::Call() const {
  CallOptions call;
  call.timeout = options_.timeout;
  return call;
}

absl::Status ShardedEmbedding::Wait(const std::shared_ptr<Work>& work, const char* what) {
  absl::Status s = work->Wait();
  if (s.ok()) return s;
  return absl::Status(s.code(), absl::StrCat(what, " of ", Where(), ": ", s.message()));
}

absl::Status ShardedEmbedding::CheckIds(absl::Span<const int64_t> ids, const char* op) const {
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= options_.num_rows) {
      return absl::InvalidArgumentError(absl::StrCat(op, ": id ", ids[i], " at position ", i,
                                                     " is out of range [0, ", options_.num_rows,
                                                     ") of ", Where()));
    }
  }
  return absl::OkStatus();
}

// Every rank sends its counts for each peer; a rank with bad input sends -1 to all, so every rank
// leaves the operation at this point with an error instead of waiting in the next collective.
absl::StatusOr<std::vector<int64_t>> ShardedEmbedding::ExchangeCounts(
    const std::vector<int64_t>& send_counts, const absl::Status& local_error, const char* op) {
  ASSIGN_OR_RETURN(Tensor send, Tensor::Empty({world_}, DType::kInt64));
  ASSIGN_OR_RETURN(Tensor recv, Tensor::Empty({world_}, DType::kInt64));
  for (int j = 0; j < world_; ++j) send.data<int64_t>()[j] = local_error.ok() ? send_counts[j] : -1;
  RETURN_IF_ERROR(Wait(comm_->Alltoall(send, recv, Call()), absl::StrCat(op, " counts").c_str()));
  if (!local_error.ok()) return local_error;
  std::vector<int64_t> recv_counts(recv.data<int64_t>(), recv.data<int64_t>() + world_);
  std::vector<int> bad;
  for (int j = 0; j < world_; ++j) {
    if (recv_counts[j] < 0) bad.push_back(j);
  }
  if (!bad.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(op, " of ", Where(), " failed: rank(s) ",
                                                   absl::StrJoin(bad, ", "),
                                                   " passed bad input (their own error names it)"));
  }
  return recv_counts;
}

int64_t ShardedEmbedding::Materialize(int64_t id) {
  auto [it, inserted] = slot_of_.try_emplace(id, static_cast<int64_t>(slot_of_.size()));
  if (inserted) {
    const int64_t dim = options_.dim;
    rows_.resize(rows_.size() + dim);
    InitialRow(options_.seed, id, options_.init_scale,
               absl::MakeSpan(rows_.data() + it->second * dim, dim));
    const float init = options_.optimizer.kind == RowOptimizerKind::kAdagrad
                           ? options_.optimizer.adagrad_initial
                           : 0.0f;
    state_.resize(state_.size() + StateSlots() * dim, init);
  }
  return it->second;
}

absl::StatusOr<std::vector<float>> ShardedEmbedding::LocalRow(int64_t id) const {
  RETURN_IF_ERROR(CheckIds({id}, "LocalRow"));
  const int owner = OwnerOf(id, world_, options_.seed);
  if (owner != rank_) {
    return absl::InvalidArgumentError(
        absl::StrCat("LocalRow: id ", id, " is owned by rank ", owner, ", not by ", Where()));
  }
  std::vector<float> row(options_.dim);
  auto it = slot_of_.find(id);
  if (it == slot_of_.end()) {
    InitialRow(options_.seed, id, options_.init_scale, absl::MakeSpan(row));
  } else {
    std::copy_n(rows_.data() + it->second * options_.dim, options_.dim, row.data());
  }
  return row;
}

// Note [Embedding exchange]
// Lookup, on every rank, with its n ids:
//  1. check every id is in range; dedupe them (U unique ids, and for each position the index of
//     its unique id); order the unique ids by owner rank (counting sort), send_counts[j] of them
//     for rank j;
//  2. Alltoall of the counts (one int64 per peer; -1 from a rank with bad input makes all fail);
//  3. Alltoallv of the ids (int64, uneven splits): each owner receives the ids it serves;
//  4. each owner copies its rows (or computes the initial row of a never-updated id), and an
//     Alltoallv with the splits reversed (x dim floats) returns them;
//  5. rows are scattered back to the caller's positions, duplicates included.
// Backward, with the same ids and their gradient rows [n, dim]:
//  1. check; sum the gradient rows of duplicate ids locally (so each id crosses the wire once per
//     rank) and pack records (id as 8 bytes, then dim floats) ordered by owner;
//  2. Alltoall of the counts, as above;
//  3. one Alltoallv of the records (uint8, uneven splits);
//  4. each owner sums the records of one id in sender rank order, divides by world size for
//     kMeanOverRanks (DDP's average of per-rank gradients), and applies its row optimizer.
// Bytes a rank sends per step, for U unique ids of which a fraction f lives elsewhere:
// lookup 8fU + 4fU'dim (U': ids others ask of it) and backward (8 + 4 dim) fU, plus 8(w-1) per
// count exchange.
absl::StatusOr<Tensor> ShardedEmbedding::Lookup(absl::Span<const int64_t> ids) {
  const int64_t n = static_cast<int64_t>(ids.size());
  const int64_t dim = options_.dim;
  absl::Status bad = CheckIds(ids, "Lookup");

  absl::flat_hash_map<int64_t, int64_t> unique_index;
  std::vector<int64_t> unique;
  std::vector<int64_t> inverse(bad.ok() ? n : 0);
  std::vector<int64_t> send_counts(world_, 0);
  if (bad.ok()) {
    unique_index.reserve(n);
    for (int64_t i = 0; i < n; ++i) {
      auto [it, inserted] = unique_index.try_emplace(ids[i], static_cast<int64_t>(unique.size()));
      if (inserted) unique.push_back(ids[i]);
      inverse[i] = it->second;
    }
  }
  const int64_t u_count = static_cast<int64_t>(unique.size());
  std::vector<int> owner(u_count);
  for (int64_t u = 0; u < u_count; ++u) {
    owner[u] = OwnerOf(unique[u], world_, options_.seed);
    ++send_counts[owner[u]];
  }
  std::vector<int64_t> cursor(world_, 0);
  for (int j = 1; j < world_; ++j) cursor[j] = cursor[j - 1] + send_counts[j - 1];
  ASSIGN_OR_RETURN(Tensor send_ids, Tensor::Empty({u_count}, DType::kInt64));
  std::vector<int64_t> send_pos(u_count);
  for (int64_t u = 0; u < u_count; ++u) {
    send_pos[u] = cursor[owner[u]]++;
    send_ids.data<int64_t>()[send_pos[u]] = unique[u];
  }

  ASSIGN_OR_RETURN(std::vector<int64_t> recv_counts, ExchangeCounts(send_counts, bad, "Lookup"));
  const int64_t served = Sum(recv_counts);
  ASSIGN_OR_RETURN(Tensor recv_ids, Tensor::Empty({served}, DType::kInt64));
  RETURN_IF_ERROR(
      Wait(comm_->Alltoallv(send_ids, recv_ids, send_counts, recv_counts, Call()), "Lookup ids"));

  ASSIGN_OR_RETURN(Tensor reply, Tensor::Empty({served, dim}, DType::kFloat32));
  absl::Status misrouted;
  for (int64_t k = 0; k < served; ++k) {
    const int64_t id = recv_ids.data<int64_t>()[k];
    float* out = reply.data<float>() + k * dim;
    auto it = slot_of_.find(id);
    if (it != slot_of_.end()) {
      std::copy_n(rows_.data() + it->second * dim, dim, out);
    } else {
      if (misrouted.ok() &&
          (id < 0 || id >= options_.num_rows || OwnerOf(id, world_, options_.seed) != rank_)) {
        misrouted = absl::FailedPreconditionError(absl::StrCat(
            "Lookup: ", Where(), " was sent id ", id, " that it does not own; do all ranks ",
            "create the table with the same num_rows and seed?"));
      }
      InitialRow(options_.seed, id, options_.init_scale, absl::MakeSpan(out, dim));
    }
  }
  ASSIGN_OR_RETURN(Tensor got, Tensor::Empty({u_count, dim}, DType::kFloat32));
  RETURN_IF_ERROR(
      Wait(comm_->Alltoallv(reply, got, Scaled(recv_counts, dim), Scaled(send_counts, dim), Call()),
           "Lookup rows"));
  RETURN_IF_ERROR(misrouted);

  ASSIGN_OR_RETURN(Tensor result, Tensor::Empty({n, dim}, DType::kFloat32));
  for (int64_t i = 0; i < n; ++i) {
    std::copy_n(got.data<float>() + send_pos[inverse[i]] * dim, dim,
                result.data<float>() + i * dim);
  }
  ++stats_.lookups;
  stats_.lookup_bytes_sent += 8 * (world_ - 1) + BytesToOthers(send_counts, rank_, 8) +
                              BytesToOthers(recv_counts, rank_, 4 * dim);
  return result;
}

absl::Status ShardedEmbedding::Backward(absl::Span<const int64_t> ids, const Tensor& grad_rows) {
  const int64_t n = static_cast<int64_t>(ids.size());
  const int64_t dim = options_.dim;
  absl::Status bad = CheckIds(ids, "Backward");
  if (bad.ok() &&
      (!grad_rows.defined() || grad_rows.dtype() != DType::kFloat32 ||
       grad_rows.device().type != DeviceType::kCpu || !grad_rows.is_contiguous() ||
       grad_rows.dim() != 2 || grad_rows.shape()[0] != n || grad_rows.shape()[1] != dim)) {
    bad = absl::InvalidArgumentError(absl::StrCat(
        "Backward: grad_rows must be a contiguous float32 CPU tensor [", n, ", ", dim,
        "] (one row per id), got ", grad_rows.defined() ? grad_rows.ToString() : "undefined",
        grad_rows.defined() && !grad_rows.is_contiguous() ? " (not contiguous)" : "", "; ",
        Where()));
  }

  // 1. Sum duplicates locally, then pack (id, row) records by owner.
  absl::flat_hash_map<int64_t, int64_t> unique_index;
  std::vector<int64_t> unique;
  std::vector<float> sums;
  if (bad.ok()) {
    unique_index.reserve(n);
    const float* g = grad_rows.data<float>();
    for (int64_t i = 0; i < n; ++i) {
      auto [it, inserted] = unique_index.try_emplace(ids[i], static_cast<int64_t>(unique.size()));
      if (inserted) {
        unique.push_back(ids[i]);
        sums.insert(sums.end(), g + i * dim, g + (i + 1) * dim);
      } else {
        float* s = sums.data() + it->second * dim;
        for (int64_t j = 0; j < dim; ++j) s[j] += g[i * dim + j];
      }
    }
  }
  const int64_t u_count = static_cast<int64_t>(unique.size());
  const int64_t record = 8 + 4 * dim;
  std::vector<int64_t> send_counts(world_, 0);
  std::vector<int> owner(u_count);
  for (int64_t u = 0; u < u_count; ++u) {
    owner[u] = OwnerOf(unique[u], world_, options_.seed);
    ++send_counts[owner[u]];
  }
  std::vector<int64_t> cursor(world_, 0);
  for (int j = 1; j < world_; ++j) cursor[j] = cursor[j - 1] + send_counts[j - 1];
  ASSIGN_OR_RETURN(Tensor send, Tensor::Empty({u_count * record}, DType::kUInt8));
  for (int64_t u = 0; u < u_count; ++u) {
    uint8_t* p = send.data<uint8_t>() + cursor[owner[u]]++ * record;
    std::memcpy(p, &unique[u], 8);
    std::memcpy(p + 8, sums.data() + u * dim, 4 * dim);
  }

  // 2-3. Counts, then the records.
  ASSIGN_OR_RETURN(std::vector<int64_t> recv_counts, ExchangeCounts(send_counts, bad, "Backward"));
  const int64_t received = Sum(recv_counts);
  ASSIGN_OR_RETURN(Tensor recv, Tensor::Empty({received * record}, DType::kUInt8));
  RETURN_IF_ERROR(Wait(comm_->Alltoallv(send, recv, Scaled(send_counts, record),
                                        Scaled(recv_counts, record), Call()),
                       "Backward gradients"));
  ++stats_.backwards;
  stats_.backward_bytes_sent += 8 * (world_ - 1) + BytesToOthers(send_counts, rank_, record);

  // 4. Sum per id in sender rank order (records arrive packed in rank order), reduce, update.
  absl::flat_hash_map<int64_t, int64_t> acc_index;
  std::vector<int64_t> acc_ids;
  std::vector<float> acc;
  acc_index.reserve(received);
  for (int64_t k = 0; k < received; ++k) {
    const uint8_t* p = recv.data<uint8_t>() + k * record;
    int64_t id;
    std::memcpy(&id, p, 8);
    if (id < 0 || id >= options_.num_rows || OwnerOf(id, world_, options_.seed) != rank_) {
      return absl::FailedPreconditionError(absl::StrCat(
          "Backward: ", Where(), " was sent a gradient for id ", id, " that it does not own; ",
          "do all ranks create the table with the same num_rows and seed?"));
    }
    auto [it, inserted] = acc_index.try_emplace(id, static_cast<int64_t>(acc_ids.size()));
    if (inserted) {
      acc_ids.push_back(id);
      acc.resize(acc.size() + dim, 0.0f);
    }
    float* a = acc.data() + it->second * dim;
    for (int64_t j = 0; j < dim; ++j) {
      float g;
      std::memcpy(&g, p + 8 + 4 * j, 4);
      a[j] += g;
    }
  }
  const float divisor =
      options_.reduction == GradReduction::kMeanOverRanks ? static_cast<float>(world_) : 1.0f;
  const RowOptimizerOptions& o = options_.optimizer;
  for (size_t a_i = 0; a_i < acc_ids.size(); ++a_i) {
    const int64_t slot = Materialize(acc_ids[a_i]);
    float* row = rows_.data() + slot * dim;
    float* state = state_.data() + slot * StateSlots() * dim;
    const float* gsum = acc.data() + a_i * dim;
    for (int64_t j = 0; j < dim; ++j) {
      const float g = gsum[j] / divisor;
      if (o.kind == RowOptimizerKind::kSgd) {
        if (o.momentum != 0) {
          state[j] = o.momentum * state[j] + g;
          row[j] -= o.lr * state[j];
        } else {
          row[j] -= o.lr * g;
        }
      } else {
        state[j] += g * g;
        row[j] -= o.lr * g / (std::sqrt(state[j]) + o.adagrad_eps);
      }
    }
  }
  return absl::OkStatus();
}

absl::Status ShardedEmbedding::Save(const std::string& dir) {
  // Ids sorted, so a shard's bytes depend only on its rows.
  std::vector<std::pair<int64_t, int64_t>> order(slot_of_.begin(), slot_of_.end());
  std::sort(order.begin(), order.end());
  const int64_t m = static_cast<int64_t>(order.size());
  const int64_t dim = options_.dim;
  const int slots = StateSlots();
  absl::Status local = [&]() -> absl::Status {
    checkpoint::CheckpointState st;
    ASSIGN_OR_RETURN(Tensor ids, Tensor::Empty({m}, DType::kInt64));
    ASSIGN_OR_RETURN(Tensor rows, Tensor::Empty({m, dim}, DType::kFloat32));
    ASSIGN_OR_RETURN(Tensor state, Tensor::Empty({m, slots * dim}, DType::kFloat32));
    for (int64_t k = 0; k < m; ++k) {
      ids.data<int64_t>()[k] = order[k].first;
      std::copy_n(rows_.data() + order[k].second * dim, dim, rows.data<float>() + k * dim);
      std::copy_n(state_.data() + order[k].second * slots * dim, slots * dim,
                  state.data<float>() + k * slots * dim);
    }
    st.tensors = {{"ids", ids}, {"rows", rows}, {"state", state}};
    st.ints = {{"num_rows", options_.num_rows},
               {"dim", dim},
               {"seed", static_cast<int64_t>(options_.seed)},
               {"world_size", world_},
               {"rank", rank_},
               {"state_slots", slots}};
    st.strings = {{"name", options_.name},
                  {"hash", kHashName},
                  {"optimizer", KindName(options_.optimizer.kind)}};
    const std::string path = dir + "/" + ShardFileName(options_.name, rank_, world_);
    const std::string tmp = path + ".tmp";
    const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
      return absl::UnavailableError(
          absl::StrCat("Save of ", Where(), ": cannot create ", tmp, ": ", std::strerror(errno)));
    }
    absl::Status s = checkpoint::WriteCheckpointFile(fd, tmp, stats_.backwards, st);
    if (s.ok() && ::fsync(fd) != 0) {
      s = absl::UnavailableError(absl::StrCat("fsync of ", tmp, ": ", std::strerror(errno)));
    }
    ::close(fd);
    if (s.ok() && std::rename(tmp.c_str(), path.c_str()) != 0) {
      s = absl::UnavailableError(
          absl::StrCat("rename ", tmp, " -> ", path, ": ", std::strerror(errno)));
    }
    if (!s.ok()) std::remove(tmp.c_str());
    return s;
  }();
  // The barrier also tells every rank whether all shards were written.
  ASSIGN_OR_RETURN(Tensor failed, Tensor::Empty({1}, DType::kInt64));
  failed.data<int64_t>()[0] = local.ok() ? 0 : rank_ + 1;
  RETURN_IF_ERROR(Wait(comm_->Allreduce(failed, ReduceOp::kMax, Call()), "Save barrier"));
  RETURN_IF_ERROR(local);
  if (failed.data<int64_t>()[0] != 0) {
    return absl::UnavailableError(absl::StrCat("Save of ", Where(), ": rank ",
                                               failed.data<int64_t>()[0] - 1,
                                               " could not write its shard (its error says why)"));
  }
  return absl::OkStatus();
}

absl::Status ShardedEmbedding::Load(const std::string& dir) {
  // Find <name>-shard-<r>-of-<w>.ckpt files.
  const std::string prefix = options_.name + "-shard-";
  std::map<int, std::set<int>> ranks_by_world;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    const std::string file = entry.path().filename().string();
    if (file.rfind(prefix, 0) != 0 || file.size() < prefix.size() + 5 ||
        file.compare(file.size() - 5, 5, ".ckpt") != 0) {
      continue;
    }
    const std::string mid = file.substr(prefix.size(), file.size() - prefix.size() - 5);
    const size_t of = mid.find("-of-");
    int r = 0, w = 0;
    if (of == std::string::npos || !absl::SimpleAtoi(mid.substr(0, of), &r) ||
        !absl::SimpleAtoi(mid.substr(of + 4), &w) || w <= 0 || r < 0 || r >= w) {
      continue;
    }
    ranks_by_world[w].insert(r);
  }
  if (ec) {
    return absl::NotFoundError(
        absl::StrCat("Load of ", Where(), ": cannot list ", dir, ": ", ec.message()));
  }
  if (ranks_by_world.empty()) {
    return absl::NotFoundError(
        absl::StrCat("Load of ", Where(), ": no shard ", prefix, "*-of-*.ckpt in ", dir));
  }
  if (ranks_by_world.size() > 1) {
    std::vector<int> worlds;
    for (const auto& [w, r] : ranks_by_world) worlds.push_back(w);
    return absl::FailedPreconditionError(
        absl::StrCat("Load of ", Where(), ": ", dir, " holds shards saved at world sizes ",
                     absl::StrJoin(worlds, ", "), "; save each checkpoint to its own directory"));
  }
  const int old_world = ranks_by_world.begin()->first;
  for (int r = 0; r < old_world; ++r) {
    if (ranks_by_world.begin()->second.count(r) == 0) {
      return absl::NotFoundError(absl::StrCat("Load of ", Where(), ": shard ",
                                              ShardFileName(options_.name, r, old_world),
                                              " is missing from ", dir));
    }
  }

  const int64_t dim = options_.dim;
  const int slots = StateSlots();
  absl::flat_hash_map<int64_t, int64_t> slot_of;
  std::vector<float> rows, state;
  int64_t saved_step = -1;  // Backward count at the save: the same in every shard of one save
  for (int r = 0; r < old_world; ++r) {
    const std::string path = dir + "/" + ShardFileName(options_.name, r, old_world);
    ASSIGN_OR_RETURN(checkpoint::CheckpointFileContents c, checkpoint::ReadCheckpointFile(path));
    const checkpoint::CheckpointState& st = c.state;
    if (r > 0 && c.step != saved_step) {
      return absl::DataLossError(absl::StrCat(
          "Load of ", Where(), ": shards in ", dir, " come from different saves (shard 0 after ",
          saved_step, " backward steps, ", path, " after ", c.step,
          "); a save was interrupted: use an older checkpoint directory"));
    }
    saved_step = c.step;
    auto mismatch = [&](const std::string& field, const std::string& got, const std::string& want) {
      return absl::FailedPreconditionError(absl::StrCat(
          "Load of ", Where(), ": ", path, " is a checkpoint of another table: ", field, " is ",
          got, ", this table's is ", want));
    };
    auto int_of = [&](const std::string& key) -> absl::StatusOr<int64_t> {
      auto it = st.ints.find(key);
      if (it == st.ints.end()) {
        return absl::DataLossError(absl::StrCat(path, " has no '", key, "' (not a table shard)"));
      }
      return it->second;
    };
    auto string_of = [&](const std::string& key) -> std::string {
      auto it = st.strings.find(key);
      return it == st.strings.end() ? "(none)" : it->second;
    };
    if (string_of("name") != options_.name)
      return mismatch("name", string_of("name"), options_.name);
    if (string_of("hash") != kHashName) return mismatch("hash", string_of("hash"), kHashName);
    ASSIGN_OR_RETURN(int64_t num_rows, int_of("num_rows"));
    if (num_rows != options_.num_rows) {
      return mismatch("num_rows", absl::StrCat(num_rows), absl::StrCat(options_.num_rows));
    }
    ASSIGN_OR_RETURN(int64_t file_dim, int_of("dim"));
    if (file_dim != dim) return mismatch("dim", absl::StrCat(file_dim), absl::StrCat(dim));
    ASSIGN_OR_RETURN(int64_t seed, int_of("seed"));
    if (static_cast<uint64_t>(seed) != options_.seed) {
      return mismatch("seed", absl::StrCat(static_cast<uint64_t>(seed)),
                      absl::StrCat(options_.seed));
    }
    if (string_of("optimizer") != KindName(options_.optimizer.kind)) {
      return mismatch("optimizer", string_of("optimizer"), KindName(options_.optimizer.kind));
    }
    ASSIGN_OR_RETURN(int64_t file_slots, int_of("state_slots"));
    if (file_slots != slots) {
      return mismatch("optimizer state slots (momentum 0 or not)", absl::StrCat(file_slots),
                      absl::StrCat(slots));
    }
    ASSIGN_OR_RETURN(int64_t file_world, int_of("world_size"));
    ASSIGN_OR_RETURN(int64_t file_rank, int_of("rank"));
    if (file_world != old_world || file_rank != r) {
      return absl::DataLossError(absl::StrCat(path, " records rank ", file_rank, " of ", file_world,
                                              ", its name says ", r, " of ", old_world));
    }
    auto ids_it = st.tensors.find("ids");
    auto rows_it = st.tensors.find("rows");
    auto state_it = st.tensors.find("state");
    if (ids_it == st.tensors.end() || rows_it == st.tensors.end() || state_it == st.tensors.end()) {
      return absl::DataLossError(absl::StrCat(path, " lacks tensor ids, rows or state"));
    }
    const Tensor& ids = ids_it->second;
    const Tensor& file_rows = rows_it->second;
    const Tensor& file_state = state_it->second;
    const int64_t m = ids.numel();
    if (ids.dtype() != DType::kInt64 || ids.dim() != 1 || file_rows.dtype() != DType::kFloat32 ||
        file_rows.shape() != Shape{m, dim} || file_state.dtype() != DType::kFloat32 ||
        file_state.shape() != Shape{m, slots * dim}) {
      return absl::DataLossError(absl::StrCat(path, ": tensors ", ids.ToString(), ", ",
                                              file_rows.ToString(), ", ", file_state.ToString(),
                                              " do not fit ", m, " rows of dim ", dim));
    }
    for (int64_t k = 0; k < m; ++k) {
      const int64_t id = ids.data<int64_t>()[k];
      if (id < 0 || id >= options_.num_rows || OwnerOf(id, old_world, options_.seed) != r) {
        return absl::DataLossError(
            absl::StrCat(path, ": id ", id, " at ", k, " does not belong to that shard"));
      }
      if (OwnerOf(id, world_, options_.seed) != rank_) continue;
      slot_of.emplace(id, static_cast<int64_t>(slot_of.size()));
      rows.insert(rows.end(), file_rows.data<float>() + k * dim,
                  file_rows.data<float>() + (k + 1) * dim);
      state.insert(state.end(), file_state.data<float>() + k * slots * dim,
                   file_state.data<float>() + (k + 1) * slots * dim);
    }
  }
  slot_of_ = std::move(slot_of);
  rows_ = std::move(rows);
  state_ = std::move(state);
  stats_.backwards = saved_step;  // later saves go on counting from the loaded one
  return absl::OkStatus();
}

}  // namespace paddle
