"""Tensor operations of paddle/_tensor_ops.py and paddle.autograd.Function: every value against
numpy and every gradient against central finite differences (float64, so the check is tight),
broadcasting, in-place updates under no_grad, the errors of bad use, and the version check that
makes a backward fail once a tensor it saved was changed in place."""
import numpy as np
import pytest

import paddle


def t64(a, grad=True):
    return paddle.from_numpy(np.ascontiguousarray(a, dtype=np.float64), requires_grad=grad)


def gradcheck(fn, *arrays, eps=1e-6, tol=1e-6):
    """fn(*tensors) -> tensor; checks d(sum(fn * w))/d(input) by central differences."""
    tensors = [t64(a) for a in arrays]
    out = fn(*tensors)
    w = np.random.default_rng(7).standard_normal(out.shape)
    (out * t64(w, grad=False)).sum().backward()
    for t, a in zip(tensors, arrays):
        numeric = np.zeros_like(a, dtype=np.float64)
        for i in np.ndindex(a.shape):
            plus, minus = a.astype(np.float64).copy(), a.astype(np.float64).copy()
            plus[i] += eps
            minus[i] -= eps
            args_p = [t64(plus if b is a else x, False) for b, x in zip(arrays, arrays)]
            args_m = [t64(minus if b is a else x, False) for b, x in zip(arrays, arrays)]
            numeric[i] = ((fn(*args_p).numpy() * w).sum() - (fn(*args_m).numpy() * w).sum()) / (
                2 * eps)
        np.testing.assert_allclose(t.grad.numpy(), numeric, rtol=tol, atol=tol)
    return out


RNG = np.random.default_rng(0)
A = RNG.standard_normal((3, 4))
B = RNG.standard_normal((4,))
C = RNG.standard_normal((3, 1))
POS = RNG.uniform(0.5, 2.0, (3, 4))


@pytest.mark.parametrize("op,ref", [
    (lambda a, b: a + b, np.add), (lambda a, b: a - b, np.subtract),
    (lambda a, b: a * b, np.multiply), (lambda a, b: a / b, np.divide)])
@pytest.mark.parametrize("shapes", [((3, 4), (4,)), ((3, 1), (1, 4)), ((2, 3, 4), (3, 1))])
def test_broadcasting_arithmetic_values_and_gradients(op, ref, shapes):
    a = RNG.standard_normal(shapes[0])
    b = RNG.uniform(0.5, 2.0, shapes[1])
    out = gradcheck(op, a, b)
    np.testing.assert_allclose(out.numpy(), ref(a, b), rtol=1e-12)
    assert out.shape == np.broadcast_shapes(*shapes)


def test_scalars_on_either_side_and_pow():
    x = t64(POS)
    np.testing.assert_allclose((2.0 - x).numpy(), 2.0 - POS)
    np.testing.assert_allclose((1.0 / x).numpy(), 1.0 / POS)
    np.testing.assert_allclose((x ** 3).numpy(), POS ** 3)
    gradcheck(lambda v: v ** 2.5, POS)
    gradcheck(lambda v: 3.0 / v, POS)


@pytest.mark.parametrize("name,ref,data", [
    ("exp", np.exp, A), ("log", np.log, POS), ("tanh", np.tanh, A),
    ("sigmoid", lambda v: 1 / (1 + np.exp(-v)), A), ("sqrt", np.sqrt, POS), ("abs", np.abs, A)])
def test_unary_functions(name, ref, data):
    out = gradcheck(lambda v: getattr(v, name)(), data)
    np.testing.assert_allclose(out.numpy(), ref(data), rtol=1e-12)
    np.testing.assert_allclose(getattr(paddle, name)(t64(data)).numpy(), ref(data), rtol=1e-12)


def test_sigmoid_does_not_overflow():
    x = paddle.tensor([-1000.0, 0.0, 1000.0])
    np.testing.assert_array_equal(x.sigmoid().numpy(), np.array([0.0, 0.5, 1.0], np.float32))


@pytest.mark.parametrize("dim", [0, 1, -1])
def test_softmax_and_log_softmax(dim):
    e = np.exp(A - A.max(axis=dim, keepdims=True))
    sm = e / e.sum(axis=dim, keepdims=True)
    out = gradcheck(lambda v: paddle.softmax(v, dim), A)
    np.testing.assert_allclose(out.numpy(), sm, rtol=1e-12)
    out = gradcheck(lambda v: paddle.log_softmax(v, dim), A)
    np.testing.assert_allclose(out.numpy(), np.log(sm), rtol=1e-12)
    big = paddle.tensor([[1000.0, 0.0]])  # stable: no inf
    assert np.isfinite(paddle.log_softmax(big, 1).numpy()).all()


