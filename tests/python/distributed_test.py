"""paddle.distributed across real processes: every collective on numpy arrays of every dtype and
on torch tensors, async work, DDP, and the error hierarchy (a shape mismatch, a dead peer and a
timeout each raise on every surviving rank within the timeout, never hang).

Each test starts the ranks of dist_worker.py as subprocesses meeting through a TCP store.
"""
import os
import socket
import subprocess
import sys
import time

import pytest

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "dist_worker.py")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_ranks(scenario, world, env=None, limit=120):
    """Runs `world` ranks of `scenario`; returns [(returncode, stdout, stderr)] per rank."""
    port = str(free_port())
    full_env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path), **(env or {}))
    procs = [subprocess.Popen([sys.executable, WORKER, scenario, str(r), str(world), port],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env=full_env) for r in range(world)]
    results = []
    deadline = time.monotonic() + limit
    for p in procs:
        try:
            out, err = p.communicate(timeout=max(1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            pytest.fail(f"{scenario}: ranks still running after {limit}s (a hang)")
        results.append((p.returncode, out, err))
    return results


def assert_all_ok(results, ranks=None):
    for r, (code, out, err) in enumerate(results):
        if ranks is not None and r not in ranks:
            continue
        assert code == 0 and "OK" in out, f"rank {r} exited {code}\n{out}\n{err}"


@pytest.mark.parametrize("backend", ["native", "gloo"])
def test_every_collective_every_dtype_three_ranks(backend):
    assert_all_ok(run_ranks("collectives", 3, env={"PADDLE_TEST_BACKEND": backend}))


def test_torch_tensors_in_place_two_ranks():
    assert_all_ok(run_ranks("torch", 2))


def test_ddp_keeps_replicas_identical():
    results = run_ranks("ddp", 2)
    assert_all_ok(results)
    hashes = {line for _, out, _ in results for line in out.splitlines() if "ddp hash" in line}
    assert len(hashes) == 1


def test_shape_mismatch_raises_on_every_rank():
    results = run_ranks("mismatch", 2, env={"PADDLE_DEBUG_CHECKS": "1",
                                            "PADDLE_TEST_TIMEOUT": "20"}, limit=60)
    assert_all_ok(results)
    for _, out, _ in results:
        assert "raised" in out and ("4" in out and "5" in out), out


def test_dead_peer_raises_dist_peer_error():
    results = run_ranks("dead_peer", 3, env={"PADDLE_TEST_TIMEOUT": "20"}, limit=60)
    assert_all_ok(results, ranks=[0, 1])
    for _, out, _ in results[:2]:
        assert "raised DistPeerError" in out, out
        assert "rank 2" in out, out  # the message names the lost rank


def test_timeout_raises_dist_timeout_error():
    results = run_ranks("timeout", 2, limit=60)
    code, out, err = results[0]
    assert code == 0, err
    assert "raised DistTimeoutError" in out, out
    seconds = float(out.split("after ")[1].split("s")[0])
    assert seconds < 3.0, out


def test_init_errors_are_typed():
    import paddle.distributed as dist
    with pytest.raises(ValueError, match="backend"):
        dist.init_process_group("mpi", init_method="tcp://127.0.0.1:1", rank=0, world_size=1)
    with pytest.raises(ValueError):
        dist.init_process_group("native", init_method="bogus://x", rank=0, world_size=1)
    with pytest.raises(RuntimeError, match="not initialized"):
        dist.get_rank()
    # rank 1 of 2 waits for a store nobody hosts: a store error within the timeout
    start = time.monotonic()
    with pytest.raises(dist.DistStoreError):
        dist.init_process_group("native", init_method=f"tcp://127.0.0.1:{free_port()}", rank=1,
                                world_size=2, timeout=2)
    assert time.monotonic() - start < 30
    assert issubclass(dist.DistPeerError, dist.DistNetworkError)
    assert issubclass(dist.DistNetworkError, dist.DistError)
    assert issubclass(dist.DistTimeoutError, dist.DistError)
    assert issubclass(dist.DistError, RuntimeError)


def test_single_process_group_and_timedelta_timeout(tmp_path):
    import datetime

    import numpy as np

    import paddle.distributed as dist
    dist.init_process_group("native", init_method=f"file://{tmp_path}/store", rank=0,
                            world_size=1, timeout=datetime.timedelta(seconds=30))
    try:
        x = np.arange(5, dtype=np.float64)
        dist.all_reduce(x, op=dist.ReduceOp.AVG)
        assert np.array_equal(x, np.arange(5, dtype=np.float64))
        with pytest.raises(RuntimeError, match="already"):
            dist.init_process_group("native", init_method="env://")
    finally:
        dist.destroy_process_group()
    assert not dist.is_initialized()
