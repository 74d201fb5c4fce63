// The Reducer's bucket bookkeeping, launch order, unused-parameter agreement and rebuild. See the
// notes in reducer.h.
#include "paddle/parallel/reducer/reducer.h"

#include <pthread.h>

#include <algorithm>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "paddle/core/logging.h"
#include "paddle/core/settings.h"
#include "paddle/core/status.h"
#include "paddle/parallel/reducer/device_memory.h"
#include "paddle/parallel/reducer/sparse_exchange.h"

namespace paddle {

using reducer_internal::Convert;
using reducer_internal::CopyValues;
using reducer_internal::EmptyOn;
using reducer_internal::ToCommDevice;
using reducer_internal::ToHost;
using reducer_internal::ZerosOn;

struct Reducer::Bucket {
  DType dtype = DType::kFloat32;
  std::vector<int64_t> params;
  Tensor flat;  // the gradients, laid out back to back
  Tensor wire;  // what is allreduced: `flat`, or its 16-bit copy (Note [Gradient compression])
  int pending = 0;
  std::shared_ptr<Work> work;
  absl::Time launched;
};

absl::string_view CompressionName(Compression compression) {
  switch (compression) {
    case Compression::kNone:
      return "none";
    case Compression::kFp16:
      return "fp16";
    case Compression::kBf16:
      return "bf16";
  }
  return "invalid";
}

absl::StatusOr<Compression> ParseCompression(absl::string_view name) {
  for (Compression c : {Compression::kNone, Compression::kFp16, Compression::kBf16}) {
    if (name == CompressionName(c)) return c;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown gradient compression '", name, "'; use none, fp16 or bf16"));
}

double ReducerStats::CommWaitFraction() const {
  if (iteration_time <= absl::ZeroDuration()) return 0.0;
  return absl::FDivDuration(comm_wait_time, iteration_time);
}

absl::StatusOr<std::unique_ptr<Reducer>> Reducer::Create(std::vector<NamedParameter> params,
                                                         Communicator* comm,
                                                         const ReducerOptions& options) {
  if (comm == nullptr) return absl::InvalidArgumentError("Reducer needs a communicator");
  ReducerOptions resolved = options;
  if (!resolved.stall_warning.has_value()) {
    ASSIGN_OR_RETURN(resolved.stall_warning, StallWarningFromEnv());
  }
  std::set<const void*> ids;
  std::vector<BucketParam> sizes;
  // Note [Sparse parameters]: set apart before anything looks at devices or buckets.
  std::vector<NamedParameter> sparse;
  for (auto it = params.begin(); it != params.end();) {
    if (!it->second.sparse()) {
      ++it;
      continue;
    }
    const autograd::Variable& var = it->second;
    if (!var.is_leaf() || !var.requires_grad() || var.data().dim() != 2 ||
        !var.data().device().is_cpu() || !IsFloatingPoint(var.data().dtype())) {
      return absl::InvalidArgumentError(absl::StrCat(
          "sparse parameter '", it->first, "' is ", var.data().ToString(),
          "; sparse gradients need a 2-D floating-point CPU leaf that requires a gradient"));
    }
    if (!ids.insert(var.id()).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("parameter '", it->first, "' is passed to the Reducer twice"));
    }
    sparse.push_back(std::move(*it));
    it = params.erase(it);
  }
  // Note [Reducer devices]: every parameter on one device, the buckets' device.
  const Device device = params.empty() ? Device::Cpu() : params.front().second.data().device();
  for (const auto& [name, var] : params) {
    if (var.defined() && var.data().device() != device) {
      return absl::InvalidArgumentError(
          absl::StrCat("parameter '", name, "' is ", var.data().ToString(), " but parameter '",
                       params.front().first, "' is on ", device.ToString(),
                       "; the Reducer needs every parameter on one device (move the whole model)"));
    }
    if (!var.defined() || !var.is_leaf() || !var.requires_grad()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "parameter '", name, "' must be a defined leaf Variable that requires a gradient"));
    }
    if (!IsFloatingPoint(var.data().dtype())) {
      return absl::InvalidArgumentError(absl::StrCat("parameter '", name, "' is ",
                                                     DTypeName(var.data().dtype()),
                                                     "; gradients need a floating-point dtype"));
    }
    if (!ids.insert(var.id()).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("parameter '", name, "' is passed to the Reducer twice"));
    }
    sizes.push_back({static_cast<int64_t>(var.data().nbytes()), var.data().dtype()});
  }
  ASSIGN_OR_RETURN(BucketLayout layout,
                   AssignBuckets(sizes, {options.first_bucket_bytes, options.bucket_bytes}));
  std::unique_ptr<Reducer> reducer(new Reducer(std::move(params), comm, std::move(resolved)));
  reducer->device_ = device;
  reducer->sparse_params_ = std::move(sparse);
  RETURN_IF_ERROR(reducer->Build(layout));
  for (int64_t i = 0; i < static_cast<int64_t>(reducer->params_.size()); ++i) {
    Reducer* self = reducer.get();
    reducer->params_[i].hook = reducer->params_[i].var.AddGradReadyHook(
        [self, i](const autograd::Variable&) { self->OnGradReady(i); });
  }
  if (*reducer->options_.stall_warning > absl::ZeroDuration()) {
    reducer->stall_thread_ = std::thread([self = reducer.get()] { self->WatchForStalls(); });
  }
  return reducer;
}