@pytest.mark.parametrize("dim,keepdim", [(0, False), (1, True), ((0, 1), False), (None, False)])
def test_sum_and_mean_over_dims(dim, keepdim):
    axis = None if dim is None else dim
    out = gradcheck(lambda v: v.sum(dim, keepdim) if dim is not None else v.sum(), A)
    np.testing.assert_allclose(out.numpy(), A.sum(axis=axis, keepdims=keepdim), rtol=1e-12)
    out = gradcheck(lambda v: v.mean(dim, keepdim) if dim is not None else v.mean(), A)
    np.testing.assert_allclose(out.numpy(), A.mean(axis=axis, keepdims=keepdim), rtol=1e-12)


def test_max_min_argmax():
    values, indices = t64(A).max(1)
    np.testing.assert_array_equal(values.numpy(), A.max(1))
    np.testing.assert_array_equal(indices.numpy(), A.argmax(1))
    assert indices.dtype == "int64"
    values, _ = t64(A).min(0, keepdim=True)
    np.testing.assert_array_equal(values.numpy(), A.min(0, keepdims=True))
    assert t64(A).max().item() == A.max()
    gradcheck(lambda v: v.max(1)[0], A)
    gradcheck(lambda v: v.max(), A)
    np.testing.assert_array_equal(paddle.argmax(t64(A), 1).numpy(), A.argmax(1))
    assert paddle.argmax(t64(A)).item() == A.argmax()


def test_indexing_and_slicing():
    x = t64(A)
    np.testing.assert_array_equal(x[1].numpy(), A[1])
    np.testing.assert_array_equal(x[:, 1:3].numpy(), A[:, 1:3])
    np.testing.assert_array_equal(x[..., -1].numpy(), A[..., -1])
    idx = paddle.tensor([2, 0, 2], dtype="int64")
    np.testing.assert_array_equal(x[idx].numpy(), A[[2, 0, 2]])
    np.testing.assert_array_equal(x[x > 0].numpy(), A[A > 0])
    gradcheck(lambda v: v[:, 1:3], A)
    gradcheck(lambda v: v[[2, 0, 2]], A)  # repeated rows accumulate


def test_cat_stack_where_transpose():
    gradcheck(lambda a, c: paddle.cat([a, c], dim=1), A, C)
    joined = paddle.cat([t64(A), t64(C)], 1)
    np.testing.assert_array_equal(joined.numpy(), np.concatenate([A, C], 1))
    out = gradcheck(lambda a, b: paddle.stack([a, b], dim=1), A, A * 2)
    np.testing.assert_array_equal(out.numpy(), np.stack([A, A * 2], 1))
    cond = A > 0
    out = gradcheck(lambda a, b: paddle.where(paddle.from_numpy(cond), a, b), A, B)
    np.testing.assert_array_equal(out.numpy(), np.where(cond, A, B))
    out = gradcheck(lambda a: a.transpose(0, 1), A)
    np.testing.assert_array_equal(out.numpy(), A.T)
    x = t64(RNG.standard_normal((2, 3, 4)))
    assert x.permute(2, 0, 1).shape == (4, 2, 3)
    assert x.unsqueeze(1).shape == (2, 1, 3, 4) and x.unsqueeze(1).squeeze(1).shape == (2, 3, 4)
    with pytest.raises(ValueError, match="cat: tensor 1"):
        paddle.cat([t64(A), t64(B)])


def test_comparisons_give_bool_tensors():
    x, y = t64(A), t64(B)
    for op, ref in [("__lt__", np.less), ("__le__", np.less_equal), ("__gt__", np.greater),
                    ("__ge__", np.greater_equal), ("__eq__", np.equal), ("__ne__", np.not_equal)]:
        out = getattr(x, op)(y)
        assert out.dtype == "bool"
        np.testing.assert_array_equal(out.numpy(), ref(A, B))
    assert (x == x).all() and not (x != x).any()
    with pytest.raises(ValueError, match="ambiguous"):
        bool(x > 0)
    assert {x: 1}[x] == 1  # still hashable by identity


def test_batched_matmul():
    a = RNG.standard_normal((2, 3, 4))
    b = RNG.standard_normal((4, 5))
    out = gradcheck(paddle.matmul, a, b)
    np.testing.assert_allclose(out.numpy(), a @ b, rtol=1e-12)
    b2 = RNG.standard_normal((2, 4, 5))
    out = gradcheck(lambda u, v: u @ v, a, b2)
    np.testing.assert_allclose(out.numpy(), a @ b2, rtol=1e-12)
    with pytest.raises(ValueError, match="matmul needs"):
        paddle.matmul(t64(a), t64(a))


