// ProcessGroupPaddle: c10d calls mapped onto Communicator calls (see process_group_paddle.h).
#include "python/torch_bindings/process_group_paddle.h"

#include <ATen/ATen.h>
#include <Python.h>

#include <algorithm>
#include <exception>
#include <stdexcept>
#include <utility>

#include "absl/strings/str_cat.h"
#include "paddle/collective/communicator.h"
#include "python/torch_bindings/torch_store.h"

namespace paddle::torch_ext {

// A c10d Work completed by the completion thread (Note [Torch work completion]). Its Future holds
// the output tensors, as gloo's does, so DDP's comm hooks can chain on it.
class WorkPaddle : public c10d::Work {
 public:
  WorkPaddle(int rank, c10d::OpType type, std::vector<at::Tensor> outputs)
      : c10d::Work(rank, type),
        outputs_(std::move(outputs)),
        future_(c10::make_intrusive<at::ivalue::Future>(
            c10::ListType::create(c10::TensorType::get()))) {}

  std::vector<at::Tensor> result() override { return outputs_; }
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }

  void Complete(std::exception_ptr error) {
    if (error) {
      future_->setError(error);
    } else {
      future_->markCompleted(c10::IValue(outputs_));
    }
    finish(error);
  }

 private:
  const std::vector<at::Tensor> outputs_;
  const c10::intrusive_ptr<at::ivalue::Future> future_;
};

