"""paddle on CUDA devices from Python: Tensor.to / cpu / cuda, modules and SGD on the GPU, the
nccl backend, and the errors where CUDA cannot be used.

The error tests run everywhere (here they need a machine without a usable GPU, else they skip);
the GPU tests skip, naming CUDA's reason, without one. tools/gpu-bundle carries this file, the
package and its extension to the GPU machine, where gpu-check.sh runs it.
"""
import numpy as np
import pytest

import paddle
import paddle.distributed as dist
from paddle import nn, optim
from paddle.nn import functional as F


def _cuda_unusable_reason():
    try:
        paddle.check_device("cuda")
    except (RuntimeError, ValueError) as e:
        return str(e)
    return None


REASON = _cuda_unusable_reason()
needs_gpu = pytest.mark.skipif(REASON is not None, reason=f"no CUDA device: {REASON}")
needs_no_gpu = pytest.mark.skipif(REASON is None, reason="a CUDA device is usable here")


# ---- everywhere -----------------------------------------------------------------------------

def test_cpu_moves_are_the_tensor_itself():
    t = paddle.tensor([1.0, 2.0])
    assert t.to("cpu") is t and t.cpu() is t
    assert t.device == "cpu" and not t.is_cuda
    assert "device=" not in repr(t)


def test_bad_device_names_raise_value_error_naming_the_forms():
    t = paddle.tensor([1.0])
    for bad in ("cuda:x", "cuda:-1", "cuda:", "cpu:1"):
        with pytest.raises(ValueError, match=r"unknown device .*use cpu, cuda or cuda:N"):
            t.to(bad)
    with pytest.raises(ValueError, match="unknown device 'tpu'"):
        paddle.check_device("tpu")


def test_tensors_without_a_host_view_raise_instead_of_aborting():
    # Note [Buffer errors] in python/bindings/tensor.cc: memoryview and numpy ask for the buffer
    # first; its error must reach Python (here for bfloat16, as for CUDA tensors on a GPU).
    t = paddle.from_numpy(np.zeros(2, np.uint16), dtype="bfloat16")
    with pytest.raises(TypeError, match="bfloat16"):
        memoryview(t)
    with pytest.raises(TypeError, match="bfloat16"):
        np.asarray(t)


@needs_no_gpu
def test_to_cuda_without_a_gpu_raises_naming_device_and_reason():
    t = paddle.tensor([[1.0, 2.0]], requires_grad=True)
    # The reason: CUDA's "no CUDA device/driver: ..." with what to check, or a build without CUDA.
    reason = r"(no CUDA device/driver|built without CUDA)"
    with pytest.raises(RuntimeError, match=r"Tensor.to\('cuda'\): .*only the CPU.*" + reason):
        t.to("cuda")
    with pytest.raises(RuntimeError, match=r"Tensor.to\('cuda:1'\): .*" + reason):
        t.cuda(1)
    with pytest.raises(RuntimeError, match=reason):
        paddle.zeros([2], device="cuda")
    with pytest.raises(RuntimeError, match=reason):
        paddle.check_device("cuda:0")
    assert not paddle.cuda_is_available()
    assert paddle.check_device("cpu") is None
    model = nn.Sequential(nn.Linear(2, 2))
    with pytest.raises(RuntimeError, match=reason):
        model.to("cuda")
    assert model.device == "cpu"


@needs_no_gpu
def test_nccl_without_a_gpu_fails_before_the_rendezvous(tmp_path):
    # world_size=2 and nobody else: a rendezvous would wait out the timeout; the check is first.
    with pytest.raises(RuntimeError, match=r"init_process_group\(backend='nccl'\): .*cuda"):
        dist.init_process_group("nccl", init_method=f"file://{tmp_path}/store", rank=0,
                                world_size=2, timeout=60)
    assert not dist.is_initialized()


def test_unknown_backend_lists_nccl():
    with pytest.raises(ValueError, match="'native', 'gloo' or 'nccl'"):
        dist.init_process_group("mpi", init_method="tcp://127.0.0.1:1", rank=0, world_size=1)


# ---- on a GPU -------------------------------------------------------------------------------

