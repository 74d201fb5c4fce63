"""The tensor operations of paddle.Tensor beyond the C++ layers: broadcasting arithmetic,
exp/log/tanh/sigmoid, softmax, reductions over a dim, indexing, cat/stack, comparisons, where,
batched matmul and in-place updates.

Each differentiable operation is a paddle.autograd.Function whose forward and backward run
numpy's compiled loops over zero-copy views of the tensors; the graph is the C++ engine's.
The hot path of a model stays in C++: same-shaped float32 add/sub/mul, 2-d matmul, sums over all
elements, relu and the layers call the C++ kernels directly. Those are also the operations that
take CUDA tensors; the numpy-based ones raise TypeError on them, naming the device and .cpu()
(Note [Host views of device tensors] in python/bindings/tensor.cc).

In-place updates (add_, mul_, fill_, zero_, t[i] = v, and +=, -=, *=, /=) write the tensor's
memory. They are for tensors outside a graph or under paddle.no_grad() (optimizer-style
updates); on a tensor that requires a gradient with grad mode on they raise, except the
augmented assignments, which then compute out of place (as `x = x + y`). Each bumps the
tensor's version (t._version, Note [Version counters] in paddle/core/storage.h), so a backward
that saved the old values raises instead of computing a wrong gradient.
"""
import builtins

import numpy as np

from paddle import _C
from paddle._C import Tensor
from paddle.autograd import Function

# The C++ versions, used on their fast paths.
_c_sum = Tensor.sum
_c_add = _C.nn.functional.add
_c_mul = _C.nn.functional.mul
_c_matmul = _C.matmul
_c_add_any = Tensor.__add__
_c_sub_any = Tensor.__sub__
_c_mul_any = Tensor.__mul__


def _wrap(array):
    """A Tensor over `array` (numpy), without a copy when it is already contiguous."""
    array = np.asarray(array)
    if not array.flags.c_contiguous:
        array = np.ascontiguousarray(array)
    return Tensor.from_numpy(array, False, "", None)


def _np(x):
    return x.numpy() if isinstance(x, Tensor) else x


def as_tensor(x, like=None):
    """x as a Tensor: Tensors unchanged; numbers take `like`'s dtype when it is floating."""
    if isinstance(x, Tensor):
        return x
    dtype = None
    if like is not None and like.dtype in ("float32", "float64", "float16") and \
            isinstance(x, (int, float, np.integer, np.floating)):
        dtype = like.dtype
    a = np.array(x, dtype=dtype)
    if dtype is None and a.dtype == np.float64 and not isinstance(x, np.ndarray):
        a = a.astype(np.float32)
    return _wrap(a)


def _unbroadcast(grad, shape):
    """Sums `grad` (numpy) down to `shape`, undoing numpy broadcasting."""
    grad = np.asarray(grad)
    while grad.ndim > len(shape):
        grad = grad.sum(axis=0)
    for axis, size in enumerate(shape):
        if size == 1 and grad.shape[axis] != 1:
            grad = grad.sum(axis=axis, keepdims=True)
    return grad


def _dim(dim, ndim, what):
    if not -builtins.max(ndim, 1) <= dim < builtins.max(ndim, 1):
        raise IndexError(f"{what}: dim {dim} is out of range for a {ndim}-d tensor")
    return dim % builtins.max(ndim, 1)


# ---- broadcasting arithmetic ------------------------------------------------------------------

class _Binary(Function):
    @classmethod
    def forward(cls, ctx, a, b):
        an, bn = _np(a), _np(b)
        ctx.save_for_backward(an, bn)
        ctx.shapes = (np.shape(an), np.shape(bn))
        try:
            return _wrap(cls.compute(an, bn))
        except ValueError as e:
            raise ValueError(f"{cls.__name__.strip('_').lower()}: shapes {tuple(np.shape(an))} "
                             f"and {tuple(np.shape(bn))} do not broadcast") from e

    @classmethod
    def backward(cls, ctx, grad):
        an, bn = ctx.saved_tensors
        ga, gb = cls.grads(grad.numpy(), an, bn)
        sa, sb = ctx.shapes
        return (_unbroadcast(ga, sa) if ctx.needs_input_grad[0] else None,
                _unbroadcast(gb, sb) if ctx.needs_input_grad[1] else None)


