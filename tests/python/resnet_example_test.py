"""examples/resnet_fashion.py: the residual CNN written in Python computes what the C++-built
ResNet computes, and a 2-process job under the launcher that is stopped, or killed and restarted
by the launcher, resumes from its checkpoint at the saved step with the parameters of an
uninterrupted run."""
import json
import os
import re
import signal
import subprocess
import sys
import time
import uuid

import numpy as np
import pytest

import paddle
from paddle import nn
from paddle.nn import functional as F

EXAMPLES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples")
EXAMPLE = os.path.join(EXAMPLES, "resnet_fashion.py")
# 2 ranks x 16 samples, 12 steps an epoch, test on 100 samples: a few seconds a run.
FLAGS = ["--train-samples=384", "--batch=32", "--test-samples=100", "--threads=1"]


def load_example():
    sys.path.insert(0, EXAMPLES)
    try:
        import resnet_fashion  # pylint: disable=import-outside-toplevel
    finally:
        sys.path.remove(EXAMPLES)
    return resnet_fashion


def test_python_resnet_computes_what_the_cpp_resnet_computes():
    py_model, cpp_model = load_example().ResNet(seed=3), nn.make_model("resnet", 3)
    pairs = list(zip(py_model.parameters(), cpp_model.parameters()))
    assert len(pairs) == len(cpp_model.parameters()) == 47
    assert all(np.array_equal(a.numpy(), b.numpy()) for a, b in pairs)  # same weights drawn
    opts = [paddle.optim.SGD(m.parameters(), lr=0.05, momentum=0.9)
            for m in (py_model, cpp_model)]
    rng = np.random.default_rng(0)
    for _ in range(3):
        x = paddle.from_numpy(rng.standard_normal((8, 1, 28, 28), dtype=np.float32))
        y = paddle.from_numpy(rng.integers(0, 10, 8))
        for model, opt in zip((py_model, cpp_model), opts):
            opt.zero_grad()
            F.cross_entropy(model(x), y).backward()
            opt.step()
    # The same C++ kernels in the same order: equal bit for bit, parameters and BN statistics.
    for a, b in pairs:
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    buffers = list(zip(py_model.named_buffers(), cpp_model.named_buffers()))
    assert len(buffers) == 30
    for (_, a), (_, b) in buffers:
        np.testing.assert_array_equal(a.numpy(), b.numpy())


def env(token=""):
    return dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path), RESNET_TEST_TOKEN=token)


def launch_cmd(*flags, restarts=0):
    launch = os.environ["PADDLE_LAUNCH"]
    return ([sys.executable, launch] if launch.endswith(".py") else [launch]) + [
        "--nproc=2", f"--max-restarts={restarts}", "--grace-s=2", EXAMPLE, *FLAGS, *flags]


def result(out):
    lines = [line.split("] ", 1)[-1] for line in out.splitlines() if '"param_hash"' in line]
    assert len(lines) == 1, out
    return json.loads(lines[0])


def run_job(*flags, timeout=90):
    done = subprocess.run(launch_cmd(*flags), capture_output=True, text=True, timeout=timeout,
                          env=env())
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


@pytest.fixture(scope="module")
def straight():
    """Two epochs, uninterrupted, on 2 processes."""
    out = run_job("--epochs=2")
    r = result(out)
    assert r["world_size"] == 2 and r["steps"] == 24 and r["epoch"] == 2
    return r


def test_stopped_job_resumes_at_the_saved_step(straight, tmp_path):
    ckpt = str(tmp_path / "resnet.ckpt")
    first = result(run_job("--epochs=2", f"--checkpoint={ckpt}", "--max-steps=17"))
    assert (first["epoch"], first["step"], first["steps"]) == (1, 5, 17)
    assert first["param_hash"] != straight["param_hash"]
    saved = paddle.load(ckpt)
    assert (saved["epoch"], saved["step"]) == (1, 5)
    out = run_job("--epochs=2", f"--checkpoint={ckpt}", "--resume")
    assert "resumed from" in out and "at epoch 1 step 5" in out, out
    resumed = result(out)
    assert resumed["steps"] == 24
    assert resumed["param_hash"] == straight["param_hash"]
    assert resumed["test_accuracy"] == straight["test_accuracy"]


def worker_pid(token, rank):
    """The pid of the worker of `rank` started with RESNET_TEST_TOKEN=token, or None."""
    want = {f"RESNET_TEST_TOKEN={token}".encode(), f"RANK={rank}".encode()}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                if want <= set(f.read().split(b"\0")):
                    return int(pid)
        except OSError:
            continue
    return None


def test_killed_worker_restarts_from_the_checkpoint(straight, tmp_path):
    ckpt = str(tmp_path / "resnet.ckpt")
    token = uuid.uuid4().hex
    job = subprocess.Popen(launch_cmd("--epochs=2", f"--checkpoint={ckpt}", "--checkpoint-every=2",
                                      "--resume", restarts=1),
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           env=env(token), start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while not os.path.exists(ckpt):  # the first checkpoint: step 2 of 24
            assert job.poll() is None and time.monotonic() < deadline, "no checkpoint written"
            time.sleep(0.02)
        victim = worker_pid(token, 1)
        assert victim is not None, "rank 1's worker not found"
        os.kill(victim, signal.SIGKILL)
        out, _ = job.communicate(timeout=90)
    finally:
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)
            job.wait()
    assert job.returncode == 0, out
    resumed = re.findall(r"resumed from \S+ at epoch (\d+) step (\d+)", out)
    assert len(resumed) == 1, out  # only the restarted attempt found a checkpoint
    epoch, step = map(int, resumed[0])
    assert 0 < epoch * 12 + step < 24, out
    r = result(out)
    assert r["steps"] == 24
    assert r["param_hash"] == straight["param_hash"]
