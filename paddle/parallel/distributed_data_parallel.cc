// Model agreement, the initial broadcast, and the backward wrapper of DistributedDataParallel.
#include "paddle/parallel/distributed_data_parallel.h"

#include <cstring>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "paddle/collective/algorithms/allreduce_cost_model.h"
#include "paddle/core/fnv1a.h"
#include "paddle/core/settings.h"
#include "paddle/core/status.h"
#include "paddle/parallel/reducer/device_memory.h"

namespace paddle {
namespace {

constexpr int kMaxListedDifferences = 5;
constexpr int64_t kDefaultFirstBucketBytes = int64_t{1} << 20;
constexpr int64_t kDefaultBucketBytes = int64_t{25} << 20;

// Note [Tuned bucket caps]: a cap DdpOptions leaves 0 comes from the "bucket" line of the
// PADDLE_TUNING_PARAMS file (`tools/simulate step --search --emit=FILE`: the caps the step model
// predicts fastest for a timeline of this model on this cluster), else from the defaults above.
// A cap the caller set always wins. Each rank reads its own file, so the resolved caps join the
// model description that every rank compares (CheckSameModel): ranks with different files fail
// at once, naming the caps, instead of laying out different buckets.
absl::StatusOr<TunedBucketCaps> ResolveBucketCaps(const DdpOptions& options) {
  TunedBucketCaps caps{options.first_bucket_bytes, options.bucket_bytes};
  if (caps.first_bytes < 0 || caps.bytes < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "DdpOptions: bucket caps must be >= 0 (0: the default), got first_bucket_bytes=",
        caps.first_bytes, " and bucket_bytes=", caps.bytes));
  }
  std::optional<TunedBucketCaps> tuned;
  if (caps.first_bytes == 0 || caps.bytes == 0) {
    if (std::optional<std::string> path = StringSetting("PADDLE_TUNING_PARAMS")) {
      absl::StatusOr<TuningParams> params = TuningParams::Load(*path);
      if (!params.ok()) return Annotate(params.status(), "PADDLE_TUNING_PARAMS");
      tuned = params->buckets();
    }
  }
  if (caps.first_bytes == 0)
    caps.first_bytes = tuned ? tuned->first_bytes : kDefaultFirstBucketBytes;
  if (caps.bytes == 0) caps.bytes = tuned ? tuned->bytes : kDefaultBucketBytes;
  return caps;
}

// One line per parameter and buffer, in order.
std::vector<std::string> DescribeModel(const nn::Module& module) {
  std::vector<std::string> lines;
  auto add = [&](const char* kind, const std::string& name, const Tensor& t) {
    lines.push_back(absl::StrCat(kind, " ", name, " ", DTypeName(t.dtype()), " [",
                                 absl::StrJoin(t.shape(), ", "), "]"));
  };
  // A sparse parameter is exchanged outside the buckets (Note [Sparse parameters]): ranks must
  // agree on which ones are, or their collectives would not line up.
  for (const auto& [name, var] : module.NamedParameters()) {
    add(var.sparse() ? "sparse parameter" : "parameter", name, var.data());
  }
  for (const auto& [name, var] : module.NamedBuffers()) add("buffer", name, var.data());
  return lines;
}

absl::Status WaitFor(const std::shared_ptr<Work>& work, const std::string& what) {
  return Annotate(work->Wait(), what);
}

// Allgather(v) of host tensors through `device` (Note [DDP devices]).
absl::Status HostAllgather(Communicator* comm, const Tensor& in, Tensor& out, Device device,
                           CallOptions call, const std::string& what,
                           const std::vector<int64_t>* counts = nullptr) {
  ASSIGN_OR_RETURN(Tensor in_dev, reducer_internal::ToCommDevice(in, device));
  ASSIGN_OR_RETURN(Tensor out_dev, reducer_internal::ToCommDevice(out, device));
  std::shared_ptr<Work> work = counts == nullptr ? comm->Allgather(in_dev, out_dev, call)
                                                 : comm->Allgatherv(in_dev, out_dev, *counts, call);
  RETURN_IF_ERROR(WaitFor(work, what));
  if (out_dev.data() == out.data()) return absl::OkStatus();
  ASSIGN_OR_RETURN(Tensor host, reducer_internal::ToHost(out_dev));
  return out.CopyFrom(host);
}