class _Add(_Binary):
    compute = staticmethod(np.add)
    grads = staticmethod(lambda g, a, b: (g, g))


class _Sub(_Binary):
    compute = staticmethod(np.subtract)
    grads = staticmethod(lambda g, a, b: (g, -g))


class _Mul(_Binary):
    compute = staticmethod(np.multiply)
    grads = staticmethod(lambda g, a, b: (g * b, g * a))


class _Div(_Binary):
    compute = staticmethod(np.divide)
    grads = staticmethod(lambda g, a, b: (g / b, -g * a / (b * b)))


class _Pow(_Binary):
    compute = staticmethod(np.power)
    grads = staticmethod(lambda g, a, b: (g * b * np.power(a, b - 1), None))


def _same(a, b):
    return isinstance(b, Tensor) and a.dtype == "float32" and b.dtype == "float32" and \
        a.shape == b.shape


def add(a, b):
    a = as_tensor(a, b if isinstance(b, Tensor) else None)
    if _same(a, b):
        return _c_add(a, b)
    if a.dtype == "float32" and isinstance(b, (int, float)):
        return _c_add_any(a, b)
    return _Add.apply(a, as_tensor(b, a))


def sub(a, b):
    a = as_tensor(a, b if isinstance(b, Tensor) else None)
    if _same(a, b) or (a.dtype == "float32" and isinstance(b, (int, float))):
        return _c_sub_any(a, b)
    return _Sub.apply(a, as_tensor(b, a))


def mul(a, b):
    a = as_tensor(a, b if isinstance(b, Tensor) else None)
    if _same(a, b):
        return _c_mul(a, b)
    if a.dtype == "float32" and isinstance(b, (int, float)):
        return _c_mul_any(a, b)
    return _Mul.apply(a, as_tensor(b, a))


def div(a, b):
    a = as_tensor(a, b if isinstance(b, Tensor) else None)
    if a.dtype == "float32" and isinstance(b, (int, float)):
        return _c_mul_any(a, 1.0 / b)
    return _Div.apply(a, as_tensor(b, a))


def pow(a, exponent):  # noqa: A001 (torch.pow)
    a = as_tensor(a)
    if isinstance(exponent, Tensor):
        raise TypeError("pow: the exponent must be a number (tensor exponents are not supported)")
    return _Pow.apply(a, as_tensor(exponent, a))


# ---- unary functions ----------------------------------------------------------------------------

class _Unary(Function):
    @classmethod
    def forward(cls, ctx, x):
        xn = x.numpy()
        y = cls.compute(xn)
        ctx.save_for_backward(xn, y)
        return _wrap(y)

    @classmethod
    def backward(cls, ctx, grad):
        xn, y = ctx.saved_tensors
        return cls.grad(grad.numpy(), xn, y)


def _sigmoid(x):
    # exp of -|x| only: no overflow for large |x|.
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1 / (1 + e), e / (1 + e)).astype(x.dtype, copy=False)


class _Exp(_Unary):
    compute = staticmethod(np.exp)
    grad = staticmethod(lambda g, x, y: g * y)


class _Log(_Unary):
    compute = staticmethod(np.log)
    grad = staticmethod(lambda g, x, y: g / x)


class _Tanh(_Unary):
    compute = staticmethod(np.tanh)
    grad = staticmethod(lambda g, x, y: g * (1 - y * y))


class _Sigmoid(_Unary):
    compute = staticmethod(_sigmoid)
    grad = staticmethod(lambda g, x, y: g * y * (1 - y))


class _Sqrt(_Unary):
    compute = staticmethod(np.sqrt)
    grad = staticmethod(lambda g, x, y: g / (2 * y))


class _Abs(_Unary):
    compute = staticmethod(np.abs)
    grad = staticmethod(lambda g, x, y: g * np.sign(x))


