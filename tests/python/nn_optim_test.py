"""paddle.nn, paddle.optim, paddle.data and paddle.save/load: one training step against
hand-computed numbers, schedules, checkpoint round trips, and the Python example's accuracy."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import paddle
from paddle import nn, optim

EXAMPLE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples",
                       "fashion_mnist.py")
DATA = "/usr/share/datasets/fashion-mnist"


def test_linear_sgd_step_matches_hand_computation():
    paddle.manual_seed(3)
    layer = nn.Linear(3, 2)
    w0, b0 = layer.weight.numpy().copy(), layer.bias.numpy().copy()
    assert np.all(np.abs(w0) <= 1 / np.sqrt(3))
    x = np.array([[1.0, 2.0, -1.0], [0.5, 0.0, 2.0]], np.float32)
    labels = np.array([1, 0], np.int64)
    opt = optim.SGD(layer.parameters(), lr=0.5, momentum=0.9, weight_decay=0.1)
    loss = nn.functional.cross_entropy(layer(paddle.from_numpy(x)), labels)
    loss.backward()
    logits = x @ w0.T + b0
    p = np.exp(logits - logits.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    assert abs(loss.item() - float(-np.log(p[[0, 1], labels]).mean())) < 1e-5
    dlogits = (p - np.eye(2)[labels]) / 2
    gw, gb = dlogits.T @ x, dlogits.sum(0)
    opt.step()
    # weight decay on the 2-d weight only (the bias is excluded by default)
    np.testing.assert_allclose(layer.weight.numpy(), w0 - 0.5 * (gw + 0.1 * w0), rtol=1e-5)
    np.testing.assert_allclose(layer.bias.numpy(), b0 - 0.5 * gb, rtol=1e-5)
    assert opt.step_count == 1


def test_embedding_sparse_and_dense_gradients_take_the_same_step():
    # Rows 1 (twice), 4 and 0 looked up; d(sum)/d(row) is ones per lookup, so SGD(lr=0.5) moves
    # row 1 by -1, rows 4 and 0 by -0.5 and no other row, with a dense gradient or the rows.
    ids = paddle.from_numpy(np.array([[1, 4], [1, 0]], np.int64))
    steps = {}
    for sparse in (False, True):
        emb = nn.Embedding(6, 3, sparse=sparse, generator=nn.Generator(5))
        assert emb.sparse == sparse and list(emb.weight.shape) == [6, 3]
        w0 = emb.weight.numpy().copy()
        out = emb(ids)
        assert list(out.shape) == [2, 2, 3]
        np.testing.assert_array_equal(out.numpy(), w0[[[1, 4], [1, 0]]])
        out.sum().backward()
        assert (emb.weight.grad is None) == sparse  # sparse: the rows, not a dense grad
        optim.SGD(emb.parameters(), lr=0.5).step()
        steps[sparse] = emb.weight.numpy() - w0
    expect = np.zeros((6, 3), np.float32)
    expect[1], expect[4], expect[0] = -1.0, -0.5, -0.5
    np.testing.assert_allclose(steps[False], expect, atol=1e-6)
    np.testing.assert_allclose(steps[True], expect, atol=1e-6)
    with pytest.raises(ValueError, match=r"= 6 is outside \[0, 6\)"):
        nn.Embedding(6, 3, sparse=True)(paddle.from_numpy(np.array([6], np.int64)))
    with pytest.raises(ValueError, match="must be positive"):
        nn.Embedding(0, 3)


def test_optimizers_and_schedules():
    paddle.manual_seed(1)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))
    assert [n for n, _ in model.named_parameters()] == ["0.weight", "0.bias", "2.weight",
                                                        "2.bias"]
    x = paddle.tensor(np.random.default_rng(0).standard_normal((6, 4)).astype(np.float32))
    y = np.array([0, 1, 2, 0, 1, 2], np.int64)
    for make in [lambda p: optim.SGD(p, lr=0.1, momentum=0.9, nesterov=True),
                 lambda p: optim.Adam(p, lr=0.01), lambda p: optim.AdamW(p, lr=0.01),
                 lambda p: optim.LARS(p, lr=1.0), lambda p: optim.LAMB(p, lr=0.01)]:
        opt = make(model.parameters())
        losses = []
        for _ in range(20):
            opt.zero_grad()
            loss = nn.functional.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            losses.append(loss.item())
        assert losses[-1] < losses[0], (opt, losses)
    with pytest.raises(ValueError, match="nesterov|dampening|momentum"):
        optim.SGD(model.parameters(), lr=0.1, nesterov=True)
    with pytest.raises(ValueError, match="exclude"):
        optim.SGD(model.parameters(), exclude="all")
    cos = optim.CosineLR(1.0, total_steps=10)
    assert cos.lr_at(0) == 1.0 and abs(cos.lr_at(5) - 0.5) < 1e-12 and cos.lr_at(10) == 0.0
    warm = optim.WarmupLR(optim.StepLR(1.0, step_size=4, gamma=0.5), warmup_steps=2,
                          start_factor=0.1)
    assert [round(warm.lr_at(s), 6) for s in range(6)] == [0.1, 0.55, 1.0, 1.0, 0.5, 0.5]
    opt = optim.SGD(model.parameters(), lr=0.3)
    assert warm.apply(opt) == pytest.approx(0.1) and opt.lr == pytest.approx(0.1)
    with pytest.raises(ValueError):
        optim.StepLR(1.0, step_size=0)


def test_layers_models_and_state_dict_round_trip(tmp_path):
    model = nn.make_model("cnn", seed=5)
    again = nn.make_model("cnn", seed=5)
    assert model.param_hash() == again.param_hash()
    assert model.num_parameters() == 1199882
    x = paddle.tensor(np.random.default_rng(1).standard_normal((2, 1, 28, 28)).astype(np.float32))
    model.eval()
    out = model(x)
    assert out.shape == (2, 10)
    state = model.state_dict()
    paddle.save({"model": state, "step": 7, "note": "hi",
                 "extra": np.arange(3, dtype=np.int32)}, tmp_path / "ckpt.pdk")
    other = nn.make_model("cnn", seed=6)
    assert other.param_hash() != model.param_hash()
    loaded = paddle.load(tmp_path / "ckpt.pdk")
    assert loaded["step"] == 7 and loaded["note"] == "hi"
    assert np.array_equal(loaded["extra"].numpy(), np.arange(3, dtype=np.int32))
    other.load_state_dict(loaded["model"])
    assert other.param_hash() == model.param_hash()
    other.eval()
    np.testing.assert_array_equal(other(x).numpy(), out.numpy())
    with pytest.raises(ValueError, match="fc1.weight|shape"):
        bad = dict(loaded["model"])
        bad["fc1.weight"] = paddle.zeros((2, 2))
        other.load_state_dict(bad)
    data = (tmp_path / "ckpt.pdk").read_bytes()
    (tmp_path / "bad.pdk").write_bytes(data[:len(data) // 2])
    with pytest.raises(RuntimeError):
        paddle.load(tmp_path / "bad.pdk")
    with pytest.raises(FileNotFoundError):
        paddle.load(tmp_path / "missing.pdk")
    with pytest.raises(TypeError, match="unsupported type"):
        paddle.save({"x": 1.5}, tmp_path / "f.pdk")
    layers = [nn.Conv2d(1, 4, 3, padding=1), nn.BatchNorm2d(4), nn.GELU(), nn.MaxPool2d(2),
              nn.Dropout(0.5), nn.GlobalAvgPool(), nn.Flatten()]
    assert nn.Sequential(*layers)(x).shape == (2, 4)
    with pytest.raises(ValueError, match="resnet|model"):
        nn.make_model("vgg")


@pytest.mark.skipif(not os.path.isdir(DATA), reason="needs Debian's dataset-fashion-mnist (tools/install-deps installs it; runs in tools/test and CI)")
def test_data_loader_and_sampler():
    train = paddle.data.FashionMNIST("train").head(1000)
    assert len(train) == 1000 and train.images.shape == (1000, 1, 28, 28)
    s0 = paddle.data.DistributedSampler(len(train), rank=0, world_size=2, seed=1)
    s1 = paddle.data.DistributedSampler(len(train), rank=1, world_size=2, seed=1)
    assert sorted(s0.indices() + s1.indices()) == list(range(1000))
    loader = paddle.data.DataLoader(train, batch_size=64, sampler=s0)
    batches = list(loader.epoch(0))
    assert len(batches) == len(loader) == 8
    assert batches[0][0].shape == (64, 1, 28, 28) and batches[-1][0].shape == (52, 1, 28, 28)
    first = np.asarray(batches[0][1])
    np.testing.assert_array_equal(first, np.asarray(train.labels)[s0.indices()[:64]])
    with pytest.raises(ValueError):
        paddle.data.DistributedSampler(10, rank=2, world_size=2)
    with pytest.raises(FileNotFoundError, match="apt-get"):
        paddle.data.FashionMNIST("train", root="/nonexistent")


@pytest.mark.skipif(not os.path.isdir(DATA), reason="needs Debian's dataset-fashion-mnist (tools/install-deps installs it; runs in tools/test and CI)")
def test_example_reaches_accuracy():
    out = subprocess.run([sys.executable, EXAMPLE, "--model=mlp", "--epochs=2",
                          "--train-samples=6000", "--test-samples=2000", "--threads=2"],
                         capture_output=True, text=True, timeout=120,
                         env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)))
    assert out.returncode == 0, out.stderr
    lines = out.stdout.strip().splitlines()
    assert lines[0].startswith("fashion_mnist: model mlp")
    assert lines[1].startswith("epoch 1/2  train_loss")
    result = json.loads(lines[-1])
    assert set(result) == {"epoch", "train_loss", "test_accuracy", "samples_per_s",
                           "epoch_time_s", "world_size", "comm_wait_fraction",
                           "optimizer_state_bytes", "peak_rss_mb", "param_hash"}
    assert result["optimizer_state_bytes"] > 0 and result["peak_rss_mb"] > 0, result
    assert result["epoch"] == 2 and result["world_size"] == 1
    assert result["test_accuracy"] >= 0.78, result
