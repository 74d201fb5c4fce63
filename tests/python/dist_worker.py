"""One rank of a multi-process paddle.distributed test: `dist_worker.py SCENARIO RANK WORLD PORT`.

Each scenario checks its own results (inputs come from (rank, index), so every element of every
result is known) and exits 0; a failed check raises, which prints the traceback and exits 1. The
parent (distributed_test.py) starts the ranks and asserts on exit codes and printed lines.
"""
import os
import sys
import time

import numpy as np

import paddle
import paddle.distributed as dist

DTYPES = ["float32", "float64", "float16", "int8", "uint8", "int32", "int64", "bool"]


def value(rank, n, dtype):
    """Rank-dependent inputs small enough that sums and products stay exact in every dtype."""
    i = np.arange(n)
    if dtype == "bool":
        return ((i + rank) % 2 == 0)
    return ((i % 5) + rank + 1).astype(dtype)


def expect(got, want, what):
    got, want = np.asarray(got), np.asarray(want)
    if got.shape != want.shape or not np.array_equal(got, want):
        raise AssertionError(f"{what}: got {got!r}, want {want!r}")


def check_collectives(rank, world):
    n = 7  # not a multiple of the world size
    ranks = range(world)
    for dtype in DTYPES:
        x = value(rank, n, dtype)
        ptr = x.ctypes.data
        everyone = [value(r, n, dtype) for r in ranks]
        ops = []
        if dtype == "bool":  # no arithmetic on bool: every rank gets the same ValueError
            try:
                dist.all_reduce(value(rank, n, dtype), op=dist.ReduceOp.MAX)
                raise AssertionError("all_reduce on bool accepted")
            except ValueError as e:
                assert "cast to uint8" in str(e), str(e)
        else:
            ops += [("MAX", np.maximum.reduce), ("MIN", np.minimum.reduce),("SUM", lambda a: np.sum(a, axis=0, dtype=dtype)),
                    ("PRODUCT", lambda a: np.prod(a, axis=0, dtype=dtype))]
        if dtype.startswith("float"):
            ops.append(("AVG", lambda a: (np.sum(a, axis=0, dtype=np.float64) / world)
                        .astype(dtype)))
        for name, ref in ops:
            y = value(rank, n, dtype)
            dist.all_reduce(y, op=getattr(dist.ReduceOp, name))
            expect(y, ref(np.stack(everyone)), f"all_reduce {name} {dtype}")
        # broadcast from the last rank, in place
        dist.broadcast(x, src=world - 1)
        expect(x, everyone[-1], f"broadcast {dtype}")
        assert x.ctypes.data == ptr, "broadcast must write in place"
        # all_gather into one tensor and into a list
        x = value(rank, n, dtype)
        out = np.zeros((world, n), dtype)
        dist.all_gather(out, x)
        expect(out, np.stack(everyone), f"all_gather {dtype}")
        outs = [np.zeros(n, dtype) for _ in ranks]
        dist.all_gather(outs, x)
        expect(np.stack(outs), np.stack(everyone), f"all_gather list {dtype}")
        # all_to_all: block j of rank i goes to block i of rank j
        blocks = np.concatenate([value(rank * world + j, 3, dtype) for j in ranks])
        got = np.zeros_like(blocks)
        dist.all_to_all(got, blocks)
        want = np.concatenate([value(i * world + rank, 3, dtype) for i in ranks])
        expect(got, want, f"all_to_all {dtype}")
        outs = [np.zeros(3, dtype) for _ in ranks]
        dist.all_to_all(outs, [value(rank * world + j, 3, dtype) for j in ranks])
        expect(np.concatenate(outs), want, f"all_to_all list {dtype}")
        if dtype == "bool":
            continue
        # reduce_scatter: rank r gets the sum of block r
        full = np.concatenate([value(rank + 10 * j, 2, dtype) for j in ranks])
        mine = np.zeros(2, dtype)
        dist.reduce_scatter(mine, full)
        want = np.sum([value(r + 10 * rank, 2, dtype) for r in ranks], axis=0, dtype=dtype)
        expect(mine, want, f"reduce_scatter {dtype}")
        mine = np.zeros(2, dtype)
        dist.reduce_scatter(mine, [value(rank + 10 * j, 2, dtype) for j in ranks])
        expect(mine, want, f"reduce_scatter list {dtype}")
        # send/recv around the ring, tagged
        right, left = (rank + 1) % world, (rank - 1) % world
        got = np.zeros(n, dtype)
        if rank % 2 == 0:  # ordered so that blocking sends (Gloo) cannot form a cycle
            dist.send(value(rank, n, dtype), dst=right, tag=7)
            dist.recv(got, src=left, tag=7)
        else:
            work = dist.recv(got, src=left, tag=7, async_op=True)
            work.wait()
            dist.send(value(rank, n, dtype), dst=right, tag=7)
        expect(got, value(left, n, dtype), f"send/recv {dtype}")
    # paddle.Tensor arguments, async_op and Work
    t = paddle.from_numpy(np.full(1 << 16, rank + 1, np.float32))
    work = dist.all_reduce(t, async_op=True)
    assert work.wait(timeout=60) is True
    assert work.is_completed()
    expect(t.numpy(), np.full(1 << 16, sum(r + 1 for r in ranks), np.float32), "async paddle")
    dist.barrier()
    # a subgroup of ranks 0 and 1
    sub = dist.new_group([0, 1])
    y = np.array([rank + 1.0], np.float32)
    if rank in (0, 1):
        assert dist.get_world_size(sub) == 2
        dist.all_reduce(y, group=sub)
        expect(y, np.array([3.0], np.float32), "subgroup all_reduce")
    else:
        assert "NON_GROUP_MEMBER" in repr(sub)
    # bad arguments fail locally, before anything is sent
    for bad, error, text in [
            (np.zeros(4, np.float32)[::2], ValueError, "not C-contiguous"),
            (np.zeros(4, np.complex64), TypeError, "unsupported dtype"),
            ([1.0, 2.0], TypeError, "numpy array, a torch CPU tensor"),
    ]:
        try:
            dist.all_reduce(bad)
        except error as e:
            assert text in str(e), str(e)
        else:
            raise AssertionError(f"no {error.__name__} for {bad!r}")
    ro = np.zeros(4, np.float32)
    ro.flags.writeable = False
    try:
        dist.all_reduce(ro)
        raise AssertionError("read-only output accepted")
    except ValueError as e:
        assert "read-only" in str(e)
    dist.barrier()