def exp(x):
    return _Exp.apply(x)


def log(x):
    return _Log.apply(x)


def tanh(x):
    return _Tanh.apply(x)


def sigmoid(x):
    return _Sigmoid.apply(x)


def sqrt(x):
    return _Sqrt.apply(x)


def abs(x):  # noqa: A001 (torch.abs)
    return _Abs.apply(x)


class _Softmax(Function):
    @staticmethod
    def forward(ctx, x, dim, log):
        xn = x.numpy()
        ctx.dim = _dim(dim, xn.ndim, "softmax")
        ctx.log = log
        shifted = xn - xn.max(axis=ctx.dim, keepdims=True)
        if log:
            y = shifted - np.log(np.exp(shifted).sum(axis=ctx.dim, keepdims=True))
        else:
            e = np.exp(shifted)
            y = e / e.sum(axis=ctx.dim, keepdims=True)
        ctx.save_for_backward(y)
        return _wrap(y)

    @staticmethod
    def backward(ctx, grad):
        (y,) = ctx.saved_tensors
        g = grad.numpy()
        if ctx.log:
            return g - np.exp(y) * g.sum(axis=ctx.dim, keepdims=True), None, None
        return y * (g - (g * y).sum(axis=ctx.dim, keepdims=True)), None, None


def softmax(x, dim=-1):
    return _Softmax.apply(x, dim, False)


def log_softmax(x, dim=-1):
    return _Softmax.apply(x, dim, True)


# ---- reductions ---------------------------------------------------------------------------------

class _Sum(Function):
    @staticmethod
    def forward(ctx, x, dim, keepdim, mean):
        xn = x.numpy()
        dims = tuple(_dim(d, xn.ndim, "sum") for d in dim)
        ctx.shape, ctx.dims, ctx.keepdim = xn.shape, dims, keepdim
        count = int(np.prod([xn.shape[d] for d in dims]))
        ctx.scale = 1.0 / builtins.max(1, count) if mean else 1.0
        y = xn.mean(axis=dims, keepdims=keepdim) if mean else xn.sum(axis=dims, keepdims=keepdim)
        return _wrap(y)

    @staticmethod
    def backward(ctx, grad):
        g = grad.numpy()
        if not ctx.keepdim:
            g = np.expand_dims(g, ctx.dims)
        return np.broadcast_to(g * np.asarray(ctx.scale, g.dtype), ctx.shape), None, None, None


def _dims(dim):
    return tuple(dim) if isinstance(dim, (tuple, list, range)) else (dim,)


def sum(x, dim=None, keepdim=False):  # noqa: A001 (torch.sum)
    if dim is None and not keepdim and x.dtype == "float32":
        return _c_sum(x)
    return _Sum.apply(x, _dims(range(x.ndim) if dim is None else dim), keepdim, False)


def mean(x, dim=None, keepdim=False):
    if dim is None and not keepdim and x.dtype == "float32":
        return _c_mul_any(_c_sum(x), 1.0 / builtins.max(1, x.numel()))
    if x.dtype not in ("float32", "float64", "float16"):
        raise TypeError(f"mean needs a floating-point tensor, got {x.dtype}")
    return _Sum.apply(x, _dims(range(x.ndim) if dim is None else dim), keepdim, True)


class _MaxMin(Function):
    @staticmethod
    def forward(ctx, x, dim, keepdim, is_max):
        xn = x.numpy()
        pick = np.argmax if is_max else np.argmin
        if dim is None:
            flat = pick(xn.reshape(-1))
            ctx.index = np.unravel_index(flat, xn.shape) if xn.ndim else ()
            ctx.shape, ctx.dim = xn.shape, None
            return _wrap(xn.reshape(-1)[flat])
        d = _dim(dim, xn.ndim, "max" if is_max else "min")
        idx = np.expand_dims(pick(xn, axis=d), d)
        ctx.index, ctx.shape, ctx.dim, ctx.keepdim = idx, xn.shape, d, keepdim
        values = np.take_along_axis(xn, idx, axis=d)
        return _wrap(values if keepdim else values.squeeze(d))

    @staticmethod
    def backward(ctx, grad):
        g = grad.numpy()
        out = np.zeros(ctx.shape, dtype=g.dtype)
        if ctx.dim is None:
            out[ctx.index] = g
        else:
            if not ctx.keepdim:
                g = np.expand_dims(g, ctx.dim)
            np.put_along_axis(out, ctx.index, g, axis=ctx.dim)
        return out, None, None, None