def test_float32_fast_paths_agree_with_numpy():
    a32 = A.astype(np.float32)
    x = paddle.from_numpy(a32.copy(), requires_grad=True)
    y = x * x + x  # C++ mul/add
    np.testing.assert_allclose(y.numpy(), a32 * a32 + a32, rtol=1e-6)
    (x @ paddle.from_numpy(a32.T.copy())).sum().backward()  # C++ 2-d matmul
    np.testing.assert_allclose(x.grad.numpy(), np.ones((3, 3), np.float32) @ a32, rtol=1e-5)


def test_in_place_updates_under_no_grad():
    w = paddle.tensor(np.ones((2, 3)), requires_grad=True)
    (w * 3.0).sum().backward()
    with pytest.raises(RuntimeError, match="no_grad"):
        w.sub_(w.grad)
    with paddle.no_grad():
        w -= 0.5 * w.grad  # optimizer-style update, in place
        w[0, 0] = 10.0
        w.mul_(2.0)
    np.testing.assert_array_equal(w.numpy(), [[20.0, -1.0, -1.0], [-1.0, -1.0, -1.0]])
    assert w.is_leaf and w.requires_grad
    x = paddle.zeros([3])
    x += 1.0  # no gradient involved: in place
    x.add_(paddle.tensor([1.0, 2.0, 3.0]), alpha=2.0).fill_(x.numpy() + 1)
    np.testing.assert_array_equal(x.numpy(), [4.0, 6.0, 8.0])
    y = t64(A)
    z = y * 1.0
    z += y  # grad mode and a graph: out of place, like z = z + y
    z.sum().backward()
    np.testing.assert_array_equal(y.grad.numpy(), np.full((3, 4), 2.0))


class Cube(paddle.autograd.Function):
    @staticmethod
    def forward(ctx, x, scale):
        ctx.save_for_backward(x)
        ctx.scale = scale
        return paddle.from_numpy(x.numpy() ** 3 * scale)

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad.numpy() * 3 * x.numpy() ** 2 * ctx.scale, None


def test_custom_function_forward_and_backward():
    out = gradcheck(lambda v: Cube.apply(v, 2.0), A)
    np.testing.assert_allclose(out.numpy(), A ** 3 * 2)
    with paddle.no_grad():
        assert not Cube.apply(t64(A), 1.0).requires_grad