def check_torch(rank, world):
    import torch
    for dtype in [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int8,
                  torch.uint8, torch.int32, torch.int64, torch.bool]:
        def make(r):
            base = torch.arange(6) % 3 + r + 1
            return (base % 2 == 0) if dtype == torch.bool else base.to(dtype)

        x = make(rank)
        ptr = x.data_ptr()
        want = make(0)
        if dtype == torch.bool:  # no reduction on bool: gather instead
            for r in range(1, world):
                want = torch.logical_or(want, make(r))
            out = torch.zeros(world, 6, dtype=dtype)
            dist.all_gather(out, x)
            x = out.any(dim=0)
        else:
            for r in range(1, world):
                want = want + make(r)
            dist.all_reduce(x)
            assert x.data_ptr() == ptr
        assert torch.equal(x, want), (dtype, x, want)
        out = torch.zeros(world, 6, dtype=dtype)
        dist.all_gather(out, x)
        assert all(torch.equal(out[r], want) for r in range(world)), (dtype, out)
        y = torch.full((5,), rank, dtype=torch.int64).to(dtype)
        dist.broadcast(y, src=0)
        assert torch.equal(y, torch.zeros(5, dtype=dtype)), (dtype, y)
    try:
        dist.all_reduce(torch.zeros(4, 4).t())
        raise AssertionError("non-contiguous torch tensor accepted")
    except ValueError as e:
        assert "not contiguous" in str(e)
    g = torch.ones(3, requires_grad=True)
    dist.all_reduce(g.data)
    assert torch.equal(g.detach(), torch.full((3,), float(world)))


def check_mismatch(rank, world):
    """Every rank passes a different shape: all must raise, none may hang."""
    start = time.monotonic()
    try:
        dist.all_reduce(np.zeros(4 + rank, np.float32))
    except dist.DistError as e:  # ranks that disagree: not a ValueError
        print(f"raised {type(e).__name__} after {time.monotonic() - start:.1f}s: {e}")
        return
    raise AssertionError("a mismatched all_reduce did not raise")


def check_off_by_one(rank, world):
    """Default settings, the last rank one element longer: an error on every rank, not a
    silently unreduced element (Note [Agreement check]); then the next call fails too."""
    start = time.monotonic()
    try:
        dist.all_reduce(np.ones(101 if rank == world - 1 else 100, np.float32))
        dist.barrier()  # a rank that met no mismatched data learns of it here
    except dist.DistError as e:  # ranks that disagree: not a ValueError
        print(f"raised {type(e).__name__} after {time.monotonic() - start:.1f}s: {e}")
        return
    raise AssertionError("an all_reduce of 101 against 100 elements did not raise")


