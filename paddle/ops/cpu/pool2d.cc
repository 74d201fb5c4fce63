// Pooling on oneDNN: primitives cached per (algorithm, shape, layout, options).
#include "paddle/ops/cpu/pool2d.h"

#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "paddle/core/status.h"
#include "paddle/ops/cpu/dnnl_context.h"
#include "paddle/ops/cpu/op_checks.h"

namespace paddle {
namespace ops {
namespace cpu {
namespace {

using dnnl::memory;
using internal::CheckTensor;
using internal::Describe;
using internal::DnnlCall;
using internal::DnnlEngine;
using internal::DnnlStream;

struct PoolGeometry {
  int64_t n, c, h, w, oh, ow;
  bool channels_last;
};

absl::StatusOr<PoolGeometry> CheckPool(const char* op, const Tensor& x, const Pool2dOptions& o) {
  RETURN_IF_ERROR(CheckTensor(op, "x", x, DType::kFloat32, 4));
  if (o.kernel_h < 1 || o.kernel_w < 1 || o.stride_h < 1 || o.stride_w < 1 || o.pad_h < 0 ||
      o.pad_w < 0 || 2 * o.pad_h > o.kernel_h || 2 * o.pad_w > o.kernel_w) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": kernel (", o.kernel_h, ", ", o.kernel_w,
                                                   ") and stride (", o.stride_h, ", ", o.stride_w,
                                                   ") must be >= 1 and padding (", o.pad_h, ", ",
                                                   o.pad_w, ") between 0 and half the kernel"));
  }
  PoolGeometry g{x.shape()[0],
                 x.shape()[1],
                 x.shape()[2],
                 x.shape()[3],
                 0,
                 0,
                 internal::IsChannelsLast(x) && !x.is_contiguous()};
  const int64_t hp = g.h + 2 * o.pad_h;
  const int64_t wp = g.w + 2 * o.pad_w;
  if (g.n < 1 || g.c < 1 || hp < o.kernel_h || wp < o.kernel_w) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": x ", Describe(x), " padded by (", o.pad_h, ", ", o.pad_w,
                     ") is empty or smaller than the kernel (", o.kernel_h, ", ", o.kernel_w, ")"));
  }
  g.oh = (hp - o.kernel_h) / o.stride_h + 1;
  g.ow = (wp - o.kernel_w) / o.stride_w + 1;
  return g;
}

struct PoolPrimitives : internal::DnnlCached {
  memory::desc src, dst;
  dnnl::pooling_forward::primitive_desc fwd_pd;
  dnnl::pooling_forward fwd;
  dnnl::pooling_backward bwd;
};

std::shared_ptr<PoolPrimitives> MakePool(dnnl::algorithm alg, const PoolGeometry& g,
                                         const Pool2dOptions& o) {
  auto p = std::make_shared<PoolPrimitives>();
  const auto tag = g.channels_last ? memory::format_tag::nhwc : memory::format_tag::nchw;
  p->src = memory::desc({g.n, g.c, g.h, g.w}, memory::data_type::f32, tag);
  p->dst = memory::desc({g.n, g.c, g.oh, g.ow}, memory::data_type::f32, tag);
  const memory::dims strides = {o.stride_h, o.stride_w};
  const memory::dims kernel = {o.kernel_h, o.kernel_w};
  const memory::dims pad = {o.pad_h, o.pad_w};
  const memory::dims pad_r = {(g.oh - 1) * o.stride_h + o.kernel_h - g.h - o.pad_h,
                              (g.ow - 1) * o.stride_w + o.kernel_w - g.w - o.pad_w};
  dnnl::pooling_forward::desc fd(dnnl::prop_kind::forward_training, alg, p->src, p->dst, strides,
                                 kernel, pad, pad_r);
  p->fwd_pd = dnnl::pooling_forward::primitive_desc(fd, DnnlEngine());
  p->fwd = dnnl::pooling_forward(p->fwd_pd);
  dnnl::pooling_backward::desc bd(alg, p->src, p->dst, strides, kernel, pad, pad_r);
  p->bwd =
      dnnl::pooling_backward(dnnl::pooling_backward::primitive_desc(bd, DnnlEngine(), p->fwd_pd));
  return p;
}

absl::StatusOr<std::shared_ptr<PoolPrimitives>> LookupPool(bool max, const PoolGeometry& g,
                                                           const Pool2dOptions& o) {
  const std::string key =
      absl::StrCat(max ? "maxpool" : "avgpool", " n", g.n, " c", g.c, " h", g.h, " w", g.w,
                   g.channels_last ? " nhwc" : " nchw", " k", o.kernel_h, ",", o.kernel_w,
                   " stride", o.stride_h, ",", o.stride_w, " pad", o.pad_h, ",", o.pad_w);
  const dnnl::algorithm alg =
      max ? dnnl::algorithm::pooling_max : dnnl::algorithm::pooling_avg_exclude_padding;
  ASSIGN_OR_RETURN(std::shared_ptr<internal::DnnlCached> entry,
                   internal::DnnlCacheLookup(key, [&]() -> std::shared_ptr<internal::DnnlCached> {
                     return MakePool(alg, g, o);
                   }));
  return std::static_pointer_cast<PoolPrimitives>(entry);
}

