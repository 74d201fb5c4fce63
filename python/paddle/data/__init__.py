"""paddle.data: data sets and a DataLoader with batching, shuffling by (seed, epoch) and the
distributed sampler.

- Dataset: map-style (__len__ and __getitem__), subclass it; TensorDataset over numpy arrays or
  Tensors; IterableDataset: anything iterable (subclass with __iter__, or wrap an iterable).
- FashionMNIST(split): the whole split in memory (paddle/data), loaded by the C++ loader, which
  gathers batches on its own thread without the GIL.
- DataLoader(dataset, batch_size, shuffle, sampler, drop_last, collate_fn, prefetch, seed).
"""
import queue
import threading

import numpy as np

from paddle._C import Tensor
from paddle._C import data as _data
from paddle._C.data import DistributedSampler

__all__ = ["Dataset", "IterableDataset", "TensorDataset", "DistributedSampler", "DataLoader",
           "FashionMNIST", "default_collate"]

DEFAULT_ROOT = "/usr/share/datasets/fashion-mnist"
_InMemory = _data.Dataset  # images and labels tensors (paddle/data/fashion_mnist.h)


def FashionMNIST(split="train", root=DEFAULT_ROOT, normalize=True):  # noqa: N802 (a class-like factory)
    """The whole split in memory: .images float32 [N, 1, 28, 28], .labels int64 [N]."""
    return _data.load_fashion_mnist(split, root, normalize)


class Dataset:
    """A map-style data set: subclasses define __len__ and __getitem__(index) -> sample."""

    def __len__(self):
        raise NotImplementedError(f"{type(self).__name__} defines no __len__")

    def __getitem__(self, index):
        raise NotImplementedError(f"{type(self).__name__} defines no __getitem__")


class IterableDataset:
    """A stream of samples: subclass with __iter__, or IterableDataset(iterable) wraps any
    re-iterable object (a list, a generator function's result is iterated once only)."""

    def __init__(self, iterable=None):
        self._iterable = iterable

    def __iter__(self):
        if self._iterable is None:
            raise NotImplementedError(f"{type(self).__name__} defines no __iter__")
        return iter(self._iterable)


class TensorDataset(Dataset):
    """Samples are rows of equally long arrays: dataset[i] == (a[i], b[i], ...)."""

    def __init__(self, *arrays):
        if not arrays:
            raise ValueError("TensorDataset needs at least one array")
        self.arrays = [a.numpy() if isinstance(a, Tensor) else np.asarray(a) for a in arrays]
        n = len(self.arrays[0])
        for i, a in enumerate(self.arrays):
            if a.ndim == 0 or len(a) != n:
                raise ValueError(f"TensorDataset: array {i} has shape {a.shape}; every array "
                                 f"needs {n} rows like array 0")

    def __len__(self):
        return len(self.arrays[0])

    def __getitem__(self, index):
        return tuple(a[index] for a in self.arrays)

    def batch(self, indices):
        """The collated batch of `indices` in one gather per array (the loader's fast path)."""
        idx = np.asarray(indices, dtype=np.int64)
        return tuple(_to_tensor(a[idx]) for a in self.arrays)


def _to_tensor(array):
    array = np.ascontiguousarray(array)
    if array.dtype == np.float64:
        array = array.astype(np.float32)
    return Tensor.from_numpy(array, False, "", None)


def default_collate(samples):
    """Stacks a list of samples: arrays, Tensors and numbers into one Tensor (float64 becomes
    float32), tuples/lists and dicts field by field."""
    first = samples[0]
    if isinstance(first, (tuple, list)):
        if any(len(s) != len(first) for s in samples):
            raise ValueError("default_collate: samples have different numbers of fields")
        return type(first)(default_collate([s[i] for s in samples]) for i in range(len(first)))
    if isinstance(first, dict):
        return {k: default_collate([s[k] for s in samples]) for k in first}
    if isinstance(first, Tensor):
        return _to_tensor(np.stack([s.numpy() for s in samples]))
    if isinstance(first, (np.ndarray, np.generic, int, float, bool)):
        try:
            return _to_tensor(np.stack([np.asarray(s) for s in samples]))
        except ValueError as e:
            raise ValueError(f"default_collate: samples of shapes "
                             f"{sorted({np.shape(s) for s in samples})} cannot be stacked; "
                             "pass a collate_fn") from e
    raise TypeError(f"default_collate: cannot batch samples of type {type(first).__name__}; "
                    "pass a collate_fn")