def _max_min(x, dim, keepdim, is_max):
    if x.numel() == 0:
        raise ValueError(f"{'max' if is_max else 'min'} of an empty tensor")
    values = _MaxMin.apply(x, dim, keepdim, is_max)
    if dim is None:
        return values
    pick = np.argmax if is_max else np.argmin
    index = pick(x.numpy(), axis=_dim(dim, x.ndim, "max"))
    return values, _wrap(np.expand_dims(index, dim) if keepdim else index)


def max(x, dim=None, keepdim=False):  # noqa: A001 (torch.max)
    """The largest element, or with `dim` a (values, indices) pair over that dim."""
    return _max_min(x, dim, keepdim, True)


def min(x, dim=None, keepdim=False):  # noqa: A001 (torch.min)
    return _max_min(x, dim, keepdim, False)


def argmax(x, dim=None, keepdim=False):
    xn = x.numpy()
    if dim is None:
        return _wrap(np.asarray(np.argmax(xn), dtype=np.int64))
    d = _dim(dim, xn.ndim, "argmax")
    return _wrap(np.argmax(xn, axis=d, keepdims=keepdim).astype(np.int64))


# ---- shapes, indexing, joining -----------------------------------------------------------------

def _index(idx):
    """An index with Tensors replaced by their numpy views."""
    if isinstance(idx, tuple):
        return tuple(_np(i) for i in idx)
    return _np(idx)


class _GetItem(Function):
    @staticmethod
    def forward(ctx, x, idx):
        xn = x.numpy()
        ctx.idx, ctx.shape, ctx.dtype = idx, xn.shape, xn.dtype
        return _wrap(np.array(xn[idx]))  # a copy: the result never aliases x

    @staticmethod
    def backward(ctx, grad):
        out = np.zeros(ctx.shape, dtype=ctx.dtype)
        np.add.at(out, ctx.idx, grad.numpy())
        return out, None


def getitem(x, idx):
    return _GetItem.apply(x, _index(idx))


class _Transpose(Function):
    @staticmethod
    def forward(ctx, x, axes):
        ctx.inverse = tuple(np.argsort(axes))
        return _wrap(np.ascontiguousarray(x.numpy().transpose(axes)))

    @staticmethod
    def backward(ctx, grad):
        return np.ascontiguousarray(grad.numpy().transpose(ctx.inverse)), None


def permute(x, *dims):
    dims = tuple(dims[0]) if len(dims) == 1 and isinstance(dims[0], (tuple, list)) else dims
    if sorted(_dim(d, x.ndim, "permute") for d in dims) != list(range(x.ndim)):
        raise ValueError(f"permute: {dims} is not a permutation of the {x.ndim} dims")
    return _Transpose.apply(x, tuple(_dim(d, x.ndim, "permute") for d in dims))


def transpose(x, dim0, dim1):
    axes = list(range(x.ndim))
    a, b = _dim(dim0, x.ndim, "transpose"), _dim(dim1, x.ndim, "transpose")
    axes[a], axes[b] = axes[b], axes[a]
    return _Transpose.apply(x, tuple(axes))


def unsqueeze(x, dim):
    shape = list(x.shape)
    shape.insert(_dim(dim, x.ndim + 1, "unsqueeze"), 1)
    return x.reshape(shape)


def squeeze(x, dim=None):
    if dim is None:
        shape = [s for s in x.shape if s != 1]
    else:
        d = _dim(dim, x.ndim, "squeeze")
        shape = [s for i, s in enumerate(x.shape) if i != d or s != 1]
    return x.reshape(shape)