Reducer::Reducer(std::vector<NamedParameter> params, Communicator* comm, ReducerOptions options)
    : comm_(comm), options_(std::move(options)) {
  for (NamedParameter& entry : params) {
    Param p;
    p.name = std::move(entry.first);
    p.var = std::move(entry.second);
    params_.push_back(std::move(p));
  }
  ready_.assign(params_.size(), false);
  used_.assign(params_.size(), false);
}

Reducer::~Reducer() {
  for (Param& p : params_) p.var.RemoveGradReadyHook(p.hook);
  if (stall_thread_.joinable()) {
    {
      std::lock_guard<std::mutex> lock(stall_mu_);
      stall_stop_ = true;
    }
    stall_cv_.notify_one();
    stall_thread_.join();
  }
}

// Lays out fresh buckets and points every gradient into them, keeping existing gradient values.
absl::Status Reducer::Build(const BucketLayout& layout) {
  std::vector<std::unique_ptr<Bucket>> buckets;
  for (size_t b = 0; b < layout.size(); ++b) {
    auto bucket = std::make_unique<Bucket>();
    bucket->params = layout[b];
    bucket->dtype = params_[layout[b].front()].var.data().dtype();
    int64_t numel = 0;
    for (int64_t index : layout[b]) numel += params_[index].var.data().numel();
    ASSIGN_OR_RETURN(bucket->flat, ZerosOn(numel, bucket->dtype, device_));
    bucket->wire = bucket->flat;
    if (options_.compression != Compression::kNone && bucket->dtype == DType::kFloat32) {
      const DType half =
          options_.compression == Compression::kFp16 ? DType::kFloat16 : DType::kBFloat16;
      ASSIGN_OR_RETURN(bucket->wire, EmptyOn(numel, half, device_));
    }
    int64_t offset = 0;
    for (int64_t index : layout[b]) {
      Param& p = params_[index];
      const int64_t n = p.var.data().numel();
      ASSIGN_OR_RETURN(Tensor slice, bucket->flat.Slice(0, offset, offset + n));
      ASSIGN_OR_RETURN(Tensor view, slice.View(p.var.shape()));
      if (p.var.grad().defined()) RETURN_IF_ERROR(CopyValues(p.var.grad(), view));
      RETURN_IF_ERROR(p.var.set_grad(view));
      p.bucket = static_cast<int>(b);
      p.offset = offset;
      offset += n;
    }
    buckets.push_back(std::move(bucket));
  }
  buckets_ = std::move(buckets);
  return absl::OkStatus();
}