namespace {

[[noreturn]] void Fail(const std::string& message) { throw std::runtime_error(message); }

std::string StatusText(const absl::Status& s) {
  return absl::StrCat(absl::StatusCodeToString(s.code()), ": ", s.message());
}

std::string Where(int rank, int size, absl::string_view op) {
  return absl::StrCat("ProcessGroupPaddle rank ", rank, "/", size, " ", op, ": ");
}

DType ToDType(const at::Tensor& t, const std::string& where) {
  switch (t.scalar_type()) {
    case at::kFloat:
      return DType::kFloat32;
    case at::kDouble:
      return DType::kFloat64;
    case at::kHalf:
      return DType::kFloat16;
    case at::kBFloat16:
      return DType::kBFloat16;
    case at::kChar:
      return DType::kInt8;
    case at::kByte:
      return DType::kUInt8;
    case at::kInt:
      return DType::kInt32;
    case at::kLong:
      return DType::kInt64;
    case at::kBool:
      return DType::kBool;
    default:
      Fail(absl::StrCat(where, "dtype ", c10::toString(t.scalar_type()),
                        " is not supported by backend 'paddle' (supported: float32, float64, "
                        "float16, bfloat16, int8, uint8, int32, int64, bool)"));
  }
}

void CheckCpu(const at::Tensor& t, const std::string& where) {
  if (!t.defined()) Fail(absl::StrCat(where, "tensor is undefined"));
  if (t.layout() != at::kStrided) Fail(absl::StrCat(where, "only dense tensors are supported"));
  if (!t.is_cpu()) {
    Fail(absl::StrCat(where, "tensor on ", t.device().str(),
                      ": backend 'paddle' takes CPU tensors only; use backend 'nccl' for CUDA "
                      "tensors or move the tensor to the CPU"));
  }
}

// `t` itself when it is contiguous, else a contiguous copy (Note [Torch tensor lifetime]).
at::Tensor Contig(const at::Tensor& t, const std::string& where) {
  CheckCpu(t, where);
  return t.is_contiguous() ? t : t.contiguous();
}

// A flat paddle::Tensor over contiguous `t`'s memory; holds `t` until the view is released.
Tensor View(const at::Tensor& t, const std::string& where) {
  absl::StatusOr<Tensor> view = Tensor::FromBlob(t.data_ptr(), {t.numel()}, ToDType(t, where),
                                                 Device::Cpu(), [keep = t](void*) {});
  if (!view.ok()) Fail(where + StatusText(view.status()));
  return *std::move(view);
}

// Copies `staged` back into `user` when they differ (a non-contiguous output).
std::function<void()> CopyBack(const at::Tensor& user, const at::Tensor& staged) {
  if (user.is_same(staged)) return {};
  return [user, staged]() mutable { user.copy_(staged); };
}

// `tensors` flattened into one contiguous tensor, in order; all must share a dtype.
at::Tensor Flatten(const std::vector<at::Tensor>& tensors, const std::string& where) {
  std::vector<at::Tensor> flat;
  flat.reserve(tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    CheckCpu(tensors[i], where);
    if (tensors[i].scalar_type() != tensors[0].scalar_type()) {
      Fail(absl::StrCat(where, "tensor ", i, " has dtype ", c10::toString(tensors[i].scalar_type()),
                        " but tensor 0 has ", c10::toString(tensors[0].scalar_type()),
                        "; all tensors of one call must share a dtype"));
    }
    flat.push_back(tensors[i].reshape({-1}));
  }
  return at::cat(flat);
}

// Copies consecutive slices of flat `buffer` into `tensors`.
void Unflatten(const at::Tensor& buffer, std::vector<at::Tensor>& tensors) {
  int64_t offset = 0;
  for (at::Tensor& t : tensors) {
    t.copy_(buffer.narrow(0, offset, t.numel()).view(t.sizes()));
    offset += t.numel();
  }
}

// Note [Bitwise reductions]: our reduction kernels have no bitwise ops, so BAND, BOR and BXOR
// (integer and bool tensors, as in gloo) gather every rank's buffer (Allgather) and fold the
// rows locally with torch's bitwise kernels when the gather completes. That moves world x the
// bytes of an allreduce: fine for the flags and masks these ops are used for, not for bulk data.
bool IsBitwise(const c10d::ReduceOp& op) {
  const auto type = static_cast<c10d::ReduceOp::RedOpType>(op);
  return type == c10d::ReduceOp::BAND || type == c10d::ReduceOp::BOR ||
         type == c10d::ReduceOp::BXOR;
}

const char* BitwiseName(const c10d::ReduceOp& op) {
  switch (static_cast<c10d::ReduceOp::RedOpType>(op)) {
    case c10d::ReduceOp::BAND:
      return "BAND";
    case c10d::ReduceOp::BOR:
      return "BOR";
    default:
      return "BXOR";
  }
}

// Throws unless `t` can take a bitwise reduction (integral or bool, as gloo requires).
void CheckBitwise(const c10d::ReduceOp& op, const at::Tensor& t, const std::string& where) {
  if (!at::isIntegralType(t.scalar_type(), /*includeBool=*/true)) {
    Fail(absl::StrCat(where, "cannot use ReduceOp.", BitwiseName(op), " with non-integral dtype ",
                      c10::toString(t.scalar_type()),
                      " (bitwise reductions take integer and bool tensors)"));
  }
}

// The element-wise `op` of the rows of `rows` ([world, n]), as a flat tensor of n elements.
at::Tensor FoldBitwise(const at::Tensor& rows, const c10d::ReduceOp& op) {
  at::Tensor acc = rows[0].clone();
  for (int64_t r = 1; r < rows.size(0); ++r) {
    switch (static_cast<c10d::ReduceOp::RedOpType>(op)) {
      case c10d::ReduceOp::BAND:
        acc.bitwise_and_(rows[r]);
        break;
      case c10d::ReduceOp::BOR:
        acc.bitwise_or_(rows[r]);
        break;
      default:
        acc.bitwise_xor_(rows[r]);
        break;
    }
  }
  return acc;
}

ReduceOp ToReduceOp(const c10d::ReduceOp& op, const std::string& where) {
  switch (static_cast<c10d::ReduceOp::RedOpType>(op)) {
    case c10d::ReduceOp::SUM:
      return ReduceOp::kSum;
    case c10d::ReduceOp::AVG:
      return ReduceOp::kAvg;
    case c10d::ReduceOp::PRODUCT:
      return ReduceOp::kProd;
    case c10d::ReduceOp::MIN:
      return ReduceOp::kMin;
    case c10d::ReduceOp::MAX:
      return ReduceOp::kMax;
    default:
      Fail(absl::StrCat(where, "ReduceOp ", static_cast<int>(op.op_),
                        " (PREMUL_SUM) is not supported by backend 'paddle' (supported: SUM, AVG, "
                        "PRODUCT, MIN, MAX, and BAND, BOR, BXOR on integer and bool tensors)"));
  }
}

CallOptions Call(std::chrono::milliseconds timeout) {
  CallOptions call;
  if (timeout != c10d::kUnsetTimeout) call.timeout = absl::Milliseconds(timeout.count());
  return call;
}

void CheckOne(size_t n, const std::string& where) {
  if (n != 1) Fail(absl::StrCat(where, "expects exactly one tensor, got ", n));
}

}  // namespace