// Note [Model agreement].
absl::Status CheckSameModel(const std::vector<std::string>& lines, Communicator* comm,
                            Device device, CallOptions call) {
  const int world = comm->world_size();
  const std::string text = absl::StrJoin(lines, "\n");
  ASSIGN_OR_RETURN(Tensor hash, Tensor::Empty({1}, DType::kInt64));
  ASSIGN_OR_RETURN(Tensor hashes, Tensor::Empty({world}, DType::kInt64));
  hash.data<int64_t>()[0] = static_cast<int64_t>(Fnv1a(text));
  RETURN_IF_ERROR(HostAllgather(comm, hash, hashes, device, call, "comparing model hashes"));
  bool same = true;
  for (int r = 1; r < world; ++r)
    same = same && hashes.data<int64_t>()[r] == hashes.data<int64_t>()[0];
  if (same) return absl::OkStatus();

  // Every rank takes this path (all saw the same hashes): gather the descriptions themselves.
  ASSIGN_OR_RETURN(Tensor length, Tensor::Empty({1}, DType::kInt64));
  ASSIGN_OR_RETURN(Tensor lengths, Tensor::Empty({world}, DType::kInt64));
  length.data<int64_t>()[0] = static_cast<int64_t>(text.size());
  RETURN_IF_ERROR(
      HostAllgather(comm, length, lengths, device, call, "gathering model description lengths"));
  std::vector<int64_t> counts(lengths.data<int64_t>(), lengths.data<int64_t>() + world);
  int64_t total = 0;
  for (int64_t c : counts) total += c;
  ASSIGN_OR_RETURN(Tensor mine, Tensor::Empty({static_cast<int64_t>(text.size())}, DType::kUInt8));
  ASSIGN_OR_RETURN(Tensor all, Tensor::Empty({total}, DType::kUInt8));
  if (!text.empty()) std::memcpy(mine.data(), text.data(), text.size());
  RETURN_IF_ERROR(
      HostAllgather(comm, mine, all, device, call, "gathering model descriptions", &counts));
  std::vector<std::vector<std::string>> per_rank;
  int64_t offset = 0;
  for (int r = 0; r < world; ++r) {
    std::string s(static_cast<const char*>(all.data()) + offset, counts[r]);
    offset += counts[r];
    per_rank.push_back(s.empty() ? std::vector<std::string>{}
                                 : std::vector<std::string>(absl::StrSplit(s, '\n')));
  }
  std::vector<std::string> differences;
  for (int r = 1; r < world && static_cast<int>(differences.size()) < kMaxListedDifferences; ++r) {
    const auto& a = per_rank[0];
    const auto& b = per_rank[r];
    for (size_t i = 0; i < std::max(a.size(), b.size()); ++i) {
      const std::string left = i < a.size() ? a[i] : "nothing";
      const std::string right = i < b.size() ? b[i] : "nothing";
      if (left == right) continue;
      differences.push_back(
          absl::StrCat("entry ", i, ": rank 0 has ", left, ", rank ", r, " has ", right));
      break;  // later entries of this rank are usually shifted copies of the first difference
    }
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "rank ", comm->rank(), "/", world, ": the ranks built different models (", per_rank[0].size(),
      " parameters and buffers on rank 0); first differences: ", absl::StrJoin(differences, "; "),
      ". Every rank must construct the same model"));
}

absl::Status BroadcastFromRankZero(const nn::Module& module, Communicator* comm, CallOptions call) {
  std::vector<std::pair<std::string, autograd::Variable>> entries = module.NamedParameters();
  for (auto& entry : module.NamedBuffers()) entries.push_back(entry);
  std::vector<std::shared_ptr<Work>> works;
  std::vector<Tensor> staging;  // contiguous copies of non-contiguous values
  for (const auto& [name, var] : entries) {
    Tensor value = var.data();
    if (!value.is_contiguous()) {
      ASSIGN_OR_RETURN(value, value.Contiguous());
    }
    staging.push_back(value);
    works.push_back(comm->Broadcast(value, 0, call));
  }
  for (size_t i = 0; i < works.size(); ++i) {
    RETURN_IF_ERROR(
        WaitFor(works[i], absl::StrCat("broadcasting '", entries[i].first, "' from rank 0")));
    Tensor value = entries[i].second.data();
    if (staging[i].data() != value.data()) RETURN_IF_ERROR(value.CopyFrom(staging[i]));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<DistributedDataParallel>> DistributedDataParallel::Create(
    std::shared_ptr<nn::Module> module, Communicator* comm, const DdpOptions& options) {
  if (module == nullptr || comm == nullptr) {
    return absl::InvalidArgumentError("DistributedDataParallel needs a module and a communicator");
  }
  ASSIGN_OR_RETURN(const TunedBucketCaps caps, ResolveBucketCaps(options));
  ReducerOptions reducer_options;
  reducer_options.first_bucket_bytes = caps.first_bytes;
  reducer_options.bucket_bytes = caps.bytes;
  ASSIGN_OR_RETURN(reducer_options.compression, ParseCompression(options.compression));
  reducer_options.find_unused_parameters = options.find_unused_parameters;
  reducer_options.timeout = options.timeout;
  reducer_options.stall_warning = options.stall_warning;
  // Read before the first collective: a malformed PADDLE_STALL_WARNING_S fails at once.
  if (!reducer_options.stall_warning.has_value()) {
    ASSIGN_OR_RETURN(reducer_options.stall_warning, StallWarningFromEnv());
  }
  reducer_options.store = options.store;
  const CallOptions call{options.timeout};

  // Note [DDP devices]: the model's device carries the agreement's small collectives too.
  std::vector<std::string> description = DescribeModel(*module);
  description.push_back(absl::StrCat("bucket caps (DdpOptions, else PADDLE_TUNING_PARAMS) ",
                                     caps.first_bytes, " bytes first, then ", caps.bytes));
  RETURN_IF_ERROR(CheckSameModel(description, comm, module->device(), call));
  RETURN_IF_ERROR(BroadcastFromRankZero(*module, comm, call));
  std::vector<Reducer::NamedParameter> params;
  for (auto& [name, var] : module->NamedParameters()) {
    if (var.requires_grad()) params.emplace_back(name, var);
  }
  ASSIGN_OR_RETURN(std::unique_ptr<Reducer> reducer,
                   Reducer::Create(std::move(params), comm, reducer_options));
  return std::unique_ptr<DistributedDataParallel>(
      new DistributedDataParallel(std::move(module), std::move(reducer)));
}

absl::StatusOr<autograd::Variable> DistributedDataParallel::Forward(const autograd::Variable& x) {
  return module_->Forward(x);
}

absl::Status DistributedDataParallel::Backward(const autograd::Variable& loss) {
  RETURN_IF_ERROR(reducer_->PrepareForBackward());
  // A failed backward pass skips the reduction (it would issue collectives the other ranks may
  // not); the next PrepareForBackward starts a clean iteration.
  RETURN_IF_ERROR(loss.Backward());
  return reducer_->FinalizeBackward();
}

}  // namespace paddle