def check_different_ops(rank, world):
    """Rank 0 calls all_reduce, the others broadcast: the ranks disagree, which is a DistError (a
    RuntimeError) on every rank, not the ValueError of a rank's own bad argument."""
    start = time.monotonic()
    x = np.ones(64, np.float32)
    try:
        if rank == 0:
            dist.all_reduce(x)
        else:
            dist.broadcast(x, src=0)
        dist.barrier()  # a rank that met no mismatched data learns of it here
    except Exception as e:  # noqa: BLE001 - the test checks which type it is
        print(f"raised {type(e).__name__} (DistError {isinstance(e, dist.DistError)}, "
              f"RuntimeError {isinstance(e, RuntimeError)}) after "
              f"{time.monotonic() - start:.1f}s: {e}")
        return
    raise AssertionError("all_reduce against broadcast did not raise")


def check_dead_peer(rank, world):
    dist.barrier()
    if rank == world - 1:
        os._exit(0)  # dies without a goodbye
    start = time.monotonic()
    try:
        for _ in range(100):
            dist.all_reduce(np.ones(1024, np.float32))
    except dist.DistError as e:
        print(f"raised {type(e).__name__} after {time.monotonic() - start:.1f}s: {e}")
        return
    raise AssertionError("all_reduce with a dead peer did not raise")


def check_timeout(rank, world):
    if rank == 0:
        start = time.monotonic()
        try:
            dist.all_reduce(np.ones(8, np.float32), timeout=1.0)
        except dist.DistError as e:
            print(f"raised {type(e).__name__} after {time.monotonic() - start:.1f}s: {e}")
            return
        raise AssertionError("all_reduce without peers did not time out")
    time.sleep(4)  # never joins; then exits


def check_ddp(rank, world):
    paddle.set_num_threads(1)
    model = paddle.nn.make_model("mlp", seed=3)
    ddp = dist.DistributedDataParallel(model, bucket_cap_mb=1)
    opt = paddle.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    rng = np.random.default_rng(rank)
    for _ in range(3):
        x = paddle.from_numpy(rng.standard_normal((8, 1, 28, 28)).astype(np.float32))
        y = paddle.from_numpy(rng.integers(0, 10, 8).astype(np.int64))
        opt.zero_grad()
        loss = paddle.nn.functional.cross_entropy(ddp(x), y)
        ddp.backward(loss)
        opt.step()
    h = np.array([int(model.param_hash(), 16)], np.uint64).view(np.int64)
    hashes = np.zeros(world, np.int64)
    dist.all_gather(hashes, h)
    assert len(set(hashes.tolist())) == 1, f"replicas differ: {hashes}"
    print("ddp hash", model.param_hash())


class PyMlp(paddle.nn.Module):
    """A Python-defined model mixing C++ layers, a Python Parameter and Python tensor ops."""

    def __init__(self):
        super().__init__()
        self.fc1 = paddle.nn.Linear(20, 16)
        self.scale = paddle.nn.Parameter(np.linspace(0.5, 1.5, 16, dtype=np.float32))
        self.head = paddle.nn.Sequential(paddle.nn.ReLU(), paddle.nn.Linear(16, 5))

    def forward(self, x):
        return self.head(self.fc1(x).tanh() * self.scale)


def check_ddp_python(rank, world):
    """loss.backward() through DDP on a Python module: replicas bit-equal after the steps, and
    equal (to float tolerance) to one process training on the whole global batch."""
    paddle.set_num_threads(1)
    paddle.manual_seed(10 + rank)  # different initial weights: DDP must broadcast rank 0's
    model = PyMlp()
    ddp = dist.DistributedDataParallel(model, bucket_cap_mb=0.001, first_bucket_mb=0.001)
    reference = PyMlp()
    reference.load_state_dict({k: v.numpy().copy() for k, v in model.state_dict().items()})
    opt = paddle.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    ref_opt = paddle.optim.SGD(reference.parameters(), lr=0.1, momentum=0.9)
    for step in range(4):
        xs = [np.random.default_rng(100 * step + r).standard_normal((6, 20)).astype(np.float32)
              for r in range(world)]
        ys = [np.random.default_rng(100 * step + r + 50).integers(0, 5, 6) for r in range(world)]
        opt.zero_grad()
        loss = paddle.nn.functional.cross_entropy(ddp(paddle.from_numpy(xs[rank])), ys[rank])
        if step % 2 == 0:
            loss.backward()
        else:
            ddp.backward(loss)  # the alias
        opt.step()
        ref_opt.zero_grad()
        full = paddle.nn.functional.cross_entropy(reference(paddle.from_numpy(np.concatenate(xs))),
                                                  np.concatenate(ys))
        full.backward()
        ref_opt.step()
    h = np.array([int(model.param_hash(), 16)], np.uint64).view(np.int64)
    hashes = np.zeros(world, np.int64)
    dist.all_gather(hashes, h)
    assert len(set(hashes.tolist())) == 1, f"replicas differ: {hashes}"
    ref = reference.state_dict()
    for name, value in model.state_dict().items():
        np.testing.assert_allclose(value.numpy(), ref[name].numpy(), rtol=1e-5, atol=1e-6,
                                   err_msg=name)
    print("ddp_python hash", model.param_hash())


