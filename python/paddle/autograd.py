"""paddle.autograd: custom differentiable operations written in Python, and what runs around
Tensor.backward().

    class Square(paddle.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return paddle.from_numpy(x.numpy() ** 2)
        @staticmethod
        def backward(ctx, grad):
            (x,) = ctx.saved_tensors
            return grad * x * 2.0
    y = Square.apply(x)

forward runs without recording a graph; its result joins the graph as one node whose backward
is the Python `backward` (the C++ engine calls it: Note [Python functions in the graph] in
python/bindings/tensor.cc). backward returns one gradient per Tensor argument of forward (None
for none), as a Tensor or a numpy array of the input's shape.

save_for_backward takes Tensors or numpy views of them (x.numpy()). Each saved one that is an
input or the output of forward, or a view of one, is declared to the C++ node (Note [Saved tensor
versions] in paddle/core/autograd/node.h): if it is changed in place before backward runs,
backward raises RuntimeError naming the function, the input and both versions.
"""
import threading

import numpy as np

from paddle import _C
from paddle._C import Tensor

__all__ = ["Function", "FunctionCtx", "backward"]

_C_backward = Tensor.backward


class FunctionCtx:
    """What forward hands to backward: saved tensors and any attributes set on it."""

    def __init__(self):
        self.saved_tensors = ()
        self.needs_input_grad = ()

    def save_for_backward(self, *tensors):
        self.saved_tensors = tensors


class Function:
    """Subclass with static forward(ctx, *args) and backward(ctx, *grads); call apply()."""

    @staticmethod
    def forward(ctx, *args):
        raise NotImplementedError("autograd.Function subclasses define forward(ctx, *args)")

    @staticmethod
    def backward(ctx, grad_output):
        raise NotImplementedError("autograd.Function subclasses define backward(ctx, grad)")

    @classmethod
    def apply(cls, *args):
        ctx = FunctionCtx()
        inputs = [a for a in args if isinstance(a, Tensor)]
        ctx.needs_input_grad = tuple(isinstance(a, Tensor) and a.requires_grad for a in args)
        previous = _C.is_grad_enabled()
        _C.set_grad_enabled(False)
        try:
            output = cls.forward(ctx, *args)
        finally:
            _C.set_grad_enabled(previous)
        if not isinstance(output, Tensor):
            raise TypeError(f"{cls.__name__}.forward must return a paddle.Tensor, got "
                            f"{type(output).__name__}")
        if not previous or not any(t.requires_grad for t in inputs):
            return output
        positions = [i for i, a in enumerate(args) if isinstance(a, Tensor)]
        dtypes = [t.dtype for t in inputs]
        name = cls.__name__
        saved_inputs, saved_output = _saved_positions(ctx.saved_tensors, inputs, output)

        def run_backward(grad):
            mode = _C.is_grad_enabled()
            _C.set_grad_enabled(False)  # gradients are not differentiated again
            try:
                grads = cls.backward(ctx, grad)
            finally:
                _C.set_grad_enabled(mode)
            if not isinstance(grads, tuple):
                grads = (grads,)
            if len(grads) != len(args):
                raise ValueError(f"{name}.backward returned {len(grads)} gradients; forward "
                                 f"took {len(args)} arguments")
            out = []
            for i, pos in enumerate(positions):
                g = grads[pos]
                if isinstance(g, np.ndarray):
                    g = np.ascontiguousarray(g, dtype=dtypes[i])
                out.append(g)
            return out

        return _C._record_function(output, inputs, run_backward, name=name,
                                   saved_inputs=saved_inputs, saved_output=saved_output)


def _memory(t):
    """A numpy view of a Tensor's memory, or None (bfloat16 has no numpy dtype)."""
    try:
        return t.numpy()
    except (TypeError, ValueError, RuntimeError):
        return None


def _saved_positions(saved, inputs, output):
    """Which inputs (positions in `inputs`) and whether the output are among `saved` (Tensors or
    numpy arrays, matched by identity or by shared memory): what the node's version check
    watches. Anything else saved is private to the function and cannot be changed by the user."""
    if not saved:
        return [], False
    candidates = list(inputs) + [output]
    found = set()
    views = None
    for item in saved:
        if isinstance(item, Tensor):
            hit = [i for i, t in enumerate(candidates) if t is item]
            if hit:
                found.update(hit)
                continue
            item = _memory(item)
        if not isinstance(item, np.ndarray) or item.size == 0:
            continue
        if views is None:
            views = [_memory(t) for t in candidates]
        for i, view in enumerate(views):
            if view is not None and view.size and np.may_share_memory(item, view):
                found.add(i)
    n = len(inputs)
    return sorted(i for i in found if i < n), n in found


# Note [Finalizers after backward]: a data-parallel wrapper that ran a forward pass waits for
# this thread's next backward pass to end and then finishes its gradient reduction (PyTorch's
# DDP does the same through the engine's final callback). Tensor.backward runs them in order;
# a failing backward drops them, as DistributedDataParallel::Backward skips the reduction.
_local = threading.local()


def _pending():
    if not hasattr(_local, "finalizers"):
        _local.finalizers = []
    return _local.finalizers


def add_backward_finalizer(key, fn):
    """Runs fn() after this thread's next successful backward pass (once per key)."""
    pending = _pending()
    if all(k is not key for k, _ in pending):
        pending.append((key, fn))


def backward(tensor, gradient=None, retain_graph=False):
    """Runs the backward pass from `tensor`, then the waiting finalizers. The pass frees the
    graph's saved tensors unless retain_graph; a second pass through a freed graph raises
    RuntimeError naming the operation (Note [Freed graphs] in paddle/core/autograd/node.h)."""
    pending = _pending()
    try:
        _C_backward(tensor, gradient, retain_graph)
    except BaseException:
        pending.clear()
        raise
    todo = list(pending)
    pending.clear()
    for _, fn in todo:
        fn()


def _tensor_backward(self, gradient=None, retain_graph=False):
    """Runs the backward pass from this tensor; leaves accumulate into .grad. Frees the graph
    unless retain_graph (backward through it again then raises RuntimeError)."""
    backward(self, gradient, retain_graph)


Tensor.backward = _tensor_backward