absl::Status Reducer::PrepareForBackward() {
  // Allreduces left in flight by a failed iteration still write into the buckets: let them end
  // (each is bounded by its collective timeout). Their status was reported then.
  for (auto& bucket : buckets_) {
    if (bucket->work != nullptr) bucket->work->Wait().IgnoreError();
    bucket->work = nullptr;
  }
  if (!hook_error_.ok()) {  // a gradient became ready outside an iteration
    return std::exchange(hook_error_, absl::OkStatus());
  }
  std::fill(ready_.begin(), ready_.end(), false);
  for (auto& bucket : buckets_) bucket->pending = static_cast<int>(bucket->params.size());
  next_launch_ = 0;
  if (!stats_.rebuilt) order_.clear();
  prepared_ = true;
  prepared_at_ = absl::Now();
  return absl::OkStatus();
}

void Reducer::OnGradReady(int64_t index) {
  used_[index] = true;
  if (!sync_) return;
  if (!prepared_) {
    hook_error_ = absl::FailedPreconditionError(
        absl::StrCat("the gradient of '", params_[index].name,
                     "' became ready outside PrepareForBackward/FinalizeBackward"));
    return;
  }
  if (ready_[index]) {
    hook_error_ = absl::FailedPreconditionError(
        absl::StrCat("the gradient of '", params_[index].name,
                     "' became ready twice in one iteration; call PrepareForBackward before "
                     "each backward pass"));
    return;
  }
  ready_[index] = true;
  if (!stats_.rebuilt) order_.push_back(index);
  MarkBucketReady(params_[index].bucket);
}

void Reducer::MarkBucketReady(int bucket) {
  --buckets_[bucket]->pending;
  // Note [Unused parameters]: with find_unused_parameters, launching waits for the agreement.
  if (!options_.find_unused_parameters) LaunchReadyBuckets();
}

// Note [Bucket order].
void Reducer::LaunchReadyBuckets() {
  while (next_launch_ < num_buckets() && buckets_[next_launch_]->pending == 0) {
    Bucket& bucket = *buckets_[next_launch_];
    if (bucket.wire.data() != bucket.flat.data()) {
      // On CUDA enqueued before the collective on the same (op) stream, which the NCCL stream
      // waits for. Fails only on a CUDA launch error: the collective then still runs (every rank
      // must issue it) and the error is reported by FinalizeBackward.
      const absl::Status converted = Convert(bucket.flat, bucket.wire);
      if (!converted.ok() && hook_error_.ok()) hook_error_ = converted;
    }
    bucket.launched = absl::Now();
    bucket.work = comm_->Allreduce(bucket.wire, ReduceOp::kAvg, CallOptions{options_.timeout});
    ++next_launch_;
  }
}

absl::Status Reducer::FinalizeBackward() {
  if (!prepared_) {
    return absl::FailedPreconditionError(
        "FinalizeBackward without PrepareForBackward before the backward pass");
  }
  prepared_ = false;
  if (!hook_error_.ok()) {
    return std::exchange(hook_error_, absl::OkStatus());
  }
  if (!sync_) return absl::OkStatus();

  const absl::Time comm_start = absl::Now();
  if (options_.find_unused_parameters) {
    RETURN_IF_ERROR(CheckUnused());
  } else {
    std::vector<std::string> missing;
    for (size_t i = 0; i < params_.size(); ++i) {
      if (!ready_[i]) missing.push_back(params_[i].name);
    }
    if (!missing.empty()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "rank ", comm_->rank(), "/", comm_->world_size(), ": ", missing.size(),
          " parameter(s) got no gradient in this backward pass: ", absl::StrJoin(missing, ", "),
          "; if the model skips them on purpose, set find_unused_parameters=true"));
    }
  }
  LaunchReadyBuckets();
  PADDLE_CHECK(next_launch_ == num_buckets()) << "bucket " << next_launch_ << " not launched";
  const absl::Status waited = WaitAll();
  stats_.comm_wait_time += absl::Now() - comm_start;
  RETURN_IF_ERROR(waited);
  if (!hook_error_.ok()) return std::exchange(hook_error_, absl::OkStatus());
  // Note [Sparse parameters]: after every bucket, so all ranks issue them in the same place.
  if (!sparse_params_.empty()) {
    const absl::Time sparse_start = absl::Now();
    absl::StatusOr<SparseExchangeStats> sparse =
        ExchangeSparseGradients(sparse_params_, comm_, options_.timeout);
    stats_.comm_wait_time += absl::Now() - sparse_start;
    if (!sparse.ok()) return sparse.status();
    stats_.sparse_bytes_sent += sparse->bytes_sent;
    stats_.sparse_entries += sparse->entries;
    stats_.sparse_dense_fallbacks += sparse->dense_fallbacks;
  }

  std::fill(used_.begin(), used_.end(), false);
  ++stats_.synced_iterations;
  stats_.iteration_time += absl::Now() - prepared_at_;
  if (!stats_.rebuilt) RETURN_IF_ERROR(Rebuild());
  return absl::OkStatus();
}