def check_zero(rank, world):
    """ZeroRedundancyOptimizer(AdamW) on a Python module without DDP: replicas bit-equal, equal (to
    float tolerance) to one process's unsharded AdamW on the whole global batch, state bytes
    split over the ranks, and a state_dict with the unsharded optimizer's keys that loads back."""
    paddle.set_num_threads(1)
    paddle.manual_seed(10 + rank)  # different initial weights: the optimizer broadcasts rank 0's
    model = PyMlp()
    for bad, error in (({"optimizer_class": paddle.optim.CosineLR}, ValueError),
                       ({"optimizer_class": paddle.optim.AdamW, "momentum": 0.9}, TypeError)):
        try:
            dist.ZeroRedundancyOptimizer(model.parameters(), **bad)
            raise AssertionError(f"{bad} was accepted")
        except error:
            pass
    opt = dist.ZeroRedundancyOptimizer(model.parameters(), paddle.optim.AdamW, lr=0.01)
    reference = PyMlp()
    reference.load_state_dict({k: v.numpy().copy() for k, v in model.state_dict().items()})
    ref_opt = paddle.optim.AdamW(reference.parameters(), lr=0.01)
    for step in range(4):
        xs = [np.random.default_rng(100 * step + r).standard_normal((6, 20)).astype(np.float32)
              for r in range(world)]
        ys = [np.random.default_rng(100 * step + r + 50).integers(0, 5, 6) for r in range(world)]
        opt.zero_grad()
        paddle.nn.functional.cross_entropy(model(paddle.from_numpy(xs[rank])), ys[rank]).backward()
        opt.step()
        ref_opt.zero_grad()
        paddle.nn.functional.cross_entropy(reference(paddle.from_numpy(np.concatenate(xs))),
                                           np.concatenate(ys)).backward()
        ref_opt.step()
    h = np.array([int(model.param_hash(), 16)], np.uint64).view(np.int64)
    hashes = np.zeros(world, np.int64)
    dist.all_gather(hashes, h)
    assert len(set(hashes.tolist())) == 1, f"replicas differ: {hashes}"
    ref = reference.state_dict()
    for name, value in model.state_dict().items():
        np.testing.assert_allclose(value.numpy(), ref[name].numpy(), rtol=1e-5, atol=1e-6,
                                   err_msg=name)
    state_bytes = np.array([opt.optimizer_state_bytes], np.int64)
    dist.all_reduce(state_bytes)
    assert state_bytes[0] == ref_opt.state_bytes > opt.optimizer_state_bytes, (
        state_bytes, ref_opt.state_bytes, opt.optimizer_state_bytes)
    state = opt.state_dict()  # collective: the whole state
    want = ref_opt.state_dict()
    assert sorted(state) == sorted(want), (sorted(state), sorted(want))
    for key, value in want.items():
        if isinstance(value, int):
            assert state[key] == value, key
        else:
            np.testing.assert_allclose(state[key].numpy(), value.numpy(), rtol=1e-4, atol=1e-7,
                                       err_msg=key)
    opt.load_state_dict(state)
    assert opt.step_count == 4
    print("zero hash", model.param_hash(), "state bytes", opt.optimizer_state_bytes, "of",
          ref_opt.state_bytes)


def main():
    scenario, rank, world, port = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    backend = os.environ.get("PADDLE_TEST_BACKEND", "native")
    timeout = float(os.environ.get("PADDLE_TEST_TIMEOUT", "60"))
    dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world, timeout=timeout)
    assert dist.is_initialized() and dist.get_rank() == rank and dist.get_world_size() == world
    globals()["check_" + scenario](rank, world)
    if scenario not in ("dead_peer", "timeout", "mismatch", "off_by_one", "different_ops"):
        dist.barrier()
        dist.destroy_process_group()
        assert not dist.is_initialized()
    print("OK", flush=True)
    sys.stdout.flush()
    os._exit(0)  # failure scenarios leave poisoned groups: skip their teardown


if __name__ == "__main__":
    main()
