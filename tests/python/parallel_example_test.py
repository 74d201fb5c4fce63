"""examples/fashion_mnist.py under the launcher with --elastic (paddle.distributed.elastic),
--local-sgd (paddle.distributed.LocalSGD) and on 3 workers with the default --batch=128: the same
parameters as the C++ example with the same flags, bit for bit; and an elastic job that loses a
worker to SIGKILL, admits its restarted replacement and lets another leave on SIGTERM finishes
with exit 0. --shard-optimizer (paddle.distributed.ZeroRedundancyOptimizer) against the unsharded
run and the C++ example."""
import json
import os
import signal
import sys
import time

from tests.testing.launched_job import LaunchedJob

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
EXAMPLE = os.path.join(ROOT, "examples", "fashion_mnist.py")
LAUNCH = os.path.join(ROOT, "tools", "launch")
CPP = os.path.join(ROOT, "examples", "fashion_mnist")
ENV = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path), OMP_NUM_THREADS="1")
FLAGS = ["--elastic", "--model=mlp", "--threads=1", "--test-samples=1000"]


def last_json(job):
    for line in reversed(job.text().splitlines()):
        start = line.find("{")
        if start >= 0:
            return json.loads(line[start:])
    raise AssertionError("no JSON line:\n" + job.text())


def python_and_cpp(launcher_flags, flags):
    runs = {}
    for name, program in (("python", [sys.executable, EXAMPLE]), ("c++", [CPP])):
        job = LaunchedJob([LAUNCH, *launcher_flags, *program, *flags], env=ENV)
        assert job.finish(180) == 0, job.text()
        runs[name] = last_json(job)
    assert runs["python"]["param_hash"] == runs["c++"]["param_hash"], runs
    return runs


def test_elastic_same_parameters_as_the_cpp_example():
    runs = python_and_cpp(["--nproc=2", "--min-nproc=1"],
                          FLAGS + ["--epochs=1", "--train-samples=3000"])
    assert runs["python"]["steps"] == runs["c++"]["steps"] == 24  # ceil(3000 / 128)


def test_local_sgd_same_parameters_as_the_cpp_example():
    python_and_cpp(["--nproc=2"], ["--model=mlp", "--threads=1", "--epochs=1",
                                   "--train-samples=3000", "--test-samples=500", "--local-sgd=4",
                                   "--local-sgd-warmup=5", "--outer-momentum=0.5"])


def test_three_workers_share_the_default_batch_as_the_cpp_example():
    # 128 does not divide by 3: 43, 43 and 42 samples a step (Note [Uneven shares]).
    runs = python_and_cpp(["--nproc=3"], ["--model=mlp", "--threads=1", "--epochs=1",
                                          "--train-samples=2000", "--test-samples=500"])
    assert runs["c++"]["world_size"] == 3, runs


def test_kill_join_and_leave():
    job = LaunchedJob([LAUNCH, "--nproc=3", "--min-nproc=2", "--max-restarts=1", sys.executable,
                       EXAMPLE, *FLAGS, "--epochs=10", "--train-samples=20000"], env=ENV)
    try:
        t, m = job.wait_line(r"elastic: generation 0: world size 3", timeout=120)
        assert m, job.text()
        time.sleep(1.0)
        victim = [pid for pid, rank in job.workers(b"fashion_mnist.py").items() if rank == 1]
        assert victim, job.text()
        killed_at = time.monotonic()
        os.kill(victim[0], signal.SIGKILL)
        t, m = job.wait_line(r"elastic: recovered at step \d+, world size 2, generation \d+, "
                             r"([0-9.]+) s after the failure", killed_at, 60)
        assert m and float(m.group(1)) < 30, job.text()
        # The launcher restarts rank 1 (--max-restarts=1); the members admit it at a commit.
        t, m = job.wait_line(r"elastic: membership change after step \d+: 1 joining", t, 120)
        assert m, job.text()
        t, m = job.wait_line(r"elastic: generation \d+: world size 3", t, 60)
        assert m, job.text()
        leaver = [pid for pid, rank in job.workers(b"fashion_mnist.py").items() if rank == 2]
        assert leaver, job.text()
        os.kill(leaver[0], signal.SIGTERM)
        t, m = job.wait_line(r"elastic: left the job after step \d+ \(SIGTERM\)", t, 60)
        assert m, job.text()
        status = job.finish(240)
    finally:
        job.finish(1)
    assert status == 0, job.text()
    result = last_json(job)
    assert result["epoch"] == 10 and result["world_size"] == 2, result
    # Counted by the worker that prints (rank 0 at the end), which may be the replacement: it
    # saw at least the leave.
    assert result["membership_changes"] >= 1, result
    assert result["test_accuracy"] >= 0.75, result


def test_shard_optimizer_same_parameters_as_unsharded_and_the_cpp_example():
    # Two workers sum their gradients alike in either order, so the sharded Adam (reduce-scatter,
    # 1/2 of the state per rank) ends with the unsharded run's parameters, bit for bit.
    flags = ["--model=mlp", "--threads=1", "--epochs=1", "--train-samples=2000",
             "--test-samples=500", "--optimizer=adam"]
    sharded = python_and_cpp(["--nproc=2"], flags + ["--shard-optimizer"])
    job = LaunchedJob([LAUNCH, "--nproc=2", sys.executable, EXAMPLE, *flags], env=ENV)
    assert job.finish(180) == 0, job.text()
    plain = last_json(job)
    for run in sharded.values():
        assert run["param_hash"] == plain["param_hash"], (run, plain)
        assert run["train_loss"] == plain["train_loss"], (run, plain)
        assert abs(2 * run["optimizer_state_bytes"] - plain["optimizer_state_bytes"]) <= 16, (
            run, plain)
        assert run["peak_rss_mb"] > 0, run