class _Cat(Function):
    @staticmethod
    def forward(ctx, dim, stack, *tensors):
        arrays = [t.numpy() for t in tensors]
        ctx.dim, ctx.stack = dim, stack
        ctx.sizes = [1 if stack else a.shape[dim] for a in arrays]
        return _wrap(np.stack(arrays, axis=dim) if stack else np.concatenate(arrays, axis=dim))

    @staticmethod
    def backward(ctx, grad):
        g = grad.numpy()
        parts = np.split(g, np.cumsum(ctx.sizes)[:-1], axis=ctx.dim)
        if ctx.stack:
            parts = [p.squeeze(ctx.dim) for p in parts]
        return (None, None) + tuple(np.ascontiguousarray(p) for p in parts)


def _join(tensors, dim, stack, what):
    tensors = [as_tensor(t) for t in tensors]
    if not tensors:
        raise ValueError(f"{what}: needs at least one tensor")
    first = tensors[0]
    ndim = first.ndim + (1 if stack else 0)
    d = _dim(dim, ndim, what)
    for i, t in enumerate(tensors):
        if stack:
            ok = t.shape == first.shape
        else:
            ok = t.ndim == first.ndim and all(
                a == b for j, (a, b) in enumerate(zip(t.shape, first.shape)) if j != d)
        if not ok or t.dtype != first.dtype:
            raise ValueError(f"{what}: tensor {i} is {t.dtype}{list(t.shape)}, tensor 0 is "
                             f"{first.dtype}{list(first.shape)}")
    return _Cat.apply(d, stack, *tensors)


def cat(tensors, dim=0):
    return _join(tensors, dim, False, "cat")


def stack(tensors, dim=0):
    return _join(tensors, dim, True, "stack")


class _Where(Function):
    @staticmethod
    def forward(ctx, cond, a, b):
        c = cond.numpy().astype(bool, copy=False)
        an, bn = a.numpy(), b.numpy()
        ctx.cond, ctx.shapes = c, (an.shape, bn.shape)
        return _wrap(np.where(c, an, bn))

    @staticmethod
    def backward(ctx, grad):
        g = grad.numpy()
        zero = np.zeros((), g.dtype)
        return (None, _unbroadcast(np.where(ctx.cond, g, zero), ctx.shapes[0]),
                _unbroadcast(np.where(ctx.cond, zero, g), ctx.shapes[1]))


def where(condition, a, b):
    like = a if isinstance(a, Tensor) else b if isinstance(b, Tensor) else None
    a, b = as_tensor(a, like), as_tensor(b, like)
    return _Where.apply(as_tensor(condition), a, b)


# ---- matmul -------------------------------------------------------------------------------------

class _Matmul(Function):
    @staticmethod
    def forward(ctx, a, b):
        an, bn = a.numpy(), b.numpy()
        ctx.save_for_backward(an, bn)
        return _wrap(np.matmul(an, bn))

    @staticmethod
    def backward(ctx, grad):
        an, bn = ctx.saved_tensors
        g = grad.numpy()
        ga = _unbroadcast(np.matmul(g, np.swapaxes(bn, -1, -2)), an.shape)
        gb = _unbroadcast(np.matmul(np.swapaxes(an, -1, -2), g), bn.shape)
        return ga, gb


def matmul(a, b):
    """a @ b; batches of matrices broadcast over their leading dims ([B, N, K] @ [K, M], ...)."""
    if a.ndim < 2 or b.ndim < 2 or a.shape[-1] != b.shape[-2]:
        raise ValueError(f"matmul needs [..., N, K] @ [..., K, M], got {list(a.shape)} @ "
                         f"{list(b.shape)}")
    if a.ndim == 2 and b.ndim == 2 and a.dtype == "float32" and b.dtype == "float32":
        return _c_matmul(a, b)
    try:
        np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    except ValueError:
        raise ValueError(f"matmul: batch dims of {list(a.shape)} and {list(b.shape)} do not "
                         "broadcast") from None
    return _Matmul.apply(a, b)


