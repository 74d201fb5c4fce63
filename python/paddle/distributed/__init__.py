"""paddle.distributed: collectives across processes, torch.distributed style.

    import paddle.distributed as dist
    dist.init_process_group("native", init_method="tcp://127.0.0.1:29500", rank=r, world_size=n)
    dist.all_reduce(array)              # numpy array, torch CPU tensor or paddle.Tensor, in place
    work = dist.all_reduce(t, op=dist.ReduceOp.MAX, async_op=True); work.wait()

Contiguous inputs are used in place, without copies (numpy memory directly; torch tensors through
their .numpy() view; paddle.Tensors on a CUDA device in device memory, with the nccl backend or
the native one). Non-contiguous or read-only outputs, unsupported dtypes and numpy arrays
of the other byte order raise ValueError or TypeError before anything is sent; so does a timeout
that is not a positive, finite number of seconds. Waiting releases the GIL. Failures raise DistError
subclasses carrying the C++ message: DistTimeoutError (an operation ran past its timeout),
DistPeerError (a peer was lost: a DistNetworkError), DistStoreError (the rendezvous store);
invalid arguments raise ValueError.
"""
import datetime
import math
import os

import numpy as np

from paddle import _C, autograd
from paddle._C import (DistError, DistNetworkError, DistPeerError, DistStoreError,
                       DistStoreTimeoutError, DistTimeoutError, Tensor)
from paddle._C.distributed import AucHistogram, ClassificationTotals, ReduceOp, Work

__all__ = [
    "DistError", "DistNetworkError", "DistPeerError", "DistStoreError", "DistStoreTimeoutError",
    "DistTimeoutError", "ReduceOp", "Work", "ProcessGroup", "init_process_group",
    "is_initialized", "get_rank", "get_world_size", "get_backend", "destroy_process_group",
    "new_group", "all_reduce", "broadcast", "reduce", "all_gather", "reduce_scatter",
    "all_to_all", "barrier", "send", "recv", "DistributedDataParallel", "AucHistogram",
    "ClassificationTotals", "sum_over_ranks", "ZeroRedundancyOptimizer",
]

_default = {"group": None}

try:  # torch is optional: only needed to pass torch tensors
    import torch as _torch
except ImportError:  # pragma: no cover
    _torch = None

_TORCH_DTYPES = {}
if _torch is not None:
    _TORCH_DTYPES = {
        _torch.float32: None, _torch.float64: None, _torch.float16: None, _torch.int8: None,
        _torch.uint8: None, _torch.int32: None, _torch.int64: None, _torch.bool: None,
        _torch.bfloat16: "bfloat16",
    }


class ProcessGroup:
    """A group of ranks (the default one from init_process_group, or one from new_group)."""

    def __init__(self, native, ranks):
        self._native = native
        self.ranks = list(ranks)

    @property
    def rank(self):
        return self._native.rank

    @property
    def size(self):
        return self._native.size

    def __repr__(self):
        return f"ProcessGroup(rank={self.rank}, size={self.size}, ranks={self.ranks})"


def _seconds(timeout):
    """A timeout argument (seconds or a timedelta) as seconds; None stays None (the default).

    NaN and infinity are rejected: either would be an infinite wait."""
    if timeout is None:
        return None
    if isinstance(timeout, datetime.timedelta):
        seconds = timeout.total_seconds()
    else:
        try:
            seconds = float(timeout)
        except (TypeError, ValueError):
            raise ValueError(f"timeout must be a number of seconds or a datetime.timedelta, got "
                             f"{timeout!r}") from None
    if not (math.isfinite(seconds) and seconds > 0):
        raise ValueError(f"timeout must be a positive, finite number of seconds, got {timeout!r}")
    return seconds


def _with_query(url, rank, world_size):
    """Adds rank / world_size to a URL's query unless it names them already."""
    extra = []
    if rank is not None and "rank=" not in url:
        extra.append(f"rank={int(rank)}")
    if world_size is not None and "world_size=" not in url:
        extra.append(f"world_size={int(world_size)}")
    if not extra:
        return url
    return url + ("&" if "?" in url else "?") + "&".join(extra)