// Note [Unused parameters].
absl::Status Reducer::CheckUnused() {
  const int64_t n = static_cast<int64_t>(params_.size());
  const int world = comm_->world_size();
  if (n > 0) {
    ASSIGN_OR_RETURN(Tensor mine, Tensor::Empty({n}, DType::kUInt8));
    ASSIGN_OR_RETURN(Tensor all, Tensor::Empty({n * world}, DType::kUInt8));
    for (int64_t i = 0; i < n; ++i) mine.data<uint8_t>()[i] = used_[i] ? 1 : 0;
    // Note [Reducer devices]: through the buckets' device (NCCL takes CUDA tensors only).
    ASSIGN_OR_RETURN(Tensor mine_dev, ToCommDevice(mine, device_));
    ASSIGN_OR_RETURN(Tensor all_dev, ToCommDevice(all, device_));
    std::shared_ptr<Work> work = comm_->Allgather(mine_dev, all_dev, CallOptions{options_.timeout});
    RETURN_IF_ERROR(Annotate(work->Wait(), "agreeing on unused parameters (allgather)"));
    ASSIGN_OR_RETURN(all, ToHost(all_dev));
    std::vector<std::string> disagreements;
    const uint8_t* used = all.data<uint8_t>();
    for (int64_t i = 0; i < n; ++i) {
      std::vector<int> yes, no;
      for (int r = 0; r < world; ++r) (used[r * n + i] ? yes : no).push_back(r);
      if (!yes.empty() && !no.empty()) {
        disagreements.push_back(absl::StrCat("'", params_[i].name, "' (used on ranks ",
                                             absl::StrJoin(yes, ","), ", unused on ranks ",
                                             absl::StrJoin(no, ","), ")"));
      }
    }
    if (!disagreements.empty()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "rank ", comm_->rank(), "/", world,
          ": ranks disagree on which parameters were used in "
          "this iteration: ",
          absl::StrJoin(disagreements, ", "), "; every rank must run the same parts of the model"));
    }
  }
  for (int64_t i = 0; i < n; ++i) {
    if (ready_[i]) continue;
    // Used in an earlier no-sync pass: its accumulated gradient stays. Unused: zero, so the
    // average over ranks is the other ranks' (equally zero) contribution.
    if (!used_[i]) params_[i].var.ZeroGrad();
    MarkBucketReady(params_[i].bucket);
  }
  return absl::OkStatus();
}

// Each wait is bounded by the allreduce's own collective timeout (Note [Stall inspector]).
absl::Status Reducer::WaitAll() {
  for (int b = 0; b < num_buckets(); ++b) {
    Bucket& bucket = *buckets_[b];
    const absl::Status status = WaitBucket(b);
    if (!status.ok()) {
      return ErrorContext()
          .Rank(comm_->rank(), comm_->world_size())
          .Op("allreduce", static_cast<int64_t>(bucket.work->seq()))
          .Bytes(static_cast<int64_t>(bucket.wire.nbytes()))
          .Wrap(Annotate(status, absl::StrCat("reducing gradient ", DescribeBucket(b))));
    }
    bucket.work = nullptr;
    if (bucket.wire.data() != bucket.flat.data()) {
      RETURN_IF_ERROR(Annotate(Convert(bucket.wire, bucket.flat),
                               absl::StrCat("decompressing ", DescribeBucket(b))));
    }
    stats_.bytes_reduced += static_cast<int64_t>(bucket.wire.nbytes());
    if (callback_) {
      callback_({b, static_cast<int64_t>(bucket.wire.nbytes()), bucket.launched, absl::Now()});
    }
  }
  return absl::OkStatus();
}

