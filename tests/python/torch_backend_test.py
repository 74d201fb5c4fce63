"""torch.distributed backend "paddle" (python/paddle/torch) across real processes: every
collective checked exactly, DDP against gloo, bad input, a dead peer, and torchrun and paddlerun
starting an unmodified script, and examples/torch_ddp.py training the same parameters over
"paddle" as over "gloo".

Each test runs torch_backend_worker.py ranks meeting through torch's TCPStore (env://).
"""
import json
import os
import socket
import subprocess
import sys
import time

import pytest

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "torch_backend_worker.py")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def env(extra=None):
    return dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path), OMP_NUM_THREADS="1",
                OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1", **(extra or {}))


def finish(procs, what, limit):
    results, deadline = [], time.monotonic() + limit
    for p in procs:
        try:
            out, err = p.communicate(timeout=max(1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            pytest.fail(f"{what}: still running after {limit}s (a hang)")
        results.append((p.returncode, out, err))
    return results


def run_ranks(scenario, world, extra_env=None, limit=90):
    """Runs `world` ranks of `scenario`; returns [(returncode, stdout, stderr)] per rank."""
    port = str(free_port())
    procs = [subprocess.Popen([sys.executable, WORKER, scenario, str(r), str(world), port],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env=env(extra_env)) for r in range(world)]
    return finish(procs, scenario, limit)


def assert_ok(code, out, err, what):
    assert code == 0 and "OK" in out, f"{what} exited {code}\n{out}\n{err}"


def test_every_op_three_ranks():
    for r, result in enumerate(run_ranks("ops", 3)):
        assert_ok(*result, f"rank {r}")


def test_ddp_matches_gloo_two_ranks():
    for r, result in enumerate(run_ranks("ddp", 2)):
        assert_ok(*result, f"rank {r}")


def test_bad_input_raises_on_every_rank():
    for r, result in enumerate(run_ranks("bad_input", 2, {"PADDLE_DEBUG_CHECKS": "1"})):
        assert_ok(*result, f"rank {r}")


def test_dead_peer_fails_survivors_within_timeout():
    results = run_ranks("dead_peer", 3, {"TORCH_TEST_TIMEOUT_S": "5"}, limit=60)
    assert results[2][0] == 17, results[2]
    for r in (0, 1):
        code, out, err = results[r]
        assert code == 0 and "failed after" in out, f"rank {r} exited {code}\n{out}\n{err}"


def test_torchrun_starts_unmodified_script(tmp_path):
    # Debian's torch 1.13 on Python 3.11: torchrun's default --redirects=0 --tee=0 crash (Std
    # flag 0 is no longer iterated), so the test tees stdout instead; see docs/torch.md.
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes=1", "--nproc_per_node=2",
           "--master_addr=127.0.0.1", f"--master_port={free_port()}", "--redirects=1",
           "--tee=1", f"--log_dir={tmp_path}", WORKER, "launched"]
    [(code, out, err)] = finish([subprocess.Popen(cmd, stdout=subprocess.PIPE,
                                                  stderr=subprocess.PIPE, text=True,
                                                  env=env())], "torchrun", 90)
    assert code == 0 and out.count("OK") == 2, f"torchrun exited {code}\n{out}\n{err}"


def test_paddlerun_starts_unmodified_script():
    launch = os.environ["PADDLE_LAUNCH"]
    cmd = ([sys.executable, launch] if launch.endswith(".py") else [launch]) + [
        "--nproc=2", WORKER, "launched"]
    [(code, out, err)] = finish([subprocess.Popen(cmd, stdout=subprocess.PIPE,
                                                  stderr=subprocess.PIPE, text=True,
                                                  env=env())], "paddlerun", 90)
    assert code == 0 and out.count("OK") == 2, f"paddlerun exited {code}\n{out}\n{err}"


def test_torch_ddp_example_trains_what_gloo_trains():
    # Two ranks: each gradient element is one sum of two values, exact in either backend, so DDP
    # must end with the very same parameters (and the example says so by their hash).
    launch = os.environ["PADDLE_LAUNCH"]
    results = {}
    for backend in ("paddle", "gloo"):
        cmd = ([sys.executable, launch] if launch.endswith(".py") else [launch]) + [
            "--nproc=2", os.environ["TORCH_DDP_EXAMPLE"], f"--backend={backend}", "--model=mlp",
            "--samples=2560", "--batch=64", "--test-samples=1000"]
        [(code, out, err)] = finish([subprocess.Popen(cmd, stdout=subprocess.PIPE,
                                                      stderr=subprocess.PIPE, text=True,
                                                      env=env())], f"torch_ddp {backend}", 120)
        lines = [line.split("] ", 1)[-1] for line in out.splitlines() if '"param_hash"' in line]
        assert code == 0 and len(lines) == 1, f"torch_ddp.py {backend} exited {code}\n{out}\n{err}"
        results[backend] = json.loads(lines[0])
    assert results["paddle"]["world_size"] == 2
    assert results["paddle"]["param_hash"] == results["gloo"]["param_hash"], results
    assert results["paddle"]["test_accuracy"] > 0.5, results