def init_process_group(backend="native", init_method="env://", timeout=300.0, rank=None,
                       world_size=None, debug_checks=None):
    """Meets the other ranks through `init_method` and builds the default group.

    backend: "native", "gloo" or "nccl" (CUDA tensors only, one GPU per rank: PADDLE_CUDA_DEVICE,
    else LOCAL_RANK, else the rank, modulo the visible devices; Note [NCCL backend semantics] in
    paddle/collective/backends/nccl/nccl_communicator.h). Where nccl cannot run (no CUDA in the
    build, no GPU or driver) it raises RuntimeError saying which, before the rendezvous.
    The list forms of all_gather, reduce_scatter and all_to_all pack through host memory, so with
    nccl pass one tensor of world_size blocks instead.
    init_method: env:// (MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE), tcp://host:port,
    file:///path or etcd://host:port/job; rank and world_size are added to the URL's query when
    given. timeout (seconds or datetime.timedelta) bounds the
    rendezvous and is every collective's default timeout. debug_checks (default
    PADDLE_DEBUG_CHECKS=1) checks that ranks agree on each collective's arguments first.
    """
    if _default["group"] is not None:
        raise RuntimeError("init_process_group was already called; call destroy_process_group "
                           "first")
    if backend not in ("native", "gloo", "nccl"):
        raise ValueError(f"backend={backend!r}: choose 'native', 'gloo' or 'nccl'")
    if backend == "nccl":
        try:  # every rank fails alike here, rather than after waiting for the others
            _C.check_device("cuda")
        except (RuntimeError, ValueError) as e:  # ValueError: a driver that sees no device
            raise RuntimeError(f"init_process_group(backend='nccl'): {e}") from None
    if timeout is None:
        raise ValueError("timeout must be a positive, finite number of seconds, got None")
    seconds = _seconds(timeout)
    if world_size is not None and not 1 <= int(world_size) <= _C.distributed.MAX_WORLD_SIZE:
        raise ValueError(f"world_size={world_size!r}: it must be from 1 to "
                         f"{_C.distributed.MAX_WORLD_SIZE}")
    if debug_checks is None:
        debug_checks = os.environ.get("PADDLE_DEBUG_CHECKS", "") == "1"
    url = _with_query(init_method, rank, world_size)
    native = _C.distributed.ProcessGroup.create(url, backend, seconds, bool(debug_checks))
    _default["group"] = ProcessGroup(native, range(native.size))


def is_initialized():
    return _default["group"] is not None


def _group(group):
    g = group if group is not None else _default["group"]
    if g is None:
        raise RuntimeError("paddle.distributed is not initialized: call init_process_group first")
    if isinstance(g, _NonMember):
        raise ValueError("this rank is not a member of the group")
    if g._native is None:
        raise RuntimeError("the process group was destroyed")
    return g


def get_rank(group=None):
    return _group(group).rank


def get_world_size(group=None):
    return _group(group).size


def get_backend(group=None):
    return _group(group)._native.backend


class _NonMember:
    """What new_group returns on ranks outside the group (torch returns a sentinel too)."""

    def __repr__(self):
        return "paddle.distributed.GroupMember.NON_GROUP_MEMBER"


def new_group(ranks=None):
    """A group of `ranks` (every rank of the default group must call it, with the same list)."""
    parent = _group(None)
    ranks = sorted(set(range(parent.size) if ranks is None else ranks))
    native = parent._native.split(ranks)
    return _NonMember() if native is None else ProcessGroup(native, ranks)


