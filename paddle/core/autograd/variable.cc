// Variable state, leaf gradient accumulation and the gradient-ready hooks.
#include "paddle/core/autograd/variable.h"

#include <array>
#include <cstring>
#include <mutex>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "paddle/core/autograd/engine.h"
#include "paddle/core/autograd/grad_mode.h"
#include "paddle/core/status.h"

namespace paddle::autograd {

struct Variable::Impl {
  Tensor data;
  Tensor grad;
  bool sparse = false;                      // Note [Sparse gradients]
  std::shared_ptr<SparseRows> sparse_grad;  // null: none yet
  bool requires_grad = false;
  std::string name;
  std::shared_ptr<Node> grad_fn;  // set for non-leaves
  int output_nr = 0;
  std::weak_ptr<Node> accumulator;  // leaves: the graph owns it, we only find it again
  std::vector<std::pair<int, GradReadyHook>> hooks;
  int next_hook = 0;
};

namespace {

const Tensor& UndefinedTensor() {
  static const Tensor* undefined = new Tensor();
  return *undefined;
}

const std::string& EmptyName() {
  static const std::string* empty = new std::string();
  return *empty;
}

absl::Status CheckSameLayout(const Tensor& a, const Tensor& b, const char* what,
                             bool same_device = true) {
  if (a.dtype() != b.dtype() || a.shape() != b.shape() ||
      (same_device && a.device() != b.device())) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": expected ", a.ToString(), ", got ", b.ToString()));
  }
  return absl::OkStatus();
}

template <typename T>
void AddLoop(T* dst, const T* a, const T* b, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = a[i] + b[i];
}

absl::Status AddRaw(void* dst, const void* a, const void* b, int64_t n, DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      AddLoop(static_cast<float*>(dst), static_cast<const float*>(a), static_cast<const float*>(b),
              n);
      return absl::OkStatus();
    case DType::kFloat64:
      AddLoop(static_cast<double*>(dst), static_cast<const double*>(a),
              static_cast<const double*>(b), n);
      return absl::OkStatus();
    default:
      return absl::UnimplementedError(absl::StrCat(
          "gradient accumulation supports float32 and float64, not ", DTypeName(dtype)));
  }
}

// Note [Gradient arithmetic on devices]: one slot per DeviceType.
struct DeviceOpsRegistry {
  std::mutex mu;
  std::array<DeviceGradientOps, 2> ops;
};

DeviceOpsRegistry& Registry() {
  static DeviceOpsRegistry* registry = new DeviceOpsRegistry();
  return *registry;
}

}  // namespace

void SetDeviceGradientOps(DeviceType type, DeviceGradientOps ops) {
  PADDLE_CHECK(type != DeviceType::kCpu) << "CPU gradient arithmetic is built in";
  DeviceOpsRegistry& r = Registry();
  std::lock_guard<std::mutex> lock(r.mu);
  r.ops[static_cast<size_t>(type)] = std::move(ops);
}

absl::StatusOr<DeviceGradientOps> GetDeviceGradientOps(const Tensor& t, const char* what) {
  DeviceOpsRegistry& r = Registry();
  std::lock_guard<std::mutex> lock(r.mu);
  const auto index = static_cast<size_t>(t.device().type);
  if (index < r.ops.size()) {
    const DeviceGradientOps& ops = r.ops[index];
    if (ops.accumulate && ops.clone && ops.fill) return ops;
  }
  return absl::FailedPreconditionError(
      absl::StrCat(what, " of a ", t.ToString(),
                   " gradient: no gradient arithmetic is registered for that device (paddle/nn "
                   "registers CUDA's when it first runs an operation on a CUDA tensor)"));
}

absl::StatusOr<Tensor> CloneGradient(const Tensor& t) {
  if (t.device().is_cpu()) return t.Clone();
  ASSIGN_OR_RETURN(DeviceGradientOps ops, GetDeviceGradientOps(t, "copy"));
  return ops.clone(t);
}

absl::Status FillGradient(Tensor* dst, float value) {
  if (!dst->is_contiguous()) {
    return absl::InvalidArgumentError(
        absl::StrCat("fill of a non-contiguous gradient ", dst->ToString()));
  }
  if (!dst->device().is_cpu()) {
    ASSIGN_OR_RETURN(DeviceGradientOps ops, GetDeviceGradientOps(*dst, "fill"));
    return ops.fill(dst, value);
  }
  switch (dst->dtype()) {
    case DType::kFloat32:
      for (int64_t i = 0; i < dst->numel(); ++i) dst->data<float>()[i] = value;
      return absl::OkStatus();
    case DType::kFloat64:
      for (int64_t i = 0; i < dst->numel(); ++i) dst->data<double>()[i] = value;
      return absl::OkStatus();
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("fill of a ", DTypeName(dst->dtype()), " gradient; need a float dtype"));
  }
}

