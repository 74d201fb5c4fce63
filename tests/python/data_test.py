"""paddle.data: map-style, tensor and iterable data sets through the DataLoader (batching,
shuffling by (seed, epoch), the distributed sampler, drop_last, collate_fn, prefetch), with
exact contents checked, and the errors of bad use."""
import numpy as np
import pytest

import paddle
from paddle.data import (DataLoader, Dataset, DistributedSampler, IterableDataset,
                         TensorDataset, default_collate)


class Squares(Dataset):
    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return np.array([i, i * i], np.float32), i % 3


def rows(loader, epoch=0):
    return [b for b in loader.epoch(epoch)]


@pytest.mark.parametrize("prefetch", [0, 2])
def test_map_style_batches_in_order(prefetch):
    loader = DataLoader(Squares(10), batch_size=4, prefetch=prefetch)
    batches = rows(loader)
    assert len(loader) == 3 and len(batches) == 3
    x, y = batches[0]
    assert x.dtype == "float32" and x.shape == (4, 2) and y.dtype == "int64"
    np.testing.assert_array_equal(x.numpy(), [[0, 0], [1, 1], [2, 4], [3, 9]])
    np.testing.assert_array_equal(y.numpy(), [0, 1, 2, 0])
    assert batches[2][0].shape == (2, 2)  # the short last batch
    assert len(rows(DataLoader(Squares(10), batch_size=4, drop_last=True))) == 2


def test_shuffle_depends_on_seed_and_epoch_and_covers_everything():
    loader = DataLoader(TensorDataset(np.arange(20)), batch_size=5, shuffle=True, seed=3)
    e0 = np.concatenate([b[0].numpy() for b in loader.epoch(0)])
    e1 = np.concatenate([b[0].numpy() for b in loader.epoch(1)])
    again = np.concatenate([b[0].numpy() for b in loader.epoch(0)])
    assert sorted(e0.tolist()) == list(range(20)) and sorted(e1.tolist()) == list(range(20))
    assert e0.tolist() != e1.tolist() and e0.tolist() == again.tolist()
    other_seed = DataLoader(TensorDataset(np.arange(20)), batch_size=5, shuffle=True, seed=4)
    assert np.concatenate([b[0].numpy() for b in other_seed.epoch(0)]).tolist() != e0.tolist()
    assert e0.tolist() != list(range(20))


def test_distributed_sampler_splits_ranks_disjointly():
    data = TensorDataset(np.arange(10, dtype=np.float32), np.arange(10) * 2)
    seen = []
    for rank in range(3):
        sampler = DistributedSampler(len(data), rank=rank, world_size=3, seed=1)
        loader = DataLoader(data, batch_size=2, sampler=sampler)
        for x, y in loader.epoch(2):
            np.testing.assert_array_equal(y.numpy(), x.numpy() * 2)
            seen += x.numpy().tolist()
    # 10 samples over 3 ranks: padded to 12 by repeating, as torch's sampler does.
    assert len(seen) == 12 and set(seen) == set(range(10))


def test_iterable_dataset_streams_and_shards():
    stream = IterableDataset([{"x": np.full(2, i, np.float32), "y": i} for i in range(7)])
    batches = list(DataLoader(stream, batch_size=3))
    assert [b["y"].numpy().tolist() for b in batches] == [[0, 1, 2], [3, 4, 5], [6]]
    np.testing.assert_array_equal(batches[1]["x"].numpy(), [[3, 3], [4, 4], [5, 5]])
    sampler = DistributedSampler(7, rank=1, world_size=2)
    shard = list(DataLoader(stream, batch_size=2, sampler=sampler, drop_last=True))
    assert [b["y"].numpy().tolist() for b in shard] == [[1, 3]]

    class Counter(IterableDataset):
        def __iter__(self):
            return iter(range(5))

    assert [b.numpy().tolist() for b in DataLoader(Counter(), batch_size=2)] == [[0, 1], [2, 3],
                                                                                 [4]]
    with pytest.raises(TypeError, match="no length"):
        len(DataLoader(Counter()))


def test_collate_fn_and_tensors_in_samples():
    loader = DataLoader(Squares(4), batch_size=2, collate_fn=lambda s: [i for _, i in s])
    assert list(loader) == [[0, 1], [2, 0]]
    batch = default_collate([paddle.tensor([1.0, 2.0]), paddle.tensor([3.0, 4.0])])
    np.testing.assert_array_equal(batch.numpy(), [[1, 2], [3, 4]])
    assert default_collate([1.5, 2.5]).dtype == "float32"


def test_fashion_mnist_uses_the_cpp_loader():
    train = paddle.data.FashionMNIST("test").head(100)
    loader = DataLoader(train, batch_size=32, sampler=DistributedSampler(len(train), seed=0))
    images, labels = next(iter(loader))
    assert images.shape == (32, 1, 28, 28) and labels.dtype == "int64"
    assert len(loader) == 4


def test_errors_name_the_problem():
    class Broken(Dataset):
        def __len__(self):
            return 4

        def __getitem__(self, i):
            if i == 3:
                raise KeyError("sample 3 is corrupt")
            return np.zeros(2)

    with pytest.raises(KeyError, match="sample 3 is corrupt"):
        list(DataLoader(Broken(), batch_size=2))  # raised on the prefetch thread, re-raised here
    with pytest.raises(ValueError, match="batch_size must be a positive int"):
        DataLoader(Squares(3), batch_size=0)
    with pytest.raises(ValueError, match="array 1 has shape"):
        TensorDataset(np.zeros(3), np.zeros(4))

    class Ragged(Dataset):
        def __len__(self):
            return 2

        def __getitem__(self, i):
            return np.zeros(i + 1)

    with pytest.raises(ValueError, match="cannot be stacked; pass a collate_fn"):
        list(DataLoader(Ragged(), batch_size=2, prefetch=0))
    with pytest.raises(TypeError, match="cannot batch samples of type object"):
        default_collate([object()])