def destroy_process_group(group=None):
    """Closes `group`, or the default group and with it paddle.distributed's state.

    Waits for the group's pending operations and for the checks still on their way after the
    last call returned (a rank may complete its last collective before it learns that another
    rank called a different one), then releases the group. Raises DistError (a RuntimeError)
    naming the ranks and calls when that shows a failure; the group is released all the same.
    """
    g = group if group is not None else _default["group"]
    if g is None or isinstance(g, _NonMember):
        return
    if group is None:
        _default["group"] = None
    native, g._native = g._native, None
    if native is not None:
        native.close()


def _as_tensor(obj, what, writable):
    """A paddle.Tensor over `obj`'s memory (no copy), or a clear TypeError/ValueError."""
    if isinstance(obj, Tensor):
        return obj
    if isinstance(obj, np.ndarray):
        if writable and not obj.flags.writeable:
            raise ValueError(f"the {what} array is read-only, but the operation writes its result "
                             "in place; pass a writable array (arr.copy())")
        if not obj.flags.c_contiguous:
            raise ValueError(f"the {what} array (shape {obj.shape}, strides {obj.strides}) is not "
                             "C-contiguous; pass np.ascontiguousarray(arr) and read the result "
                             "from that")
        if not obj.dtype.isnative:
            raise TypeError(f"the {what} array has dtype {obj.dtype.str}, whose byte order is not "
                            "this machine's; collectives use the memory in place: pass "
                            "arr.astype(arr.dtype.newbyteorder('=')) and read the result from that")
        return Tensor.from_numpy(obj, False, "", None)
    if _torch is not None and isinstance(obj, _torch.Tensor):
        if obj.device.type != "cpu":
            raise ValueError(f"the {what} torch tensor is on {obj.device}; torch tensors are "
                             "passed through numpy, so CPU only: for GPU memory pass a "
                             "paddle.Tensor on the device (t.to('cuda'))")
        if not obj.is_contiguous():
            raise ValueError(f"the {what} torch tensor (shape {tuple(obj.shape)}, stride "
                             f"{obj.stride()}) is not contiguous; pass t.contiguous() and read "
                             "the result from that")
        if obj.dtype not in _TORCH_DTYPES:
            raise TypeError(f"the {what} torch tensor has unsupported dtype {obj.dtype}")
        t = obj.detach()
        if obj.dtype == _torch.bfloat16:
            return Tensor.from_numpy(t.view(_torch.int16).numpy(), False, "", "bfloat16")
        return Tensor.from_numpy(t.numpy(), False, "", None)
    raise TypeError(f"the {what} must be a numpy array, a torch CPU tensor or a paddle.Tensor, "
                    f"got {type(obj).__name__}")


def _numpy_like(t):
    """A new numpy array with t's shape and dtype (bfloat16 as uint16 bits)."""
    dtype = np.uint16 if t.dtype == "bfloat16" else np.dtype(t.dtype)
    return np.empty(t.shape, dtype=dtype)


def _tensor_of(array, like):
    return Tensor.from_numpy(array, False, "", "bfloat16" if like.dtype == "bfloat16" else None)


def _copy_into(dst, src_tensor, what):
    """dst[...] = src for each supported container type (a list entry of all_gather, ...)."""
    _as_tensor(dst, what, writable=True).copy_(src_tensor)


class _PostWork:
    """An async Work whose result still has to be copied out (list outputs)."""

    def __init__(self, work, post):
        self._work = work
        self._post = post

    def wait(self, timeout=None):
        self._work.wait(_seconds(timeout))
        if self._post is not None:
            post, self._post = self._post, None
            post()
        return True

    def is_completed(self):
        return self._work.is_completed()

    def __repr__(self):
        return repr(self._work)


def _finish(work, async_op, post=None):
    if async_op:
        return work if post is None else _PostWork(work, post)
    work.wait(None)
    if post is not None:
        post()
    return None