# ---- comparisons (no gradient) ------------------------------------------------------------------

def _compare(op):
    def compare(a, b):
        try:
            return _wrap(op(_np(a), _np(b)))
        except ValueError:
            raise ValueError(f"{op.__name__}: shapes {list(np.shape(_np(a)))} and "
                             f"{list(np.shape(_np(b)))} do not broadcast") from None
    compare.__name__ = op.__name__
    return compare


eq, ne = _compare(np.equal), _compare(np.not_equal)
lt, le = _compare(np.less), _compare(np.less_equal)
gt, ge = _compare(np.greater), _compare(np.greater_equal)


# ---- in-place updates ---------------------------------------------------------------------------

def _check_inplace(t, what):
    if t.requires_grad and _C.is_grad_enabled():
        raise RuntimeError(f"{what} on a tensor that requires a gradient: wrap the update in "
                           "`with paddle.no_grad():` (or compute out of place)")
    return t.numpy()


def setitem(t, idx, value):
    _check_inplace(t, "t[...] = value")[_index(idx)] = _np(value)
    t._bump_version()


def add_(t, other, alpha=1.0):
    view = _check_inplace(t, "add_")
    view += _np(other) * alpha if alpha != 1.0 else _np(other)
    t._bump_version()
    return t


def sub_(t, other, alpha=1.0):
    return add_(t, other, -alpha)


def mul_(t, other):
    view = _check_inplace(t, "mul_")
    view *= _np(other)
    t._bump_version()
    return t


def div_(t, other):
    view = _check_inplace(t, "div_")
    view /= _np(other)
    t._bump_version()
    return t


def fill_(t, value):
    _check_inplace(t, "fill_")[...] = _np(value)
    t._bump_version()
    return t


def zero_(t):
    return fill_(t, 0)


def _augmented(inplace, out_of_place):
    def op(self, other):
        recorded = _C.is_grad_enabled() and (
            self.requires_grad or (isinstance(other, Tensor) and other.requires_grad))
        if recorded:
            return out_of_place(self, other)
        return inplace(self, other)
    return op


def _bool(t):
    if t.numel() != 1:
        raise ValueError(f"the truth value of a tensor of shape {list(t.shape)} is ambiguous; "
                         "use .any() or .all()")
    return bool(t.item())


def install():
    """Adds the operations to paddle.Tensor as methods and operators."""
    methods = {
        "exp": exp, "log": log, "tanh": tanh, "sigmoid": sigmoid, "sqrt": sqrt, "abs": abs,
        "softmax": softmax, "log_softmax": log_softmax, "sum": sum, "mean": mean, "max": max,
        "min": min, "argmax": argmax, "permute": permute, "transpose": transpose,
        "unsqueeze": unsqueeze, "squeeze": squeeze, "matmul": matmul, "pow": pow,
        "eq": eq, "ne": ne, "lt": lt, "le": le, "gt": gt, "ge": ge,
        "add_": add_, "sub_": sub_, "mul_": mul_, "div_": div_, "fill_": fill_, "zero_": zero_,
        "any": lambda t: bool(np.any(t.numpy())), "all": lambda t: bool(np.all(t.numpy())),
        "__getitem__": getitem, "__setitem__": setitem, "__bool__": _bool,
        "__add__": add, "__radd__": add, "__sub__": sub, "__rsub__": lambda a, b: sub(b, a),
        "__mul__": mul, "__rmul__": mul, "__truediv__": div,
        "__rtruediv__": lambda a, b: div(as_tensor(b, a), a), "__pow__": pow,
        "__matmul__": matmul, "__eq__": eq, "__ne__": ne, "__lt__": lt, "__le__": le,
        "__gt__": gt, "__ge__": ge,
        "__iadd__": _augmented(add_, add), "__isub__": _augmented(sub_, sub),
        "__imul__": _augmented(mul_, mul), "__itruediv__": _augmented(div_, div),
    }
    for name, fn in methods.items():
        setattr(Tensor, name, fn)
    Tensor.__hash__ = object.__hash__  # tensors stay usable as dict keys by identity