def test_custom_function_errors_are_clear():
    class WrongCount(paddle.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x.clone()

        @staticmethod
        def backward(ctx, grad):
            return grad, grad

    class WrongShape(paddle.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x.clone()

        @staticmethod
        def backward(ctx, grad):
            return np.zeros(7)

    with pytest.raises(RuntimeError, match="returned 2 gradients"):
        WrongCount.apply(t64(A)).sum().backward()
    with pytest.raises(ValueError, match="has shape"):
        WrongShape.apply(t64(A)).sum().backward()


def test_bad_shapes_name_both():
    with pytest.raises(ValueError, match=r"\(3, 4\) and \(3,\) do not broadcast"):
        t64(A) + t64(np.ones(3))
    with pytest.raises(IndexError, match="dim 2 is out of range"):
        paddle.softmax(t64(A), 2)
    with pytest.raises(RuntimeError, match="CPU in this build"):
        t64(A).to("cuda")
    assert t64(A).to("cpu").shape == (3, 4)


def test_second_backward_through_a_freed_graph_raises_naming_the_op():
    # Note [Freed graphs] (paddle/core/autograd/node.h): as PyTorch, the first backward frees
    # what the graph saved; the second one is a RuntimeError naming the operation.
    w = t64(A)
    loss = (w * w).sum()
    loss.backward()
    first = w.grad.numpy().copy()
    with pytest.raises(RuntimeError, match=r"backward of \w+ .*second time.*retain_graph=True"):
        loss.backward()
    np.testing.assert_array_equal(w.grad.numpy(), first)  # not accumulated again
    x = t64(A)
    y = Cube.apply(x, 1.0)  # a Python Function's node is named after its class
    y.backward(t64(np.ones_like(A), grad=False))
    with pytest.raises(RuntimeError, match="backward of Cube .*second time"):
        y.backward(t64(np.ones_like(A), grad=False))


def test_retain_graph_allows_another_backward():
    w = t64(A)
    loss = (w * w.exp()).sum()
    loss.backward(retain_graph=True)
    loss.backward()  # the last one frees
    np.testing.assert_allclose(w.grad.numpy(), 2 * (np.exp(A) + A * np.exp(A)), rtol=1e-12)
    with pytest.raises(RuntimeError, match="second time"):
        loss.backward()
    v = t64(A)
    out = (v * v).sum()
    g1 = paddle.grad(out, v, retain_graph=True)
    g2 = paddle.grad(out, v)
    np.testing.assert_array_equal(g1.numpy(), g2.numpy())
    with pytest.raises(RuntimeError, match="second time"):
        paddle.grad(out, v)


# ---- Note [Saved tensor versions] (paddle/core/autograd/node.h) ----------------------------------

def test_in_place_edit_of_a_saved_tensor_fails_its_backward_naming_it():
    w = paddle.tensor(np.ones((2, 3)), dtype="float32", requires_grad=True)
    c = paddle.tensor(np.full((2, 3), 2.0), dtype="float32")
    loss = (w * c).sum()  # the C++ mul saves both inputs
    assert c._version == 0
    c.add_(1.0)  # c needs no gradient: allowed in place even in grad mode
    assert c._version == 1
    with pytest.raises(RuntimeError, match=r"backward of mul \(node #\d+\): .*its input b "
                       r"\(float32\[2, 3\] on cpu\), was modified by an in-place operation: it "
                       r"is at version 1, mul saved it at version 0"):
        loss.backward()
    assert w.grad is None  # nothing computed from the changed values

    # Python Functions: a saved numpy view of an input (broadcasting mul), a saved output (exp),
    # and a Tensor saved by a user Function; setitem, mul_ and fill_ each bump the version.
    b = t64(B, grad=False)
    loss = (t64(A) * b).sum()
    b[0] = 5.0
    with pytest.raises(RuntimeError, match=r"backward of _Mul .*its input 1 \(float64\[4\] on "
                       r"cpu\).*version 1, _Mul saved it at version 0"):
        loss.backward()
    y = t64(A).exp()
    loss = y.sum()
    with paddle.no_grad():
        y.mul_(2.0)
    with pytest.raises(RuntimeError, match=r"backward of _Exp .*its output \(float64\[3, 4\]"):
        loss.backward()
    x = t64(A)
    out = Cube.apply(x, 1.0)
    with paddle.no_grad():
        x[1:, :] = 0.0
        x.numpy()  # reading changes nothing
    assert x._version == 1
    with pytest.raises(RuntimeError, match=r"backward of Cube .*its input 0 .*version 1"):
        out.sum().backward()


def test_in_place_edit_of_an_input_nothing_saved_is_fine():
    # As in PyTorch: add, reshape and scale keep no values, so their backward still works.
    w = paddle.tensor(np.ones((2, 3)), dtype="float32", requires_grad=True)
    c = paddle.tensor(np.full((2, 3), 2.0), dtype="float32")
    loss = (w + c).sum() + (w.reshape([6]) * 3.0).sum()
    c.fill_(7.0)
    with paddle.no_grad():
        w.mul_(5.0)
    loss.backward()
    np.testing.assert_array_equal(w.grad.numpy(), np.full((2, 3), 4.0))
    # An edit of a clone leaves the original's version alone.
    d = t64(A)
    e = d * d
    d.detach().clone().fill_(0.0)
    e.sum().backward()
    np.testing.assert_allclose(d.grad.numpy(), 2 * A)


def test_optimizer_step_between_forward_and_backward_fails_as_in_pytorch():
    torch = pytest.importorskip("torch")
    # x requires a gradient too, so mul needs w's value for x's gradient (PyTorch then saves w
    # as well; with x constant it saves only x, and a step before backward goes unnoticed).
    w = paddle.tensor(np.ones((2, 3)), dtype="float32", requires_grad=True, name="w")
    x = paddle.tensor(np.full((2, 3), 2.0), dtype="float32", requires_grad=True)
    opt = paddle.optim.SGD([w], lr=0.1)
    (w * x).sum().backward()
    loss = (w * x).sum()
    opt.step()
    assert w._version == 1
    with pytest.raises(RuntimeError, match=r"its input a \(float32\[2, 3\] on cpu\).*version 1"):
        loss.backward()
    # PyTorch refuses the same sequence.
    tw = torch.ones(2, 3, requires_grad=True)
    tx = torch.full((2, 3), 2.0, requires_grad=True)
    topt = torch.optim.SGD([tw], lr=0.1)
    (tw * tx).sum().backward()
    tloss = (tw * tx).sum()
    topt.step()
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        tloss.backward()
    # The usual order (forward, backward, step) keeps working.
    opt.zero_grad()
    (w * x).sum().backward()
    opt.step()
    np.testing.assert_allclose(w.numpy(), np.full((2, 3), 1.0 - 0.2 - 0.2), rtol=1e-6)
    # With the other factor constant, mul keeps only that factor (w's gradient never reads w),
    # so a step before backward is no error, as in PyTorch.
    c = paddle.tensor(np.full((2, 3), 3.0), dtype="float32")
    loss = (w * c).sum()
    opt.zero_grad()
    opt.step()
    loss.backward()
    np.testing.assert_array_equal(w.grad.numpy(), np.full((2, 3), 3.0))