def _flat_in(tensors, what):
    """A list of same-shaped inputs packed into one contiguous tensor (a copy)."""
    ts = [_as_tensor(t, what, writable=False) for t in tensors]
    if not ts:
        raise ValueError(f"the {what} list is empty")
    first = ts[0]
    for i, t in enumerate(ts):
        if t.shape != first.shape or t.dtype != first.dtype:
            raise ValueError(f"{what}[{i}] is {t.dtype}{list(t.shape)} but {what}[0] is "
                             f"{first.dtype}{list(first.shape)}")
    packed = np.empty((len(ts),) + tuple(first.shape), dtype=_numpy_like(first).dtype)
    whole = _tensor_of(packed, first)
    for i, t in enumerate(ts):
        _tensor_of(packed[i], first).copy_(t)
    return whole, first


def all_reduce(tensor, op=ReduceOp.SUM, group=None, async_op=False, timeout=None):
    """In place: every rank's `tensor` becomes the element-wise `op` over all ranks."""
    t = _as_tensor(tensor, "tensor", writable=True)
    return _finish(_group(group)._native.allreduce(t, op, _seconds(timeout)), async_op)


def broadcast(tensor, src, group=None, async_op=False, timeout=None):
    """Rank `src`'s tensor is copied into every rank's `tensor` (src: rank within the group)."""
    t = _as_tensor(tensor, "tensor", writable=True)
    return _finish(_group(group)._native.broadcast(t, src, _seconds(timeout)), async_op)


def reduce(tensor, dst, op=ReduceOp.SUM, group=None, async_op=False, timeout=None):
    """Rank `dst`'s tensor becomes the reduction; other ranks' tensors are unspecified after."""
    t = _as_tensor(tensor, "tensor", writable=True)
    return _finish(_group(group)._native.reduce(t, dst, op, _seconds(timeout)), async_op)


def all_gather(output, tensor, group=None, async_op=False, timeout=None):
    """Every rank's `tensor` into `output`: a list of world_size tensors shaped like `tensor`, or
    one tensor of world_size x tensor's elements (rank-major; written in place, no copy)."""
    g = _group(group)
    t = _as_tensor(tensor, "tensor", writable=False)
    if isinstance(output, (list, tuple)):
        if len(output) != g.size:
            raise ValueError(f"all_gather: the output list has {len(output)} entries, the group "
                             f"has {g.size} ranks")
        packed = np.empty((g.size,) + tuple(t.shape), dtype=_numpy_like(t).dtype)
        whole = _tensor_of(packed, t)

        def post():
            for i, out in enumerate(output):
                _copy_into(out, _tensor_of(packed[i], t), f"output[{i}]")

        return _finish(g._native.allgather(t, whole, _seconds(timeout)), async_op, post)
    out = _as_tensor(output, "output", writable=True)
    return _finish(g._native.allgather(t, out, _seconds(timeout)), async_op)


def reduce_scatter(output, input, op=ReduceOp.SUM, group=None, async_op=False, timeout=None):  # noqa: A002
    """Rank r's `output` becomes the reduction over ranks of block r of `input` (a list of
    world_size tensors shaped like `output`, or one tensor of world_size x output's elements)."""
    g = _group(group)
    out = _as_tensor(output, "output", writable=True)
    if isinstance(input, (list, tuple)):
        if len(input) != g.size:
            raise ValueError(f"reduce_scatter: the input list has {len(input)} entries, the "
                             f"group has {g.size} ranks")
        whole, _ = _flat_in(input, "input")
    else:
        whole = _as_tensor(input, "input", writable=False)
    return _finish(g._native.reduce_scatter(whole, out, op, _seconds(timeout)), async_op)


