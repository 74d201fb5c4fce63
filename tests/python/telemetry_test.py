"""paddle.telemetry: a Python loop's reports land in the worker's registry (snapshot), bad names
are ValueErrors rather than aborts, and under PADDLE_METRICS_ADDR a child process sends its
snapshots over UDP to the address, the last one as it exits."""
import json
import os
import socket
import subprocess
import sys

import pytest

from paddle import telemetry


class FakeDdp:
    """What record_step reads of a DistributedDataParallel: the reducer's total wait."""

    def __init__(self):
        self.wait = 0.0

    def comm_wait_seconds(self):
        return self.wait


def test_reports_reach_the_snapshot():
    ddp = FakeDdp()
    ddp.wait = 0.25
    telemetry.record_step(0.5, 32, ddp=ddp)
    ddp.wait = 0.375
    telemetry.record_step(0.5, 32, ddp=ddp)
    telemetry.set_loss(1.5)
    telemetry.record_data_wait(0.125)
    telemetry.count("batches_skipped", 2)
    telemetry.gauge("learning_rate", 0.1)
    telemetry.observe("data_wait_seconds", 0.003)
    telemetry.event("note", "hello")
    s = telemetry.snapshot()
    assert s["counters"]["paddle_steps_total"] == 2
    assert s["counters"]["paddle_samples_total"] == 64
    assert s["counters"]["paddle_allreduce_wait_seconds_total"] == pytest.approx(0.375)
    assert s["gauges"]["paddle_loss"] == 1.5
    assert s["counters"]["paddle_data_wait_seconds_total"] == 0.125
    assert s["counters"]["batches_skipped"] == 2
    assert s["gauges"]["learning_rate"] == 0.1
    assert sum(s["histograms"]["data_wait_seconds"]["counts"]) == 1
    assert s["events"][-1]["text"] == "hello"


def test_bad_names_and_kinds_are_value_errors():
    with pytest.raises(ValueError, match="must match"):
        telemetry.count("Not-A-Name")
    with pytest.raises(ValueError, match="already registered as a counter, not a gauge"):
        telemetry.gauge("paddle_steps_total", 1)
    with pytest.raises(ValueError, match="only goes up"):
        telemetry.count("x_total", -1)


CHILD = """
from paddle import telemetry
for i in range(3):
    telemetry.record_step(0.01, 8)
"""


def test_a_worker_under_paddlerun_sends_its_snapshots():
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        s.settimeout(10)
        env = dict(os.environ, PADDLE_METRICS_ADDR=f"127.0.0.1:{s.getsockname()[1]}", RANK="3")
        subprocess.run([sys.executable, "-c", CHILD], env=env, check=True, timeout=60)
        msg = json.loads(s.recv(65536))  # the snapshot sent at exit
    assert msg["rank"] == 3
    assert msg["metrics"]["counters"]["paddle_steps_total"] == 3