// Note [Stall inspector]
// A collective that never completes fails after its timeout (minutes by default), but the usual
// cause is not the network: one rank is slower, stuck in its data loader, or took another code
// path and never reaches this bucket. So while the training thread waits for a bucket, every
// stall_warning (PADDLE_STALL_WARNING_S) the reducer logs a warning naming the bucket, its
// parameters and the iteration. It also writes "stall/<iteration>/<rank>" to the group's store the
// first time, and from the second warning on lists the ranks with no such key: every rank waiting
// in this iteration has written its key by then (it waited one interval too), so the ranks still
// missing have not reached the gradient allreduce of this iteration at all. Nothing is written to
// the store while training runs normally.
//
// The warnings come from a thread of the reducer's own, not from the waiting thread, because the
// waiting thread waits with no timeout: Note [Waiter runs the operation] in
// paddle/collective/backends/common/work_queue.h then lets it run the allreduce itself instead of
// handing it to the communicator's thread and back (two cross-CPU wake-ups per bucket; see
// docs/performance-notes.md, "Reducer waits"). The wait is still bounded: by the allreduce's own
// collective timeout. The training thread only notes, under stall_mu_, which bucket it waits for
// and since when; the inspector's thread looks every quarter interval (no wake-up per bucket:
// on a virtual machine each one can be a hypervisor exit), so the first warning of a wait comes
// one to one and a quarter intervals into it.
absl::StatusOr<absl::Duration> StallWarningFromEnv() {
  ASSIGN_OR_RETURN(std::optional<absl::Duration> warning, SecondsSetting("PADDLE_STALL_WARNING_S"));
  return warning.value_or(absl::Seconds(60));
}

absl::Status Reducer::WaitBucket(int b) {
  if (stall_thread_.joinable()) {
    std::lock_guard<std::mutex> lock(stall_mu_);
    stall_bucket_ = b;
    stall_iteration_ = stats_.synced_iterations;
    stall_since_ = absl::Now();
    ++stall_wait_;
  }
  absl::Status status = buckets_[b]->work->Wait();
  if (stall_thread_.joinable()) {
    std::lock_guard<std::mutex> lock(stall_mu_);
    stall_bucket_ = -1;
  }
  return status;
}

void Reducer::WatchForStalls() {
  pthread_setname_np(pthread_self(), "paddle-stall");  // how it shows in top and gdb
  const absl::Duration interval = *options_.stall_warning;
  uint64_t wait = 0;  // the wait the reports count belongs to
  int reports = 0;
  std::unique_lock<std::mutex> lock(stall_mu_);
  while (!stall_stop_) {
    absl::Time wake = absl::Now() + interval / 4;
    if (stall_bucket_ >= 0) {
      if (stall_wait_ != wait) {
        wait = stall_wait_;
        reports = 0;
      }
      const absl::Time due = stall_since_ + interval * (reports + 1);
      const absl::Time now = absl::Now();
      if (now >= due) {
        // Buckets are only rebuilt after the wait ends, which needs this lock: the description is
        // safe to take here. The store is asked without the lock.
        const int b = stall_bucket_;
        const std::string bucket = DescribeBucket(b);
        const int64_t iteration = stall_iteration_;
        const absl::Duration waited = now - stall_since_;
        const bool compare = reports++ > 0;
        lock.unlock();
        std::string report = ReportStall(b, bucket, iteration, waited, compare);
        PADDLE_LOG(WARN, TRAIN) << "stall: " << report;
        lock.lock();
        last_stall_report_ = std::move(report);
        continue;
      }
      wake = std::min(wake, due);
    }
    stall_cv_.wait_for(
        lock, absl::ToChronoNanoseconds(std::max(wake - absl::Now(), absl::Microseconds(100))));
  }
}