def all_to_all(output, input, group=None, async_op=False, timeout=None):  # noqa: A002
    """Block j of rank i's `input` goes to block i of rank j's `output`. Blocks are list entries
    or equal slices of one tensor (all_to_all_single)."""
    g = _group(group)
    if isinstance(input, (list, tuple)):
        whole_in, first = _flat_in(input, "input")
    else:
        whole_in = _as_tensor(input, "input", writable=False)
        first = whole_in
    if isinstance(output, (list, tuple)):
        if len(output) != g.size:
            raise ValueError(f"all_to_all: the output list has {len(output)} entries, the group "
                             f"has {g.size} ranks")
        packed = np.empty(tuple(whole_in.shape), dtype=_numpy_like(whole_in).dtype)
        whole_out = _tensor_of(packed, first)

        def post():
            blocks = packed.reshape(g.size, -1)
            for i, out in enumerate(output):
                dst = _as_tensor(out, f"output[{i}]", writable=True)
                dst.copy_(_tensor_of(blocks[i].reshape(dst.shape), first))

        return _finish(g._native.alltoall(whole_in, whole_out, _seconds(timeout)), async_op, post)
    out = _as_tensor(output, "output", writable=True)
    return _finish(g._native.alltoall(whole_in, out, _seconds(timeout)), async_op)


def barrier(group=None, async_op=False, timeout=None):
    return _finish(_group(group)._native.barrier(_seconds(timeout)), async_op)


def send(tensor, dst, tag=0, group=None, async_op=False, timeout=None):
    t = _as_tensor(tensor, "tensor", writable=False)
    return _finish(_group(group)._native.send(t, dst, tag, _seconds(timeout)), async_op)


def recv(tensor, src, tag=0, group=None, async_op=False, timeout=None):
    t = _as_tensor(tensor, "tensor", writable=True)
    return _finish(_group(group)._native.recv(t, src, tag, _seconds(timeout)), async_op)


class DistributedDataParallel:
    """Data-parallel training of a module (paddle/parallel/distributed_data_parallel.h): a C++
    layer or model, or a paddle.nn.Module written in Python.

    Creating it (on every rank) checks that all ranks built the same model and copies rank 0's
    parameters and buffers everywhere. Call the wrapper for the forward pass (any arguments;
    they go to the module) and then `loss.backward()`: gradients are averaged across ranks in
    buckets while the backward pass runs, and the reduction is finished when it ends (Note
    [Finalizers after backward] in paddle/autograd.py). `ddp.backward(loss)` is the same call.
    Bucket caps left None come from the "bucket" line of the PADDLE_TUNING_PARAMS file when it
    has one (`tools/simulate step --search --emit=FILE`), else 25 MiB (1 MiB for the first).
    """

    def __init__(self, module, bucket_cap_mb=None, first_bucket_mb=None, compression="none",
                 find_unused_parameters=False, timeout=None, group=None):
        self.module = module  # keeps a Python module alive: Note [Python module lifetime]
        self._ddp = _C.distributed.DistributedDataParallel(
            module, _group(group)._native, bucket_cap_mb, first_bucket_mb, compression,
            find_unused_parameters, _seconds(timeout))

    def __call__(self, *inputs, **kwargs):
        if _C.is_grad_enabled() and self.module.training:
            self._ddp.prepare_for_backward()
            autograd.add_backward_finalizer(self, self._ddp.finalize_backward)
        return self.module(*inputs, **kwargs)

    forward = __call__

    def backward(self, loss):
        """loss.backward(), kept for scripts written before loss.backward() drove the reducer."""
        autograd.add_backward_finalizer(self, self._finalize_after_prepare())
        loss.backward()

    def _finalize_after_prepare(self):
        # A forward pass run under no_grad or in eval mode prepared nothing: prepare now.
        self._ddp.prepare_for_backward()
        return self._ddp.finalize_backward

    def set_sync(self, sync):
        """Off: backward passes accumulate gradients locally (no_sync); the next synced one
        reduces the sum."""
        self._ddp.set_sync(sync)

    def comm_wait_seconds(self):
        return self._ddp.comm_wait_seconds()

    def describe_layout(self):
        return self._ddp.describe_layout()

    def parameters(self):
        return self.module.parameters()

    def named_parameters(self):
        return self.module.named_parameters()

    def state_dict(self):
        return self.module.state_dict()

    def train(self, mode=True):
        self.module.train(mode)
        return self

    def eval(self):
        return self.train(False)


