"""paddle.Tensor: zero-copy numpy interop both ways, autograd against finite differences, and the
errors bad inputs get."""
import gc

import numpy as np
import pytest

import paddle


def test_from_numpy_is_a_view_both_ways():
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    t = paddle.from_numpy(a)
    assert t.shape == (3, 4) and t.dtype == "float32" and t.ndim == 2 and t.numel() == 12
    a[1, 2] = 100.0  # numpy write, seen by the tensor
    assert t.numpy()[1, 2] == 100.0
    v = t.numpy()
    v[0, 0] = -5.0  # write through the tensor's view, seen by the original array
    assert a[0, 0] == -5.0
    assert v.ctypes.data == a.ctypes.data
    assert np.asarray(t).ctypes.data == a.ctypes.data  # __array__ and the buffer protocol
    assert memoryview(t).format == "f" and memoryview(t).shape == (3, 4)


def test_tensor_keeps_numpy_memory_alive_and_numpy_keeps_tensor_memory_alive():
    t = paddle.from_numpy(np.full(1000, 7, np.int64))
    gc.collect()
    assert t.numpy().sum() == 7000
    view = paddle.tensor([1.0, 2.0, 3.0]).numpy()
    gc.collect()
    assert view.tolist() == [1.0, 2.0, 3.0]


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "int8", "uint8", "int32",
                                   "int64", "bool"])
def test_every_dtype_round_trips(dtype):
    a = (np.arange(6) % 2).astype(dtype).reshape(2, 3)
    t = paddle.from_numpy(a)
    assert t.dtype == dtype
    assert t.numpy().dtype == np.dtype(dtype)
    assert np.array_equal(np.asarray(t), a)


def test_strided_views_and_bfloat16():
    a = np.arange(20, dtype=np.float32).reshape(4, 5)[:, 1:4]
    t = paddle.from_numpy(a)
    assert not t.is_contiguous()
    assert np.array_equal(t.numpy(), a)
    assert np.array_equal(t.contiguous().numpy(), a)
    bits = paddle.float_to_bfloat16(np.array([1.0, -2.5], np.float32))
    b = paddle.from_numpy(bits, dtype="bfloat16")
    assert b.dtype == "bfloat16"
    with pytest.raises(TypeError, match="bfloat16"):
        b.numpy()


def test_bad_inputs_raise_clear_errors():
    with pytest.raises(TypeError, match="unsupported dtype complex64"):
        paddle.from_numpy(np.zeros(3, np.complex64))
    with pytest.raises(TypeError, match="numpy.ndarray"):
        paddle.from_numpy([1, 2])
    with pytest.raises(ValueError, match="stride"):
        paddle.from_numpy(np.arange(6, dtype=np.float32)[::-1])
    with pytest.raises(ValueError, match="cannot view"):
        paddle.from_numpy(np.zeros(3, np.float32), dtype="bfloat16")
    with pytest.raises(ValueError, match="matmul"):
        paddle.matmul(paddle.zeros((2, 3)), paddle.zeros((2, 3)))
    with pytest.raises(ValueError):  # a kernel's InvalidArgument status
        paddle.zeros((2, 3)) + paddle.zeros((3, 2))
    with pytest.raises(ValueError, match="one element"):
        paddle.zeros((2,)).item()


def test_other_byte_order_is_rejected_by_views_and_converted_by_copies():
    big = np.arange(4, dtype=">f4")  # the other byte order on every machine paddle builds for
    if big.dtype.isnative:
        big = np.arange(4, dtype="<f4")
    # A view would read the bytes as native floats: 1.0 as 4.6e-41.
    with pytest.raises(TypeError, match=r"byte order is not this machine's.*newbyteorder\('='\)"):
        paddle.from_numpy(big)
    with pytest.raises(TypeError, match="byte order"):
        paddle.from_numpy(np.zeros(3, dtype=big.dtype.byteorder + "u2"), dtype="bfloat16")
    assert paddle.tensor(big).numpy().tolist() == [0.0, 1.0, 2.0, 3.0]  # a copy: converted
    # Read-only arguments are converted too: labels of the cross entropy.
    logits = paddle.from_numpy(np.zeros((2, 3), np.float32))
    labels = np.array([0, 2], dtype=big.dtype.byteorder + "i8")
    expected = paddle.nn.functional.cross_entropy(logits, np.array([0, 2], np.int64)).item()
    assert paddle.nn.functional.cross_entropy(logits, labels).item() == expected


def mlp_loss(x, w1, b1, w2, b2, labels):
    f = paddle.nn.functional
    h = f.relu(f.linear(x, w1, b1))
    return f.cross_entropy(f.linear(h, w2, b2), labels)


def test_autograd_matches_finite_differences_on_a_small_mlp():
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal(s).astype(np.float64) * 0.5
              for s in [(5, 4), (6, 4), (6,), (3, 6), (3,)]]
    labels = np.array([0, 2, 1, 2, 0], np.int64)
    params = [paddle.tensor(a.astype(np.float32), requires_grad=True) for a in arrays[1:]]
    x = paddle.tensor(arrays[0].astype(np.float32))
    loss = mlp_loss(x, *params, labels)
    loss.backward()
    eps = 1e-2
    for p, a in zip(params, arrays[1:]):
        assert p.grad is not None and p.grad.shape == p.shape
        numeric = np.zeros(a.shape)
        for idx in np.ndindex(a.shape):
            values = []
            for sign in (1, -1):
                b = [q.numpy().copy() for q in params]
                b[[id(q) for q in params].index(id(p))][idx] += sign * eps
                with paddle.no_grad():
                    values.append(mlp_loss(x, *[paddle.tensor(c) for c in b], labels).item())
            numeric[idx] = (values[0] - values[1]) / (2 * eps)
        np.testing.assert_allclose(p.grad.numpy(), numeric, rtol=2e-2, atol=2e-3)


def test_tensor_arithmetic_and_paddle_grad():
    a = paddle.tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
    b = paddle.tensor([[0.5, -1.0], [2.0, 1.0]], requires_grad=True)
    y = ((a @ b) * 2.0 + a * b - b).sum()
    ga, gb = paddle.grad(y, [a, b])
    an, bn = a.numpy(), b.numpy()
    # d/da sum(2ab) = 2 * 1 b^T ; d/db = 2 a^T 1
    ones = np.ones((2, 2), np.float32)
    np.testing.assert_allclose(ga.numpy(), 2 * ones @ bn.T + bn, rtol=1e-6)
    np.testing.assert_allclose(gb.numpy(), 2 * an.T @ ones + an - 1, rtol=1e-6)
    assert a.grad is None or not np.any(a.grad.numpy())  # paddle.grad leaves .grad as it was
    assert abs(y.item() - float((2 * an @ bn + an * bn - bn).sum())) < 1e-4
    m = a.mean()
    m.backward()
    np.testing.assert_allclose(a.grad.numpy(), np.full((2, 2), 0.25), rtol=1e-6)
    with paddle.no_grad():
        z = a * 3.0
    assert not z.requires_grad and paddle.is_grad_enabled()
    d = a.detach()
    assert not d.requires_grad and d.numpy().ctypes.data == a.numpy().ctypes.data
    with pytest.raises(ValueError, match="leaf"):
        paddle.grad(y, [z])