Variable::Variable(Tensor data, bool requires_grad, std::string name)
    : impl_(std::make_shared<Impl>()) {
  impl_->data = std::move(data);
  impl_->requires_grad = requires_grad;
  impl_->name = std::move(name);
}

Variable Variable::FromNode(Tensor data, std::shared_ptr<Node> grad_fn, int output_nr) {
  Variable v(std::move(data));
  v.impl_->requires_grad = grad_fn != nullptr;
  v.impl_->grad_fn = std::move(grad_fn);
  v.impl_->output_nr = output_nr;
  return v;
}

const Tensor& Variable::data() const { return impl_ ? impl_->data : UndefinedTensor(); }

absl::Status Variable::set_data(const Tensor& data) {
  PADDLE_CHECK(impl_ != nullptr) << "set_data on an undefined Variable";
  RETURN_IF_ERROR(CheckSameLayout(impl_->data, data,
                                  absl::StrCat("set_data of '", impl_->name, "'").c_str(),
                                  /*same_device=*/false));
  impl_->data = data;
  return absl::OkStatus();
}

bool Variable::requires_grad() const { return impl_ && impl_->requires_grad; }
bool Variable::is_leaf() const { return !impl_ || impl_->grad_fn == nullptr; }
const std::string& Variable::name() const { return impl_ ? impl_->name : EmptyName(); }
void Variable::set_name(std::string name) { impl_->name = std::move(name); }
const Tensor& Variable::grad() const { return impl_ ? impl_->grad : UndefinedTensor(); }

absl::Status Variable::set_grad(const Tensor& grad) {
  PADDLE_CHECK(impl_ != nullptr) << "set_grad on an undefined Variable";
  RETURN_IF_ERROR(
      CheckSameLayout(impl_->data, grad, absl::StrCat("set_grad of '", impl_->name, "'").c_str()));
  if (!grad.is_contiguous()) {
    return absl::InvalidArgumentError(
        absl::StrCat("set_grad of '", impl_->name, "': the gradient must be contiguous"));
  }
  impl_->grad = grad;
  return absl::OkStatus();
}

void Variable::ZeroGrad() {
  if (impl_) impl_->sparse_grad.reset();
  if (!impl_ || !impl_->grad.defined()) return;
  impl_->grad.BumpVersion();  // Note [Version counters] in paddle/core/storage.h
  // Contiguous by construction (set_grad checks, accumulation clones contiguously).
  if (impl_->grad.device().is_cpu()) {
    std::memset(impl_->grad.data(), 0, impl_->grad.nbytes());
    return;
  }
  const absl::Status s = FillGradient(&impl_->grad, 0.0f);
  PADDLE_CHECK(s.ok()) << "zeroing the gradient of '" << impl_->name << "': " << s.ToString();
}

void Variable::ResetGrad() {
  if (impl_) {
    impl_->grad = Tensor();
    impl_->sparse_grad.reset();
  }
}

void Variable::set_sparse(bool sparse) {
  PADDLE_CHECK(impl_ != nullptr) << "set_sparse on an undefined Variable";
  impl_->sparse = sparse;
}

bool Variable::sparse() const { return impl_ && impl_->sparse; }

const SparseRows* Variable::sparse_grad() const {
  return impl_ ? impl_->sparse_grad.get() : nullptr;
}

absl::Status Variable::set_sparse_grad(SparseRows grad) {
  PADDLE_CHECK(impl_ != nullptr) << "set_sparse_grad on an undefined Variable";
  RETURN_IF_ERROR(
      CheckSparseRows(grad, impl_->data, absl::StrCat("sparse gradient of '", impl_->name, "'")));
  impl_->sparse_grad = std::make_shared<SparseRows>(std::move(grad));
  return absl::OkStatus();
}

absl::Status Variable::AccumulateSparseGrad(const SparseRows& grad) {
  PADDLE_CHECK(impl_ != nullptr) << "AccumulateSparseGrad on an undefined Variable";
  RETURN_IF_ERROR(
      CheckSparseRows(grad, impl_->data, absl::StrCat("sparse gradient of '", impl_->name, "'")));
  if (!impl_->sparse_grad) {
    // A copy: the caller's tensors may be views of memory it reuses.
    SparseRows copy{Tensor(), Tensor(), grad.num_rows};
    ASSIGN_OR_RETURN(copy.ids, grad.ids.Clone());
    ASSIGN_OR_RETURN(copy.rows, grad.rows.Clone());
    impl_->sparse_grad = std::make_shared<SparseRows>(std::move(copy));
    return absl::OkStatus();
  }
  ASSIGN_OR_RETURN(SparseRows sum, ConcatSparseRows(*impl_->sparse_grad, grad));
  impl_->sparse_grad = std::make_shared<SparseRows>(std::move(sum));
  return absl::OkStatus();
}