class DataLoader:
    """Batches of a data set, one epoch per iteration.

    Map-style data sets are ordered by `sampler` (a DistributedSampler: this rank's share,
    shuffled by (seed, epoch)); without one, by DistributedSampler(len, shuffle=shuffle, seed).
    An IterableDataset is read in order; with a DistributedSampler, rank r keeps samples
    r, r + world, ... Batches are made on a background thread `prefetch` batches ahead (0: in
    the caller); FashionMNIST-style in-memory sets without collate_fn use the C++ loader.
    `for batch in loader.epoch(e)` runs epoch e; iterating the loader runs the next epoch.
    """

    def __init__(self, dataset, batch_size=1, shuffle=False, sampler=None, drop_last=False,
                 collate_fn=None, prefetch=2, seed=0):
        if not isinstance(batch_size, int) or batch_size <= 0:
            raise ValueError(f"DataLoader: batch_size must be a positive int, got {batch_size!r}")
        if not isinstance(prefetch, int) or prefetch < 0:
            raise ValueError(f"DataLoader: prefetch must be an int >= 0, got {prefetch!r}")
        self.dataset = dataset
        self.batch_size = batch_size
        self.drop_last = drop_last
        self.collate_fn = collate_fn or default_collate
        self._prefetch = prefetch
        self._iterable = isinstance(dataset, IterableDataset) or (
            not hasattr(dataset, "__getitem__") and hasattr(dataset, "__iter__"))
        if sampler is None and not self._iterable:
            sampler = DistributedSampler(len(dataset), seed=seed, shuffle=shuffle)
        self.sampler = sampler
        self._native = None
        if isinstance(dataset, _InMemory) and collate_fn is None:
            self._native = _data.DataLoader(dataset, sampler, batch_size, drop_last,
                                            max(1, prefetch))
        self._next_epoch = 0

    def __len__(self):
        if self._iterable:
            raise TypeError("an IterableDataset's DataLoader has no length")
        n, b = self.sampler.num_samples, self.batch_size
        return n // b if self.drop_last else -(-n // b)

    def __iter__(self):
        return self.epoch(self._next_epoch)

    def epoch(self, epoch):
        self._next_epoch = epoch + 1
        if self._native is not None:
            return self._native_batches(epoch)
        batches = self._batches(epoch)
        return batches if self._prefetch == 0 else _prefetched(batches, self._prefetch)

    def _native_batches(self, epoch):
        self._native.start_epoch(epoch)
        while True:
            batch = self._native.next()
            if batch is None:
                return
            yield batch

    def _index_batches(self, epoch):
        self.sampler.set_epoch(epoch)
        indices = self.sampler.indices()
        b = self.batch_size
        end = len(indices) - len(indices) % b if self.drop_last else len(indices)
        for i in range(0, end, b):
            yield indices[i:i + b]

    def _batches(self, epoch):
        if self._iterable:
            yield from self._stream_batches()
            return
        fast = self.collate_fn is default_collate and hasattr(self.dataset, "batch")
        for idx in self._index_batches(epoch):
            if fast:
                yield self.dataset.batch(idx)
            else:
                yield self.collate_fn([self.dataset[i] for i in idx])

    def _stream_batches(self):
        rank, world = 0, 1
        if self.sampler is not None:
            rank, world = self.sampler.rank, self.sampler.world_size
        pending = []
        for i, sample in enumerate(self.dataset):
            if i % world != rank:
                continue
            pending.append(sample)
            if len(pending) == self.batch_size:
                yield self.collate_fn(pending)
                pending = []
        if pending and not self.drop_last:
            yield self.collate_fn(pending)


_DONE = object()


def _prefetched(batches, depth):
    """Runs the `batches` generator on a thread, `depth` batches ahead; its errors re-raise
    here. Abandoning the iteration stops the thread at its next batch."""
    q = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def produce():
        try:
            for batch in batches:
                while not stop.is_set():
                    try:
                        q.put(batch, timeout=0.1)
                        break
                    except queue.Full:
                        continue
                if stop.is_set():
                    return
            q.put(_DONE)
        except BaseException as e:  # noqa: B902 (handed to the consumer)
            q.put(e)

    thread = threading.Thread(target=produce, name="paddle-data-prefetch", daemon=True)
    thread.start()
    try:
        while True:
            item = q.get()
            if item is _DONE:
                return
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        stop.set()