class LocalSGD:
    """Local SGD (paddle/parallel/local_sgd.h, docs/local-sgd.md): each rank steps on its own
    gradients and the ranks average their parameters every `period` steps, after
    `warmup_steps` synchronous ones (post-local SGD), optionally with an outer (global) momentum.
    Created on every rank (a collective: rank 0's parameters are broadcast); with `ddp` its
    gradient sync is switched off once the local steps start. Call after_step() after every
    optimizer step and synchronize() before evaluating or saving."""

    def __init__(self, module, period=4, warmup_steps=0, outer_lr=1.0, outer_momentum=0.0,
                 average_buffers=True, ddp=None, group=None):
        self.module = module
        self._native = _C.distributed.LocalSGD(
            module, _group(group)._native, period, warmup_steps, outer_lr, outer_momentum,
            average_buffers, ddp._ddp if ddp is not None else None)

    def after_step(self):
        """Collective when the schedule averages; returns whether it did."""
        return self._native.after_step()

    def synchronize(self):
        """Collective: averages now unless the last step did, so every rank holds one model."""
        self._native.synchronize()

    steps = property(lambda self: self._native.steps)
    averages = property(lambda self: self._native.averages)
    averaged_bytes = property(lambda self: self._native.averaged_bytes)
    in_warmup = property(lambda self: self._native.in_warmup)


class ZeroRedundancyOptimizer:
    """Optimizer state sharded over the ranks (ZeRO stage 1,
    paddle/parallel/zero_redundancy_optimizer.h), as torch.distributed.optim's class of that name:
    each rank keeps the state of a 1/W slice of the flattened parameters. `optimizer_class` is
    paddle.optim.SGD, Adam, AdamW, LARS or LAMB and `defaults` its keyword arguments.

    Created on every rank (a collective: rank 0's parameters are broadcast); it moves the values
    and gradients into one flat buffer each. Train without DDP (its buckets would take the
    gradients' place, to be copied at every step): step() reduce-scatters the local gradients,
    steps this rank's slice and all-gathers the parameters. state_dict() is
    collective and returns the whole state, in paddle.optim's keys, on every rank;
    load_state_dict() takes such a state saved at any world size (or by the unsharded optimizer).
    """

    _RULES = {"SGD": "sgd", "Adam": "adam", "AdamW": "adamw", "LARS": "lars", "LAMB": "lamb"}

    def __init__(self, params, optimizer_class, group=None, **defaults):
        name = getattr(optimizer_class, "__name__", str(optimizer_class))
        if name not in self._RULES:
            raise ValueError(f"ZeroRedundancyOptimizer: optimizer_class {name!r} is not one of "
                             f"paddle.optim.{', paddle.optim.'.join(self._RULES)}")
        self._native = _C.distributed.ZeroRedundancyOptimizer(
            list(params), _group(group)._native, self._RULES[name], defaults)

    def step(self):
        """Collective: reduce-scatter, this rank's update, all-gather."""
        self._native.step()

    def zero_grad(self):
        self._native.zero_grad()

    lr = property(lambda self: self._native.lr,
                  lambda self, value: setattr(self._native, "lr", value))
    step_count = property(lambda self: self._native.step_count)
    optimizer_state_bytes = property(lambda self: self._native.optimizer_state_bytes,
                                     doc="Bytes of this rank's optimizer state.")
    shard = property(lambda self: self._native.shard,
                     doc="This rank's [begin, end) of the flattened parameters.")

    def state_dict(self):
        """Collective: the whole state on every rank."""
        return self._native.state_dict()

    def load_state_dict(self, state_dict):
        self._native.load_state_dict(state_dict)


def sum_over_ranks(metric, group=None, timeout=None):
    """Sums an AucHistogram or ClassificationTotals over every rank of the group (collective):
    afterwards every rank's metric holds the group's totals (paddle/parallel/metrics.h)."""
    metric.sum_over_ranks(_group(group)._native, timeout=_seconds(timeout))
