"""Paddle Collective: data-parallel deep learning without a parameter server.

`import paddle` gives single-process training: tensors that view numpy memory without copies
and take part in autograd, paddle.nn layers and models, paddle.optim, paddle.data, and
paddle.save / paddle.load; on a CUDA device too where the build has CUDA and a GPU is present
(t.to("cuda"), Module.to("cuda"), docs/python.md "GPU"). paddle.distributed runs collectives
across processes.
"""
import contextlib

import numpy as np

from paddle import _C

_C.check_log_settings()  # a ValueError now rather than an abort at the first log line

from paddle._C import (Tensor, bfloat16_to_float, check_device, convert_path, dtype_size,
                       float_to_bfloat16, float_to_half, get_num_threads, half_to_float,
                       is_grad_enabled, philox_uniform, set_num_threads)
from paddle import autograd, _tensor_ops  # noqa: I100 (autograd first: _tensor_ops uses it)
from paddle._tensor_ops import (abs, argmax, cat, div, eq, exp, ge, gt, le, log, log_softmax, lt,
                                matmul, max, mean, min, mul, ne, permute, pow, sigmoid, softmax,
                                sqrt, squeeze, stack, sum, tanh, transpose, unsqueeze, where)

_tensor_ops.install()

__all__ = [
    "Tensor", "from_numpy", "tensor", "zeros", "ones", "full", "matmul", "no_grad", "grad",
    "is_grad_enabled", "save", "load", "manual_seed", "set_num_threads", "get_num_threads",
    "bfloat16_to_float", "convert_path", "dtype_size", "float_to_bfloat16", "float_to_half",
    "half_to_float", "philox_uniform", "autograd", "abs", "argmax", "cat", "div", "eq", "exp",
    "ge", "gt", "le", "log", "log_softmax", "lt", "max", "mean", "min", "mul", "ne", "permute",
    "pow", "sigmoid", "softmax", "sqrt", "squeeze", "stack", "sum", "tanh", "transpose",
    "unsqueeze", "where", "randn", "rand", "arange", "check_device", "cuda_is_available",
]


def from_numpy(array, requires_grad=False, name="", dtype=None):
    """A Tensor viewing `array`'s memory (no copy); the array stays alive as long as the tensor.

    `dtype` reinterprets same-sized elements, e.g. "bfloat16" over uint16 bits.
    """
    if not isinstance(array, np.ndarray):
        raise TypeError(f"from_numpy takes a numpy.ndarray, got {type(array).__name__}")
    return Tensor.from_numpy(array, requires_grad, name, dtype)


def cuda_is_available():
    """Whether this build has CUDA and this process sees a GPU and its driver
    (paddle.check_device("cuda") raises the reason when not)."""
    try:
        check_device("cuda")
    except (RuntimeError, ValueError):
        return False
    return True


def _placed(t, device, requires_grad, name=""):
    """`t` (a new CPU tensor) as a leaf named `name` on `device` (None: the CPU)."""
    if device is not None:
        t = t._to_device(device)
    t = Tensor(t, requires_grad)
    t.name = name
    return t


def tensor(data, dtype=None, requires_grad=False, name="", device=None):
    """A new Tensor holding a copy of `data` (nested lists, scalars, arrays, Tensors), on
    `device` (default: the CPU, or the device of a Tensor `data`).

    Python floats become float32 (not numpy's float64), as in PyTorch.
    """
    if isinstance(data, Tensor):
        device = data.device if device is None else device
        data = data.detach().cpu().numpy()
    default_float = dtype is None and not isinstance(data, np.ndarray)
    array = np.array(data, dtype=dtype, copy=True)
    if default_float and array.dtype == np.float64:
        array = array.astype(np.float32)
    if not array.dtype.isnative:  # e.g. '>f4' on x86: a copy anyway, so convert it
        array = array.astype(array.dtype.newbyteorder("="))
    t = Tensor.from_numpy(np.ascontiguousarray(array), False, "", None)
    return _placed(t, device, requires_grad, name)


def zeros(shape, dtype="float32", requires_grad=False, device=None):
    return tensor(np.zeros(shape, dtype=dtype), requires_grad=requires_grad, device=device)


def ones(shape, dtype="float32", requires_grad=False, device=None):
    return tensor(np.ones(shape, dtype=dtype), requires_grad=requires_grad, device=device)


def full(shape, value, dtype="float32", requires_grad=False, device=None):
    return _placed(_C.full(shape, value, dtype), device, requires_grad)


def randn(*shape, dtype="float32", requires_grad=False, seed=None, device=None):
    """Standard normal samples from numpy's generator (seeded by `seed` when given), drawn on the
    host whatever the device, so a seed gives the same values on every device."""
    shape = tuple(shape[0]) if len(shape) == 1 and isinstance(shape[0], (tuple, list)) else shape
    values = np.random.default_rng(seed).standard_normal(shape).astype(dtype)
    return _placed(from_numpy(values), device, requires_grad)


def rand(*shape, dtype="float32", requires_grad=False, seed=None, device=None):
    """Uniform samples in [0, 1) from numpy's generator (seeded by `seed` when given)."""
    shape = tuple(shape[0]) if len(shape) == 1 and isinstance(shape[0], (tuple, list)) else shape
    values = np.random.default_rng(seed).random(shape).astype(dtype)
    return _placed(from_numpy(values), device, requires_grad)


