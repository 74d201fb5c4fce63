"""paddle.data: Fashion-MNIST, DistributedSampler and a prefetching DataLoader (paddle/data)."""
from paddle._C import data as _data
from paddle._C.data import Dataset, DistributedSampler

__all__ = ["Dataset", "DistributedSampler", "DataLoader", "FashionMNIST"]

DEFAULT_ROOT = "/usr/share/datasets/fashion-mnist"


def FashionMNIST(split="train", root=DEFAULT_ROOT, normalize=True):  # noqa: N802 (a class-like factory)
    """The whole split in memory: .images float32 [N, 1, 28, 28], .labels int64 [N]."""
    return _data.load_fashion_mnist(split, root, normalize)


class DataLoader:
    """Batches of one rank's samples, gathered on a background thread.

    `for images, labels in loader.epoch(e)` iterates epoch e (the sampler's shuffle for e);
    iterating the loader itself runs the next epoch, counting from 0.
    """

    def __init__(self, dataset, sampler=None, batch_size=64, drop_last=False, prefetch=2,
                 seed=0):
        if sampler is None:
            sampler = DistributedSampler(len(dataset), seed=seed)
        self._loader = _data.DataLoader(dataset, sampler, batch_size, drop_last, prefetch)
        self._num_samples = sampler.num_samples
        self._drop_last = drop_last
        self._next_epoch = 0

    def epoch(self, epoch):
        self._loader.start_epoch(epoch)
        self._next_epoch = epoch + 1
        while True:
            batch = self._loader.next()
            if batch is None:
                return
            yield batch

    def __iter__(self):
        return self.epoch(self._next_epoch)

    def __len__(self):
        b = self._loader.batch_size
        return self._num_samples // b if self._drop_last else -(-self._num_samples // b)

    @property
    def batch_size(self):
        return self._loader.batch_size