@needs_gpu
def test_numpy_round_trip_and_host_views():
    for dtype in ("float32", "float64", "int64", "uint8"):
        a = (np.arange(24).reshape(2, 3, 4) * 3 - 7).astype(dtype)
        t = paddle.from_numpy(a).to("cuda")
        assert t.device == "cuda:0" and t.is_cuda and t.dtype == dtype and t.shape == (2, 3, 4)
        back = t.cpu()
        assert back.device == "cpu"
        np.testing.assert_array_equal(back.numpy(), a)
    assert paddle.cuda_is_available()
    t = paddle.tensor([1.5, -2.0], device="cuda")
    assert "device='cuda:0'" in repr(t) and "1.5" in repr(t)
    with pytest.raises(TypeError, match=r"cuda:0.*\.cpu\(\)"):
        t.numpy()
    with pytest.raises(TypeError, match=r"cuda:0.*\.cpu\(\)"):
        np.asarray(t)
    with pytest.raises(TypeError, match=r"cuda:0.*\.cpu\(\)"):
        memoryview(t)
    assert t.sum().item() == -0.5
    assert t.clone().is_cuda and t.to("cuda:0") is t and t.cuda() is t
    np.testing.assert_array_equal(t.to("float64").cpu().numpy(), [1.5, -2.0])
    host = paddle.zeros([2])
    host.copy_(t)  # device to host
    np.testing.assert_array_equal(host.numpy(), [1.5, -2.0])


@needs_gpu
def test_move_is_differentiable_and_device_leaves_get_device_gradients():
    x = paddle.tensor([1.0, -2.0, 3.0], requires_grad=True)
    y = x.to("cuda")
    assert not y.is_leaf and y.requires_grad
    (y * y).sum().backward()  # the gradient comes back to the CPU leaf
    assert x.grad.device == "cpu"
    np.testing.assert_array_equal(x.grad.numpy(), [2.0, -4.0, 6.0])
    with paddle.no_grad():
        assert x.to("cuda").is_leaf
    w = paddle.randn(3, device="cuda", requires_grad=True, seed=7)
    assert w.is_leaf and w.is_cuda
    np.testing.assert_array_equal(w.detach().cpu().numpy(), paddle.randn(3, seed=7).numpy())
    (w * w).sum().backward()
    assert w.grad.is_cuda
    np.testing.assert_allclose(w.grad.cpu().numpy(), 2 * w.detach().cpu().numpy(), rtol=1e-6)


@needs_gpu
def test_sgd_step_on_cuda_parameters():
    p = paddle.tensor([[1.0, -2.0], [0.5, 4.0]], name="p", device="cuda", requires_grad=True)
    opt = optim.SGD([p], lr=0.5)
    (p * p).sum().backward()  # grad 2p, so p - 0.5 * 2p is exactly 0
    opt.step()
    assert p.is_cuda
    np.testing.assert_array_equal(p.detach().cpu().numpy(), np.zeros((2, 2), np.float32))
    opt.zero_grad()
    np.testing.assert_array_equal(p.grad.cpu().numpy(), np.zeros((2, 2), np.float32))


def _mlp_after_steps(device, steps=20):
    paddle.manual_seed(3)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3)).to(device)
    opt = optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    rng = np.random.default_rng(5)
    x = paddle.from_numpy(rng.standard_normal((32, 8)).astype(np.float32)).to(device)
    labels = paddle.from_numpy(rng.integers(0, 3, 32)).to(device)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = F.cross_entropy(model(x), labels)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return [p.detach().cpu().numpy() for p in model.parameters()], losses


@needs_gpu
def test_mlp_trained_on_cuda_matches_cpu():
    # fp32 on both (cuBLAS without TF32); the kernels sum in different orders, so after 20 SGD
    # steps with momentum the parameters agree to rtol 1e-3 / atol 1e-4, not bit for bit.
    gpu, gpu_losses = _mlp_after_steps("cuda")
    cpu, cpu_losses = _mlp_after_steps("cpu")
    assert gpu_losses[-1] < gpu_losses[0]
    np.testing.assert_allclose(gpu_losses, cpu_losses, rtol=1e-3, atol=1e-4)
    for g, c in zip(gpu, cpu):
        np.testing.assert_allclose(g, c, rtol=1e-3, atol=1e-4)


@needs_gpu
def test_nccl_single_rank_allreduce(tmp_path):
    dist.init_process_group("nccl", init_method=f"file://{tmp_path}/store", rank=0,
                            world_size=1, timeout=60)
    try:
        assert dist.get_backend() == "nccl"
        t = paddle.tensor([1.0, 2.0, 3.0], device="cuda")
        dist.all_reduce(t)
        np.testing.assert_array_equal(t.cpu().numpy(), [1.0, 2.0, 3.0])
        with pytest.raises(ValueError, match=r"on cpu.*cuda:0"):  # rejected, not poisoned
            dist.all_reduce(paddle.tensor([1.0]))
        dist.all_reduce(t)
        np.testing.assert_array_equal(t.cpu().numpy(), [1.0, 2.0, 3.0])
    finally:
        dist.destroy_process_group()