def arange(start, end=None, step=1, dtype=None):
    values = np.arange(start, end, step) if end is not None else np.arange(start)
    if dtype is None and values.dtype == np.float64:
        dtype = "float32"
    return from_numpy(np.ascontiguousarray(values.astype(dtype or values.dtype)))


_DEVICE_PREFIXES = ("cpu", "cuda", "gpu")


def _tensor_to(self, dtype):
    """A copy converted to `dtype` (float32, float64, int64, ...), cut from the graph; or, for
    a device ("cpu", "cuda", "cuda:N"), the tensor on that device: itself when it is there
    already, else a copy that autograd differentiates through (Note [Tensor.to a device] in
    python/bindings/tensor.cc). RuntimeError naming the device and the reason where it cannot
    be used (no CUDA in the build, no GPU or driver); ValueError for a bad device name."""
    if isinstance(dtype, str) and dtype.split(":")[0].strip().lower() in _DEVICE_PREFIXES:
        return self._to_device(dtype)
    if self.is_cuda:  # dtype conversion runs on the host (numpy)
        return self.cpu().to(dtype)._to_device(self.device)
    if self.dtype == dtype:
        return self.clone()
    if self.dtype == "bfloat16":
        raise TypeError("converting from bfloat16 is not supported; keep a float32 copy")
    if dtype == "bfloat16":
        bits = float_to_bfloat16(np.asarray(self.numpy(), dtype=np.float32))
        return from_numpy(bits, dtype="bfloat16")
    return tensor(self.numpy().astype(dtype))


Tensor.to = _tensor_to
Tensor.cpu = lambda self: self._to_device("cpu")
Tensor.cuda = lambda self, device=0: self._to_device(
    device if isinstance(device, str) else f"cuda:{int(device)}")
Tensor.__iter__ = lambda self: iter(self.numpy())


@contextlib.contextmanager
def no_grad():
    """Operations inside record no autograd graph (evaluation, manual updates)."""
    previous = _C.is_grad_enabled()
    _C.set_grad_enabled(False)
    try:
        yield
    finally:
        _C.set_grad_enabled(previous)


def grad(output, inputs, grad_output=None, retain_graph=False):
    """Gradients of `output` with respect to each leaf tensor in `inputs`, as new tensors.

    Leaves' .grad is left as it was: their current gradients are saved, cleared for this pass and
    restored afterwards. Unlike torch.autograd.grad, inputs must be leaves that require a
    gradient (the C++ engine accumulates into leaves only). Frees the graph unless retain_graph.
    """
    single = isinstance(inputs, Tensor)
    inputs = [inputs] if single else list(inputs)
    for i, t in enumerate(inputs):
        if not t.is_leaf or not t.requires_grad:
            raise ValueError(f"paddle.grad: inputs[{i}] must be a leaf that requires a gradient")
    saved = [None if t.grad is None else t.grad.clone() for t in inputs]
    for t in inputs:
        t.zero_grad()
    output.backward(grad_output, retain_graph=retain_graph)
    result = []
    for t, old in zip(inputs, saved):
        g = t.grad
        result.append(None if g is None else g.clone())
        if g is not None:
            if old is None:
                t.zero_grad()
            else:
                g.copy_(old)
    return result[0] if single else result


def manual_seed(seed):
    """Seeds the generator paddle.nn layers draw their initial weights from."""
    from paddle import nn  # pylint: disable=import-outside-toplevel
    nn._reset_default_generator(seed)


def save(obj, path, step=0):
    """Saves a dict (nested dicts allowed) of Tensors, numpy arrays, ints and strs to `path`.

    The file is a checkpoint file of paddle/checkpoint (every byte checked on load); it is
    written to a temporary file and renamed, so `path` is either the old or the new file.
    Nested keys are joined with "/".
    """
    tensors, ints, strings = {}, {}, {}

    def walk(prefix, value):
        if isinstance(value, dict):
            for k, v in value.items():
                if not isinstance(k, str) or "/" in k:
                    raise ValueError(f"paddle.save: key {k!r} must be a str without '/'")
                walk(f"{prefix}{k}" if not prefix else f"{prefix}/{k}", v)
        elif isinstance(value, Tensor):
            tensors[prefix] = value
        elif isinstance(value, np.ndarray):
            tensors[prefix] = from_numpy(np.ascontiguousarray(value))
        elif isinstance(value, (bool, np.bool_)):
            raise TypeError(f"paddle.save: {prefix!r} is a bool; save it as an int")
        elif isinstance(value, (int, np.integer)):
            ints[prefix] = int(value)
        elif isinstance(value, str):
            strings[prefix] = value
        else:
            raise TypeError(f"paddle.save: {prefix!r} has unsupported type "
                            f"{type(value).__name__} (Tensor, ndarray, int, str or dict)")

    if not isinstance(obj, dict):
        raise TypeError(f"paddle.save takes a dict, got {type(obj).__name__}")
    walk("", obj)
    _C.save_state(str(path), tensors, ints, strings, step)


def load(path):
    """Loads what paddle.save wrote: the same nesting, Tensors for tensors."""
    tensors, ints, strings, _ = _C.load_state(str(path))
    out = {}
    for flat in (tensors, ints, strings):
        for key, value in flat.items():
            node = out
            *parents, leaf = key.split("/")
            for p in parents:
                node = node.setdefault(p, {})
            node[leaf] = value
    return out


from paddle import data, distributed, nn, optim  # noqa: E402  (they import paddle)