c10::intrusive_ptr<ProcessGroupPaddle> ProcessGroupPaddle::Create(
    c10::intrusive_ptr<c10d::Store> store, int rank, int size, std::chrono::milliseconds timeout) {
  auto ours = std::make_shared<TorchStore>(std::move(store));
  CommunicatorOptions options;
  options.store = ours;
  options.store_prefix = "paddle";
  options.rank = rank;
  options.world_size = size;
  if (timeout.count() > 0) {
    options.timeout = absl::Milliseconds(timeout.count());
    options.connect_timeout = options.timeout;
  }
  // Through the factory, so that PADDLE_DEBUG_CHECKS=1 puts the debug checks over it.
  absl::StatusOr<std::unique_ptr<Communicator>> comm = Communicator::Create(options);
  if (!comm.ok()) Fail(Where(rank, size, "init") + StatusText(comm.status()));
  return c10::make_intrusive<ProcessGroupPaddle>(rank, size, std::move(ours), *std::move(comm));
}

ProcessGroupPaddle::ProcessGroupPaddle(int rank, int size, std::shared_ptr<Store> store,
                                       std::unique_ptr<Communicator> comm)
    : c10d::ProcessGroup(rank, size), store_(std::move(store)), comm_(std::move(comm)) {
  completer_ = std::thread([this] { CompletionLoop(); });
}

ProcessGroupPaddle::~ProcessGroupPaddle() {
  // The completion thread may need the GIL (a Python comm hook on a Future, the last reference
  // to a Python-owned tensor): never hold it while joining.
  PyThreadState* saved = nullptr;
  if (Py_IsInitialized() && PyGILState_Check()) saved = PyEval_SaveThread();
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  completer_.join();
  comm_.reset();
  if (saved != nullptr) PyEval_RestoreThread(saved);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupPaddle::Launch(
    c10d::OpType type, std::vector<std::shared_ptr<paddle::Work>> works,
    std::vector<at::Tensor> outputs, std::function<void()> finish) {
  for (const auto& w : works) {
    if (w->IsCompleted() && !w->status().ok()) {
      Fail(Where(rank_, size_, c10d::opTypeToString(type)) + StatusText(w->status()));
    }
  }
  auto work = c10::make_intrusive<WorkPaddle>(rank_, type, std::move(outputs));
  {
    std::lock_guard<std::mutex> lock(mu_);
    pending_.push_back(Pending{std::move(works), std::move(finish), work});
  }
  cv_.notify_one();
  return work;
}

std::shared_ptr<paddle::Work> ProcessGroupPaddle::GatherRows(const at::Tensor& buf,
                                                             const c10d::ReduceOp& op,
                                                             std::chrono::milliseconds timeout,
                                                             const std::string& where,
                                                             at::Tensor* rows) {
  CheckBitwise(op, buf, where);
  *rows = at::empty({size_, buf.numel()}, buf.options());
  return comm_->Allgather(View(buf, where), View(*rows, where), Call(timeout));
}

void ProcessGroupPaddle::CompletionLoop() {
  for (;;) {
    Pending p;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [this] { return stop_ || !pending_.empty(); });
      if (pending_.empty()) return;  // stopping, and everything queued is done
      p = std::move(pending_.front());
      pending_.pop_front();
    }
    std::exception_ptr error;
    // Wait for every Work even after a failure: the copy-back must not race a running one.
    for (const auto& w : p.works) {
      const absl::Status s = w->Wait();
      if (!s.ok() && !error) {
        error = std::make_exception_ptr(
            std::runtime_error(Where(rank_, size_, w->Describe()) + StatusText(s)));
      }
    }
    if (!error && p.finish) {
      try {
        p.finish();
      } catch (...) {
        error = std::current_exception();
      }
    }
    p.work->Complete(error);
  }
}