std::string Reducer::ReportStall(int b, const std::string& bucket, int64_t iteration,
                                 absl::Duration waited, bool compare) const {
  const int rank = comm_->rank();
  std::string peers;
  if (options_.store != nullptr) {
    const std::string prefix = absl::StrCat("stall/", iteration, "/");
    if (!compare) {
      options_.store->Set(absl::StrCat(prefix, rank), absl::StrCat(b)).IgnoreError();
    } else {
      std::vector<int> missing;
      for (int r = 0; r < comm_->world_size(); ++r) {
        absl::StatusOr<bool> there = options_.store->Check({absl::StrCat(prefix, r)});
        if (there.ok() && !*there) missing.push_back(r);
      }
      peers = missing.empty()
                  ? "; every rank is waiting in this iteration's gradient allreduce (a slow "
                    "network, or a peer stuck inside it)"
                  : absl::StrCat(
                        "; ranks that have not reached this iteration's gradient "
                        "allreduce: ",
                        absl::StrJoin(missing, ", "),
                        " (slower, stuck before or in their backward pass, or dead)");
    }
  }
  return absl::StrCat("rank ", rank, "/", comm_->world_size(), ": gradient ", bucket,
                      " of iteration ", iteration, " not reduced after ",
                      absl::FormatDuration(waited), peers);
}

std::string Reducer::last_stall_report() const {
  std::lock_guard<std::mutex> lock(stall_mu_);
  return last_stall_report_;
}

// Note [Bucket rebuild].
absl::Status Reducer::Rebuild() {
  const int64_t n = static_cast<int64_t>(params_.size());
  std::vector<bool> seen(params_.size(), false);
  for (int64_t index : order_) seen[index] = true;
  for (int64_t i = n - 1; i >= 0; --i) {
    if (!seen[i]) order_.push_back(i);
  }
  ASSIGN_OR_RETURN(Tensor order, Tensor::Empty({n}, DType::kInt64));
  std::copy(order_.begin(), order_.end(), order.data<int64_t>());
  if (n > 0) {
    ASSIGN_OR_RETURN(Tensor order_dev, ToCommDevice(order, device_));
    RETURN_IF_ERROR(Annotate(comm_->Broadcast(order_dev, 0, CallOptions{options_.timeout})->Wait(),
                             "broadcasting rank 0's gradient order for the bucket rebuild"));
    ASSIGN_OR_RETURN(order, ToHost(order_dev));
  }
  std::vector<BucketParam> sizes;
  for (const Param& p : params_) {
    sizes.push_back({static_cast<int64_t>(p.var.data().nbytes()), p.var.data().dtype()});
  }
  ASSIGN_OR_RETURN(BucketLayout layout,
                   AssignBucketsInOrder(sizes, absl::MakeConstSpan(order.data<int64_t>(), n),
                                        {options_.first_bucket_bytes, options_.bucket_bytes}));
  stats_.rebuilt = true;
  order_.clear();
  bool same = static_cast<int>(layout.size()) == num_buckets();
  for (size_t b = 0; same && b < layout.size(); ++b) same = layout[b] == buckets_[b]->params;
  if (same) return absl::OkStatus();
  PADDLE_LOG(INFO, TRAIN) << "rebuilt gradient buckets from the observed order:\n"
                          << DescribeLayout();
  return Build(layout);
}

std::vector<std::vector<std::string>> Reducer::BucketNames() const {
  std::vector<std::vector<std::string>> names;
  for (const auto& bucket : buckets_) {
    names.emplace_back();
    for (int64_t index : bucket->params) names.back().push_back(params_[index].name);
  }
  return names;
}

std::string Reducer::DescribeBucket(int b) const {
  const Bucket& bucket = *buckets_[b];
  std::vector<std::string> names;
  for (int64_t index : bucket.params) {
    if (names.size() == 8) {
      names.emplace_back("...");
      break;
    }
    names.push_back(params_[index].name);
  }
  return absl::StrCat("bucket ", b, " of ", num_buckets(), " (", DTypeName(bucket.dtype), ", ",
                      bucket.params.size(), " params, ", bucket.wire.nbytes(), " bytes [",
                      absl::StrJoin(names, ", "), "])");
}

std::string Reducer::DescribeLayout() const {
  std::string out;
  for (int b = 0; b < num_buckets(); ++b) absl::StrAppend(&out, DescribeBucket(b), "\n");
  return out;
}

}  // namespace paddle
