"""paddle.nn.Module written in Python: registration by attribute, containers, state dicts,
train/eval, to(device), mixing with the C++ layers, training equal to the C++-built model, and
the errors of bad use."""
import collections

import numpy as np
import pytest

import paddle
from paddle import nn
from paddle.nn import functional as F


class Block(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.fc = nn.Linear(width, width)
        self.gain = nn.Parameter(np.full(width, 2.0, np.float32))
        self.register_buffer("calls", paddle.zeros([1], dtype="int64"))

    def forward(self, x):
        with paddle.no_grad():
            self.calls += 1
        return self.fc(x).relu() * self.gain


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Linear(6, 4)
        self.blocks = nn.ModuleList([Block(4), Block(4)])
        self.heads = nn.ModuleDict({"a": nn.Linear(4, 3), "b": nn.Sequential(nn.Linear(4, 2))})
        self.drop = nn.Dropout(0.5)

    def forward(self, x, head="a"):
        x = self.stem(x)
        for block in self.blocks:
            x = block(x)
        return self.heads[head](self.drop(x))


def test_registration_names_and_state_dict():
    net = Net()
    names = [n for n, _ in net.named_parameters()]
    assert names == ["stem.weight", "stem.bias", "blocks.0.gain", "blocks.0.fc.weight",
                     "blocks.0.fc.bias", "blocks.1.gain", "blocks.1.fc.weight",
                     "blocks.1.fc.bias", "heads.a.weight", "heads.a.bias", "heads.b.0.weight",
                     "heads.b.0.bias"]
    assert [n for n, _ in net.named_buffers()] == ["blocks.0.calls", "blocks.1.calls"]
    assert sorted(net.state_dict()) == sorted(names + ["blocks.0.calls", "blocks.1.calls"])
    assert net.num_parameters() == 6 * 4 + 4 + 2 * (16 + 4 + 4) + 12 + 3 + 8 + 2
    # The attribute is the registered parameter itself: gradients land where the user looks.
    assert net.blocks[0].gain.name == "blocks.0.gain"
    assert [n for n, _ in net.named_modules()][:3] == ["", "stem", "blocks"]
    assert len(list(net.children())) == 4 and len(net.blocks) == 2 and "b" in net.heads


def test_forward_backward_and_buffers_update():
    net = Net().eval()
    x = paddle.randn(5, 6, seed=1)
    y = net(x, head="b")
    assert y.shape == (5, 2)
    F.cross_entropy(y, np.zeros(5, np.int64)).backward()
    for name, p in net.named_parameters():
        if not name.startswith("heads.a"):
            assert p.grad is not None, name
    assert net.blocks[1].calls.item() == 1
    assert net.state_dict()["blocks.1.calls"].item() == 1


def test_train_eval_reach_cpp_layers():
    net = Net()
    assert net.training and net.drop.training
    assert net.eval() is net
    assert not net.training and not net.drop.training and not net.blocks[0].fc.training
    x = paddle.randn(3, 6, seed=2)
    np.testing.assert_array_equal(net(x).numpy(), net(x).numpy())  # dropout off
    net.train()
    assert net.drop.training


def test_load_state_dict_round_trip_and_errors(tmp_path):
    a, b = Net(), Net()
    b.load_state_dict(a.state_dict())
    x = paddle.randn(2, 6, seed=3)
    a.eval(), b.eval()
    np.testing.assert_array_equal(a(x).numpy(), b(x).numpy())
    paddle.save(a.state_dict(), tmp_path / "net.ckpt")
    c = Net().eval()
    c.load_state_dict(paddle.load(tmp_path / "net.ckpt"))
    np.testing.assert_array_equal(a(x).numpy(), c(x).numpy())
    bad = dict(a.state_dict())
    bad["stem.weight"] = np.zeros((3, 3), np.float32)
    with pytest.raises(ValueError, match="stem.weight"):
        c.load_state_dict(bad)
    del bad["stem.weight"]
    with pytest.raises(FileNotFoundError, match="no entry 'stem.weight'"):
        c.load_state_dict(bad)


def test_to_device():
    net = Net()
    assert net.to("cpu") is net and net.device == "cpu"
    with pytest.raises(RuntimeError, match="CUDA|cuda"):
        net.to("cuda")
    with pytest.raises(ValueError, match="tpu"):
        net.to("tpu")
    assert net.device == "cpu"  # all or nothing


def test_python_module_inside_cpp_sequential():
    inner = paddle._C.nn.Sequential(nn.Linear(4, 4), Block(4))  # C++ container, Python child
    x = paddle.randn(2, 4, seed=4, requires_grad=True)
    inner(x).sum().backward()
    assert x.grad is not None and inner.parameters()[2].grad is not None


def test_replacing_parameters_and_modules():
    block = Block(3)
    block.gain = nn.Parameter(np.ones(3, np.float32))
    assert [n for n, _ in block.named_parameters()] == ["gain", "fc.weight", "fc.bias"]
    np.testing.assert_array_equal(block.parameters()[0].numpy(), np.ones(3))
    block.fc = nn.Linear(3, 3, bias=False)
    assert [n for n, _ in block.named_parameters()] == ["gain", "fc.weight"]


def test_bad_use_is_a_clear_error():
    class Forgot(nn.Module):
        def __init__(self):
            self.fc = nn.Linear(2, 2)

    with pytest.raises(AttributeError, match=r"super\(\).__init__\(\)"):
        Forgot()
    block = Block(3)
    with pytest.raises(TypeError, match="cannot assign ndarray to parameter 'gain'"):
        block.gain = np.ones(3, np.float32)
    with pytest.raises(TypeError, match="buffer 'calls'"):
        block.calls = 5
    with pytest.raises(TypeError, match="submodule 'fc'"):
        block.fc = "linear"
    with pytest.raises(TypeError, match="expected a paddle.nn.Parameter"):
        block.register_parameter("w", paddle.zeros([2]))
    with pytest.raises(KeyError, match="without '.'"):
        block.register_buffer("a.b", paddle.zeros([2]))
    with pytest.raises(TypeError, match="Python-defined modules only"):
        nn.Linear(2, 2)._set_parameter("w", nn.Parameter(np.ones(2)))

    class NoForward(nn.Module):
        pass

    with pytest.raises(NotImplementedError, match="NoForward defines no forward"):
        NoForward()(paddle.zeros([1]))
    with pytest.raises(ValueError, match="has 4 features but .* expects 3"):
        Block(3)(paddle.zeros([2, 4]))


class PyMlp(nn.Module):
    """The built-in "mlp" (Flatten, Linear 784-256, ReLU, 256-128, ReLU, 128-10) in Python, with
    its first layer written out as a Parameter matmul so Python tensor ops are on the path."""

    def __init__(self):
        super().__init__()
        self.w1 = nn.Parameter(np.zeros((784, 256), np.float32))
        self.b1 = nn.Parameter(np.zeros(256, np.float32))
        self.fc2 = nn.Linear(256, 128)
        self.fc3 = nn.Linear(128, 10)

    def forward(self, x):
        x = x.reshape([x.shape[0], -1])
        x = (x @ self.w1 + self.b1).relu()
        return self.fc3(self.fc2(x).relu())


def test_python_mlp_trains_like_the_cpp_mlp():
    cpp = nn.make_model("mlp", seed=5)
    py = PyMlp()
    state = {k: v.numpy() for k, v in cpp.state_dict().items()}
    py.load_state_dict({"w1": np.ascontiguousarray(state["1.weight"].T), "b1": state["1.bias"],
                        "fc2.weight": state["3.weight"], "fc2.bias": state["3.bias"],
                        "fc3.weight": state["5.weight"], "fc3.bias": state["5.bias"]})
    opts = [paddle.optim.SGD(m.parameters(), lr=0.05, momentum=0.9) for m in (cpp, py)]
    rng = np.random.default_rng(0)
    for _ in range(5):
        x = paddle.from_numpy(rng.standard_normal((16, 1, 28, 28)).astype(np.float32))
        y = rng.integers(0, 10, 16)
        for model, opt in zip((cpp, py), opts):
            opt.zero_grad()
            F.cross_entropy(model(x), y).backward()
            opt.step()
    got = py.state_dict()
    # Tolerance: the same float32 arithmetic in a different order (x @ W vs x @ W^T GEMMs).
    np.testing.assert_allclose(got["w1"].numpy().T, cpp.state_dict()["1.weight"].numpy(),
                               rtol=1e-4, atol=1e-5)
    for a, b in [("fc2.weight", "3.weight"), ("fc3.weight", "5.weight"), ("fc3.bias", "5.bias")]:
        np.testing.assert_allclose(got[a].numpy(), cpp.state_dict()[b].numpy(), rtol=1e-4,
                                   atol=1e-5)


class PyCnn(nn.Module):
    """The built-in "cnn" written in Python from the same C++ layers, drawing its weights and
    dropout masks from the same generators in the same order as make_model("cnn", seed)."""

    def __init__(self, seed):
        super().__init__()
        init, masks = nn.Generator(seed, 0), nn.Generator(seed, 1)
        self.conv1 = nn.Conv2d(1, 32, 3, generator=init)
        self.conv2 = nn.Conv2d(32, 64, 3, generator=init)
        self.fc1 = nn.Linear(9216, 128, generator=init)
        self.fc2 = nn.Linear(128, 10, generator=init)
        self.pool = nn.MaxPool2d(2)
        self.drop1, self.drop2 = nn.Dropout(0.25, generator=masks), nn.Dropout(0.5, generator=masks)

    def forward(self, x):
        x = self.drop1(self.pool(self.conv2(self.conv1(x).relu()).relu()))
        x = self.drop2(self.fc1(x.flatten()).relu())
        return self.fc2(x)


def test_python_cnn_trains_bit_for_bit_like_the_cpp_cnn():
    cpp, py = nn.make_model("cnn", seed=7), PyCnn(7)
    opts = [paddle.optim.SGD(m.parameters(), lr=0.05, momentum=0.9) for m in (cpp, py)]
    rng = np.random.default_rng(1)
    for _ in range(3):  # in training mode: dropout masks must line up too
        x = paddle.from_numpy(rng.standard_normal((4, 1, 28, 28)).astype(np.float32))
        y = rng.integers(0, 10, 4)
        for model, opt in zip((cpp, py), opts):
            opt.zero_grad()
            F.cross_entropy(model(x), y).backward()
            opt.step()
    got = dict(py.named_parameters())
    for mine, theirs in [("conv1", "0"), ("conv2", "2"), ("fc1", "7"), ("fc2", "10")]:
        for kind in ("weight", "bias"):
            np.testing.assert_array_equal(got[f"{mine}.{kind}"].numpy(),
                                          cpp.state_dict()[f"{theirs}.{kind}"].numpy())


def test_sequential_accepts_an_ordered_dict_and_slices():
    seq = nn.Sequential(collections.OrderedDict([("fc", nn.Linear(2, 3)), ("act", nn.ReLU())]))
    assert [n for n, _ in seq.named_parameters()] == ["fc.weight", "fc.bias"]
    assert len(seq) == 2 and isinstance(seq[0], nn.Linear) and len(seq[:1]) == 1
    assert seq(paddle.zeros([4, 2])).shape == (4, 3)