c10::intrusive_ptr<c10d::Work> ProcessGroupPaddle::broadcast(std::vector<at::Tensor>& tensors,
                                                             const c10d::BroadcastOptions& opts) {
  const std::string where = Where(rank_, size_, "broadcast");
  CheckOne(tensors.size(), where);
  if (opts.rootTensor != 0) Fail(where + "rootTensor must be 0");
  at::Tensor buf = Contig(tensors[0], where);
  auto w = comm_->Broadcast(View(buf, where), static_cast<int>(opts.rootRank), Call(opts.timeout));
  return Launch(c10d::OpType::BROADCAST, {w}, tensors, CopyBack(tensors[0], buf));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupPaddle::allreduce(std::vector<at::Tensor>& tensors,
                                                             const c10d::AllreduceOptions& opts) {
  const std::string where = Where(rank_, size_, "allreduce");
  CheckOne(tensors.size(), where);
  at::Tensor buf = Contig(tensors[0], where);
  if (IsBitwise(opts.reduceOp)) {
    at::Tensor rows;
    auto w = GatherRows(buf, opts.reduceOp, opts.timeout, where, &rows);
    return Launch(c10d::OpType::ALLREDUCE, {w}, tensors,
                  [user = tensors[0], rows, op = opts.reduceOp]() mutable {
                    user.copy_(FoldBitwise(rows, op).view(user.sizes()));
                  });
  }
  auto w = comm_->Allreduce(View(buf, where), ToReduceOp(opts.reduceOp, where), Call(opts.timeout));
  return Launch(c10d::OpType::ALLREDUCE, {w}, tensors, CopyBack(tensors[0], buf));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupPaddle::allreduce_coalesced(
    std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) {
  const std::string where = Where(rank_, size_, "allreduce_coalesced");
  if (tensors.empty()) Fail(where + "expects at least one tensor");
  at::Tensor buf = Flatten(tensors, where);
  if (IsBitwise(opts.reduceOp)) {
    at::Tensor rows;
    auto w = GatherRows(buf, opts.reduceOp, opts.timeout, where, &rows);
    return Launch(c10d::OpType::ALLREDUCE_COALESCED, {w}, tensors,
                  [tensors, rows, op = opts.reduceOp]() mutable {
                    Unflatten(FoldBitwise(rows, op), tensors);
                  });
  }
  auto w = comm_->Allreduce(View(buf, where), ToReduceOp(opts.reduceOp, where), Call(opts.timeout));
  return Launch(c10d::OpType::ALLREDUCE_COALESCED, {w}, tensors,
                [tensors, buf]() mutable { Unflatten(buf, tensors); });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupPaddle::reduce(std::vector<at::Tensor>& tensors,
                                                          const c10d::ReduceOptions& opts) {
  const std::string where = Where(rank_, size_, "reduce");
  CheckOne(tensors.size(), where);
  if (opts.rootTensor != 0) Fail(where + "rootTensor must be 0");
  at::Tensor buf = Contig(tensors[0], where);
  if (IsBitwise(opts.reduceOp)) {
    at::Tensor rows;
    auto w = GatherRows(buf, opts.reduceOp, opts.timeout, where, &rows);
    std::function<void()> finish;
    if (rank_ == opts.rootRank) {
      finish = [user = tensors[0], rows, op = opts.reduceOp]() mutable {
        user.copy_(FoldBitwise(rows, op).view(user.sizes()));
      };
    }
    return Launch(c10d::OpType::REDUCE, {w}, tensors, std::move(finish));
  }
  auto w = comm_->Reduce(View(buf, where), static_cast<int>(opts.rootRank),
                         ToReduceOp(opts.reduceOp, where), Call(opts.timeout));
  return Launch(c10d::OpType::REDUCE, {w}, tensors, CopyBack(tensors[0], buf));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupPaddle::allgather(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& opts) {
  const std::string where = Where(rank_, size_, "allgather");
  CheckOne(inputs.size(), where);
  CheckOne(outputs.size(), where);
  std::vector<at::Tensor>& out = outputs[0];
  if (static_cast<int>(out.size()) != size_) {
    Fail(
        absl::StrCat(where, "expects ", size_, " output tensors (one per rank), got ", out.size()));
  }
  const at::Tensor in = Contig(inputs[0], where);
  for (size_t i = 0; i < out.size(); ++i) {
    CheckCpu(out[i], where);
    if (out[i].numel() != in.numel() || out[i].scalar_type() != in.scalar_type()) {
      Fail(absl::StrCat(where, "output ", i, " is ", c10::toString(out[i].scalar_type()), " x ",
                        out[i].numel(), " but the input is ", c10::toString(in.scalar_type()),
                        " x ", in.numel()));
    }
  }
  at::Tensor buf = at::empty({size_ * in.numel()}, in.options());
  auto w = comm_->Allgather(View(in, where), View(buf, where), Call(opts.timeout));
  return Launch(c10d::OpType::ALLGATHER, {w}, out, [out, buf]() mutable { Unflatten(buf, out); });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupPaddle::_allgather_base(
    at::Tensor& output, at::Tensor& input, const c10d::AllgatherOptions& opts) {
  const std::string where = Where(rank_, size_, "_allgather_base");
  const at::Tensor in = Contig(input, where);
  at::Tensor buf = Contig(output, where);
  auto w = comm_->Allgather(View(in, where), View(buf, where), Call(opts.timeout));
  return Launch(c10d::OpType::_ALLGATHER_BASE, {w}, {output}, CopyBack(output, buf));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupPaddle::reduce_scatter(
    std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
    const c10d::ReduceScatterOptions& opts) {
  const std::string where = Where(rank_, size_, "reduce_scatter");
  CheckOne(outputs.size(), where);
  CheckOne(inputs.size(), where);
  std::vector<at::Tensor>& in = inputs[0];
  if (static_cast<int>(in.size()) != size_) {
    Fail(absl::StrCat(where, "expects ", size_, " input tensors (one per rank), got ", in.size()));
  }
  if (in[rank_].numel() != outputs[0].numel()) {
    Fail(absl::StrCat(where, "input ", rank_, " (this rank's block) has ", in[rank_].numel(),
                      " elements but the output has ", outputs[0].numel()));
  }
  int64_t block = 0;
  bool even = true;
  for (const at::Tensor& t : in) {
    even = even && t.numel() == in[0].numel();
    block = std::max(block, t.numel());
  }
  // Note [Uneven reduce_scatter]: blocks of different sizes are padded to the largest one and go
  // through one ReduceScatter; the padding is reduced like the data and then dropped, so every
  // op works. Every rank must pass the same list of sizes (as for gloo's reduce_scatter).
  at::Tensor flat = Flatten(in, where);
  if (!even) {
    at::Tensor padded = at::zeros({size_ * block}, flat.options());
    int64_t offset = 0;
    for (int i = 0; i < size_; ++i) {
      padded.narrow(0, i * block, in[i].numel()).copy_(flat.narrow(0, offset, in[i].numel()));
      offset += in[i].numel();
    }
    flat = padded;
  }
  return ReduceScatterFlat(c10d::OpType::REDUCE_SCATTER, flat, outputs[0], block, opts, where);
}

// `flat` holds size_ blocks of `block` elements; block rank_'s reduction lands in `output`
// (output.numel() <= block: the rest of the block is padding).
c10::intrusive_ptr<c10d::Work> ProcessGroupPaddle::ReduceScatterFlat(
    c10d::OpType type, const at::Tensor& flat, at::Tensor& output, int64_t block,
    const c10d::ReduceScatterOptions& opts, const std::string& where) {
  CheckCpu(output, where);
  if (output.scalar_type() != flat.scalar_type()) {
    Fail(absl::StrCat(where, "output has dtype ", c10::toString(output.scalar_type()),
                      " but the input has ", c10::toString(flat.scalar_type())));
  }
  if (IsBitwise(opts.reduceOp)) {
    at::Tensor rows;
    auto w = GatherRows(flat, opts.reduceOp, opts.timeout, where, &rows);
    return Launch(
        type, {w}, {output},
        [user = output, rows, op = opts.reduceOp, offset = rank_ * block]() mutable {
          user.copy_(FoldBitwise(rows, op).narrow(0, offset, user.numel()).view(user.sizes()));
        });
  }
  at::Tensor buf =
      block == output.numel() ? Contig(output, where) : at::empty({block}, flat.options());
  auto w = comm_->ReduceScatter(View(flat, where), View(buf, where),
                                ToReduceOp(opts.reduceOp, where), Call(opts.timeout));
  std::function<void()> finish;
  if (!output.is_same(buf)) {
    finish = [user = output, buf]() mutable {
      user.copy_(buf.reshape({-1}).narrow(0, 0, user.numel()).view(user.sizes()));
    };
  }
  return Launch(type, {w}, {output}, std::move(finish));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupPaddle::_reduce_scatter_base(
    at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) {
  const std::string where = Where(rank_, size_, "_reduce_scatter_base");
  const at::Tensor in = Contig(input, where);
  CheckCpu(output, where);
  if (in.numel() != size_ * output.numel()) {
    Fail(absl::StrCat(where, "input has ", in.numel(), " elements, expected ", size_, " x ",
                      output.numel(), " (world size x output)"));
  }
  return ReduceScatterFlat(c10d::OpType::_REDUCE_SCATTER_BASE, in.reshape({-1}), output,
                           output.numel(), opts, where);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupPaddle::allgather_coalesced(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& opts) {
  const std::string where = Where(rank_, size_, "allgather_coalesced");
  if (inputs.empty()) Fail(where + "expects at least one input tensor");
  if (static_cast<int>(outputs.size()) != size_) {
    Fail(absl::StrCat(where, "expects ", size_, " output lists (one per rank), got ",
                      outputs.size()));
  }
  // Every rank passes the same shapes (as gloo requires): rank r's list mirrors the inputs.
  for (int r = 0; r < size_; ++r) {
    if (outputs[r].size() != inputs.size()) {
      Fail(absl::StrCat(where, "output list ", r, " has ", outputs[r].size(),
                        " tensors but there are ", inputs.size(), " inputs"));
    }
    for (size_t i = 0; i < inputs.size(); ++i) {
      CheckCpu(outputs[r][i], where);
      if (outputs[r][i].numel() != inputs[i].numel() ||
          outputs[r][i].scalar_type() != inputs[i].scalar_type()) {
        Fail(absl::StrCat(where, "output ", r, "/", i, " is ",
                          c10::toString(outputs[r][i].scalar_type()), " x ", outputs[r][i].numel(),
                          " but input ", i, " is ", c10::toString(inputs[i].scalar_type()), " x ",
                          inputs[i].numel()));
      }
    }
  }
  const at::Tensor in = Flatten(inputs, where);
  at::Tensor buf = at::empty({size_ * in.numel()}, in.options());
  auto w = comm_->Allgather(View(in, where), View(buf, where), Call(opts.timeout));
  std::vector<at::Tensor> all;
  for (const auto& list : outputs) all.insert(all.end(), list.begin(), list.end());
  return Launch(c10d::OpType::ALLGATHER_COALESCED, {w}, all,
                [all, buf]() mutable { Unflatten(buf, all); });
}

// Note [Gather and scatter as Alltoallv]: the communicator has no Gather or Scatter, and
// point-to-point messages would share tags with the user's send/recv. An Alltoallv in which only
// the root's row (gather) or column (scatter) of counts is non-zero moves exactly the bytes of a
// gather or scatter, keeps call order with the other collectives, and gets the same debug checks.
c10::intrusive_ptr<c10d::Work> ProcessGroupPaddle::gather(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::GatherOptions& opts) {
  const std::string where = Where(rank_, size_, "gather");
  CheckOne(inputs.size(), where);
  const int root = static_cast<int>(opts.rootRank);
  const at::Tensor in = Contig(inputs[0], where);
  const int64_t n = in.numel();
  std::vector<int64_t> send(size_, 0), recv(size_, 0);
  send[root] = n;
  at::Tensor buf = at::empty({0}, in.options());
  std::vector<at::Tensor> out;
  if (rank_ == root) {
    CheckOne(outputs.size(), where);
    out = outputs[0];
    if (static_cast<int>(out.size()) != size_) {
      Fail(absl::StrCat(where, "the root expects ", size_, " output tensors, got ", out.size()));
    }
    for (size_t i = 0; i < out.size(); ++i) {
      CheckCpu(out[i], where);
      if (out[i].numel() != n || out[i].scalar_type() != in.scalar_type()) {
        Fail(absl::StrCat(where, "output ", i, " is ", c10::toString(out[i].scalar_type()), " x ",
                          out[i].numel(), " but the input is ", c10::toString(in.scalar_type()),
                          " x ", n));
      }
    }
    std::fill(recv.begin(), recv.end(), n);
    buf = at::empty({size_ * n}, in.options());
  } else if (!outputs.empty()) {
    Fail(absl::StrCat(where, "only the root (rank ", root, ") passes output tensors"));
  }
  auto w = comm_->Alltoallv(View(in, where), View(buf, where), send, recv, Call(opts.timeout));
  std::function<void()> finish;
  if (rank_ == root) finish = [out, buf]() mutable { Unflatten(buf, out); };
  return Launch(c10d::OpType::GATHER, {w}, out, std::move(finish));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupPaddle::scatter(
    std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
    const c10d::ScatterOptions& opts) {
  const std::string where = Where(rank_, size_, "scatter");
  CheckOne(outputs.size(), where);
  const int root = static_cast<int>(opts.rootRank);
  at::Tensor buf = Contig(outputs[0], where);
  const int64_t n = buf.numel();
  std::vector<int64_t> send(size_, 0), recv(size_, 0);
  recv[root] = n;
  at::Tensor in = at::empty({0}, buf.options());
  if (rank_ == root) {
    CheckOne(inputs.size(), where);
    if (static_cast<int>(inputs[0].size()) != size_) {
      Fail(absl::StrCat(where, "the root expects ", size_, " input tensors, got ",
                        inputs[0].size()));
    }
    for (size_t i = 0; i < inputs[0].size(); ++i) {
      if (inputs[0][i].numel() != n || inputs[0][i].scalar_type() != buf.scalar_type()) {
        Fail(absl::StrCat(where, "input ", i, " is ", c10::toString(inputs[0][i].scalar_type()),
                          " x ", inputs[0][i].numel(), " but the output is ",
                          c10::toString(buf.scalar_type()), " x ", n));
      }
    }
    std::fill(send.begin(), send.end(), n);
    in = Flatten(inputs[0], where);
  } else if (!inputs.empty()) {
    Fail(absl::StrCat(where, "only the root (rank ", root, ") passes input tensors"));
  }
  auto w = comm_->Alltoallv(View(in, where), View(buf, where), send, recv, Call(opts.timeout));
  return Launch(c10d::OpType::SCATTER, {w}, outputs, CopyBack(outputs[0], buf));
}

namespace {

// Elements per peer for an alltoall_base split along dim 0; empty `splits` means equal rows.
std::vector<int64_t> SplitCounts(const at::Tensor& t, const std::vector<int64_t>& splits, int size,
                                 const std::string& where, absl::string_view what) {
  const int64_t rows = t.dim() == 0 ? 1 : t.size(0);
  const int64_t row = rows == 0 ? 0 : t.numel() / rows;
  std::vector<int64_t> counts(size);
  if (splits.empty()) {
    if (rows % size != 0) {
      Fail(absl::StrCat(where, what, " has ", rows, " rows, not divisible by the world size ", size,
                        "; pass split sizes"));
    }
    for (int64_t& c : counts) c = rows / size * row;
    return counts;
  }
  if (static_cast<int>(splits.size()) != size) {
    Fail(absl::StrCat(where, what, " split sizes have ", splits.size(), " entries, expected ",
                      size));
  }
  int64_t total = 0;
  for (int i = 0; i < size; ++i) {
    if (splits[i] < 0) Fail(absl::StrCat(where, what, " split ", i, " is negative"));
    total += splits[i];
    counts[i] = splits[i] * row;
  }
  if (total != rows) {
    Fail(absl::StrCat(where, what, " split sizes add up to ", total, " rows but the tensor has ",
                      rows));
  }
  return counts;
}

}  // namespace

c10::intrusive_ptr<c10d::Work> ProcessGroupPaddle::alltoall_base(
    at::Tensor& output, at::Tensor& input, std::vector<int64_t>& output_splits,
    std::vector<int64_t>& input_splits, const c10d::AllToAllOptions& opts) {
  const std::string where = Where(rank_, size_, "alltoall_base");
  const at::Tensor in = Contig(input, where);
  at::Tensor buf = Contig(output, where);
  std::shared_ptr<paddle::Work> w;
  if (output_splits.empty() && input_splits.empty()) {
    w = comm_->Alltoall(View(in, where), View(buf, where), Call(opts.timeout));
  } else {
    w = comm_->Alltoallv(
        View(in, where), View(buf, where), SplitCounts(in, input_splits, size_, where, "input"),
        SplitCounts(buf, output_splits, size_, where, "output"), Call(opts.timeout));
  }
  return Launch(c10d::OpType::ALLTOALL_BASE, {w}, {output}, CopyBack(output, buf));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupPaddle::alltoall(std::vector<at::Tensor>& outputs,
                                                            std::vector<at::Tensor>& inputs,
                                                            const c10d::AllToAllOptions& opts) {
  const std::string where = Where(rank_, size_, "alltoall");
  if (static_cast<int>(inputs.size()) != size_ || static_cast<int>(outputs.size()) != size_) {
    Fail(absl::StrCat(where, "expects ", size_, " input and output tensors, got ", inputs.size(),
                      " and ", outputs.size()));
  }
  const at::Tensor in = Flatten(inputs, where);
  std::vector<int64_t> send(size_), recv(size_);
  int64_t recv_total = 0;
  for (int i = 0; i < size_; ++i) {
    CheckCpu(outputs[i], where);
    if (outputs[i].scalar_type() != in.scalar_type()) {
      Fail(absl::StrCat(where, "output ", i, " has dtype ", c10::toString(outputs[i].scalar_type()),
                        " but the inputs have ", c10::toString(in.scalar_type())));
    }
    send[i] = inputs[i].numel();
    recv[i] = outputs[i].numel();
    recv_total += recv[i];
  }
  at::Tensor buf = at::empty({recv_total}, in.options());
  auto w = comm_->Alltoallv(View(in, where), View(buf, where), send, recv, Call(opts.timeout));
  return Launch(c10d::OpType::ALLTOALL, {w}, outputs,
                [outputs, buf]() mutable { Unflatten(buf, outputs); });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupPaddle::barrier(const c10d::BarrierOptions& opts) {
  return Launch(c10d::OpType::BARRIER, {comm_->Barrier(Call(opts.timeout))}, {});
}

c10::intrusive_ptr<c10d::Work> ProcessGroupPaddle::send(std::vector<at::Tensor>& tensors, int dst,
                                                        int tag) {
  const std::string where = Where(rank_, size_, "send");
  CheckOne(tensors.size(), where);
  if (tag < 0) Fail(absl::StrCat(where, "tag ", tag, " is negative"));
  const at::Tensor buf = Contig(tensors[0], where);
  auto w = comm_->Send(View(buf, where), dst, static_cast<uint32_t>(tag));
  return Launch(c10d::OpType::SEND, {w}, {});
}

c10::intrusive_ptr<c10d::Work> ProcessGroupPaddle::recv(std::vector<at::Tensor>& tensors, int src,
                                                        int tag) {
  const std::string where = Where(rank_, size_, "recv");
  CheckOne(tensors.size(), where);
  if (tag < 0) Fail(absl::StrCat(where, "tag ", tag, " is negative"));
  at::Tensor buf = Contig(tensors[0], where);
  auto w = comm_->Recv(View(buf, where), src, static_cast<uint32_t>(tag));
  return Launch(c10d::OpType::RECV, {w}, tensors, CopyBack(tensors[0], buf));
}

// Note [No receive from any source]: our transports match a receive on (peer, tag) and have no
// probe, and a send does not know its receiver will not name it. Receiving from "any" peer would
// mean posting a receive on every peer: all but one would stay pending and take the next message
// each of those peers sends with that tag, even one meant for a later recv naming it, and they
// could not be cancelled without poisoning the group. So it is refused at once, not left to hang.
c10::intrusive_ptr<c10d::Work> ProcessGroupPaddle::recvAnysource(std::vector<at::Tensor>& tensors,
                                                                 int tag) {
  Fail(absl::StrCat(Where(rank_, size_, "recv"),
                    "a receive from any source (src=None) is not supported by backend 'paddle': "
                    "messages are matched on (source rank, tag) and cannot be probed; pass src= "
                    "(for example after sending the source rank in a small tensor first)"));
}

}  // namespace paddle::torch_ext