int Variable::AddGradReadyHook(GradReadyHook hook) {
  int handle = impl_->next_hook++;
  impl_->hooks.emplace_back(handle, std::move(hook));
  return handle;
}

void Variable::RemoveGradReadyHook(int handle) {
  auto& hooks = impl_->hooks;
  for (auto it = hooks.begin(); it != hooks.end(); ++it) {
    if (it->first == handle) {
      hooks.erase(it);
      return;
    }
  }
}

const std::shared_ptr<Node>& Variable::grad_fn() const {
  static const std::shared_ptr<Node>* none = new std::shared_ptr<Node>();
  return impl_ ? impl_->grad_fn : *none;
}

Edge Variable::GradientEdge() const {
  if (!impl_ || !impl_->requires_grad) return Edge{};
  if (impl_->grad_fn) return Edge{impl_->grad_fn, impl_->output_nr};
  std::shared_ptr<Node> acc = impl_->accumulator.lock();
  if (!acc) {
    acc = std::make_shared<AccumulateGrad>(impl_);
    impl_->accumulator = acc;
  }
  return Edge{acc, 0};
}

absl::Status Variable::Backward(bool retain_graph) const {
  return RunBackward(*this, Tensor(), retain_graph);
}

AccumulateGrad::AccumulateGrad(std::shared_ptr<Variable::Impl> leaf)
    : Node(absl::StrCat("accumulate_grad(", leaf->name, ")"), 1), leaf_(std::move(leaf)) {}

absl::StatusOr<std::vector<Tensor>> AccumulateGrad::Apply(std::vector<Tensor> grads) {
  const Tensor& incoming = grads[0];
  Variable::Impl& leaf = *leaf_;
  RETURN_IF_ERROR(CheckSameLayout(leaf.data, incoming,
                                  absl::StrCat("gradient of parameter '", leaf.name, "'").c_str()));
  if (!leaf.grad.defined()) {
    ASSIGN_OR_RETURN(leaf.grad, CloneGradient(incoming));
  } else {
    RETURN_IF_ERROR(AccumulateInto(&leaf.grad, incoming));
  }
  Variable self;
  self.impl_ = leaf_;
  for (const auto& [handle, hook] : leaf.hooks) hook(self);
  return std::vector<Tensor>{};
}

Variable RecordOperation(Tensor output, const char* name, std::vector<Edge> edges,
                         FunctionNode::BackwardFn backward) {
  return RecordOperation(std::move(output), name, std::move(edges), {}, std::move(backward));
}

Variable RecordOperation(Tensor output, const char* name, std::vector<Edge> edges,
                         std::vector<SavedTensor> saved, FunctionNode::BackwardFn backward) {
  bool any = false;
  for (const Edge& e : edges) any = any || e.valid();
  if (!any || !GradMode::IsEnabled()) return Variable(std::move(output));
  auto node = std::make_shared<FunctionNode>(name, std::move(backward), std::move(saved));
  node->set_next_edges(std::move(edges));
  return Variable::FromNode(std::move(output), std::move(node));
}

absl::Status AccumulateInto(Tensor* dst, const Tensor& src) {
  RETURN_IF_ERROR(CheckSameLayout(*dst, src, "accumulate"));
  if (!dst->is_contiguous()) return absl::InvalidArgumentError("accumulate: dst not contiguous");
  if (!dst->device().is_cpu()) {
    ASSIGN_OR_RETURN(DeviceGradientOps ops, GetDeviceGradientOps(*dst, "accumulation"));
    return ops.accumulate(dst, src);
  }
  ASSIGN_OR_RETURN(Tensor s, src.Contiguous());
  return AddRaw(dst->data(), dst->data(), s.data(), dst->numel(), dst->dtype());
}

absl::StatusOr<Tensor> AddTensors(const Tensor& a, const Tensor& b) {
  RETURN_IF_ERROR(CheckSameLayout(a, b, "add gradients"));
  if (!a.device().is_cpu()) {
    ASSIGN_OR_RETURN(Tensor out, CloneGradient(a));
    RETURN_IF_ERROR(AccumulateInto(&out, b));
    return out;
  }
  ASSIGN_OR_RETURN(Tensor ac, a.Contiguous());
  ASSIGN_OR_RETURN(Tensor bc, b.Contiguous());
  ASSIGN_OR_RETURN(Tensor out, Tensor::Empty(a.shape(), a.dtype()));
  RETURN_IF_ERROR(AddRaw(out.data(), ac.data(), bc.data(), a.numel(), a.dtype()));
  return out;
}

}  // namespace paddle::autograd