// `t` in the layout `like` has (channels-last or NCHW-contiguous), copying only if needed.
absl::StatusOr<Tensor> InLayout(const char* op, const Tensor& t, bool channels_last) {
  if (channels_last ? internal::IsChannelsLast(t) : t.is_contiguous()) return t;
  if (!channels_last) return t.Contiguous();
  ASSIGN_OR_RETURN(Tensor src, internal::Dense(t));
  ASSIGN_OR_RETURN(Tensor out, internal::EmptyChannelsLast(t.shape()[0], t.shape()[1], t.shape()[2],
                                                           t.shape()[3]));
  RETURN_IF_ERROR(DnnlCall(op, [&] {
    dnnl::memory from = internal::MemoryOf(src);
    dnnl::memory to = internal::MemoryOf(out);
    dnnl::reorder(from, to).execute(DnnlStream(), from, to);
    DnnlStream().wait();
  }));
  return out;
}

absl::StatusOr<Tensor> EmptyIn(int64_t n, int64_t c, int64_t h, int64_t w, bool channels_last) {
  if (channels_last) return internal::EmptyChannelsLast(n, c, h, w);
  return Tensor::Empty({n, c, h, w}, DType::kFloat32);
}

absl::Status CheckDy(const char* op, const PoolGeometry& g, const Tensor& x, const Tensor& dy) {
  RETURN_IF_ERROR(CheckTensor(op, "dy", dy, DType::kFloat32, 4));
  if (dy.shape() != Shape{g.n, g.c, g.oh, g.ow}) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": dy ", Describe(dy), " must be ",
                                                   ShapeToString({g.n, g.c, g.oh, g.ow}),
                                                   ", the pooled shape of x ", Describe(x)));
  }
  return absl::OkStatus();
}

absl::StatusOr<Tensor> PoolForward(const char* op, bool max, const Tensor& x,
                                   const Pool2dOptions& o, Tensor* workspace) {
  ASSIGN_OR_RETURN(PoolGeometry g, CheckPool(op, x, o));
  ASSIGN_OR_RETURN(std::shared_ptr<PoolPrimitives> p, LookupPool(max, g, o));
  ASSIGN_OR_RETURN(Tensor xc, InLayout(op, x, g.channels_last));
  ASSIGN_OR_RETURN(Tensor y, EmptyIn(g.n, g.c, g.oh, g.ow, g.channels_last));
  if (max) {
    ASSIGN_OR_RETURN(*workspace,
                     Tensor::Empty({static_cast<int64_t>(p->fwd_pd.workspace_desc().get_size())},
                                   DType::kUInt8));
  }
  RETURN_IF_ERROR(DnnlCall(op, [&] {
    std::unordered_map<int, memory> args = {{DNNL_ARG_SRC, memory(p->src, DnnlEngine(), xc.data())},
                                            {DNNL_ARG_DST, memory(p->dst, DnnlEngine(), y.data())}};
    if (max) {
      args[DNNL_ARG_WORKSPACE] =
          memory(p->fwd_pd.workspace_desc(), DnnlEngine(), workspace->data());
    }
    p->fwd.execute(DnnlStream(), args);
    DnnlStream().wait();
  }));
  return y;
}

absl::StatusOr<Tensor> PoolBackward(const char* op, bool max, const Tensor& x,
                                    const Tensor* workspace, const Tensor& dy,
                                    const Pool2dOptions& o) {
  ASSIGN_OR_RETURN(PoolGeometry g, CheckPool(op, x, o));
  RETURN_IF_ERROR(CheckDy(op, g, x, dy));
  ASSIGN_OR_RETURN(std::shared_ptr<PoolPrimitives> p, LookupPool(max, g, o));
  if (max) {
    const size_t want = p->fwd_pd.workspace_desc().get_size();
    if (!workspace->defined() || workspace->dtype() != DType::kUInt8 ||
        workspace->nbytes() != want || !workspace->is_contiguous()) {
      return absl::InvalidArgumentError(absl::StrCat(
          op, ": workspace ", Describe(*workspace), " is not the one MaxPool2dForward made for x ",
          Describe(x), " (", want, " bytes of uint8 expected)"));
    }
  }
  ASSIGN_OR_RETURN(Tensor dyc, InLayout(op, dy, g.channels_last));
  ASSIGN_OR_RETURN(Tensor dx, EmptyIn(g.n, g.c, g.h, g.w, g.channels_last));
  RETURN_IF_ERROR(DnnlCall(op, [&] {
    std::unordered_map<int, memory> args = {
        {DNNL_ARG_DIFF_DST, memory(p->dst, DnnlEngine(), dyc.data())},
        {DNNL_ARG_DIFF_SRC, memory(p->src, DnnlEngine(), dx.data())}};
    if (max) {
      args[DNNL_ARG_WORKSPACE] =
          memory(p->fwd_pd.workspace_desc(), DnnlEngine(), workspace->data());
    }
    p->bwd.execute(DnnlStream(), args);
    DnnlStream().wait();
  }));
  return dx;
}

}  // namespace

absl::StatusOr<MaxPool2dResult> MaxPool2dForward(const Tensor& x, const Pool2dOptions& o) {
  MaxPool2dResult r;
  ASSIGN_OR_RETURN(r.y, PoolForward("MaxPool2dForward", true, x, o, &r.workspace));
  return r;
}

absl::StatusOr<Tensor> MaxPool2dBackward(const Tensor& x, const MaxPool2dResult& fwd,
                                         const Tensor& dy, const Pool2dOptions& o) {
  return PoolBackward("MaxPool2dBackward", true, x, &fwd.workspace, dy, o);
}

absl::StatusOr<Tensor> AvgPool2dForward(const Tensor& x, const Pool2dOptions& o) {
  return PoolForward("AvgPool2dForward", false, x, o, nullptr);
}

absl::StatusOr<Tensor> AvgPool2dBackward(const Tensor& x, const Tensor& dy,
                                         const Pool2dOptions& o) {
  return PoolBackward("AvgPool2dBackward", false, x, nullptr, dy, o);
}

}  // namespace cpu
}  // namespace ops
}  // namespace paddle
