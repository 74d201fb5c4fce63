"""The metrics a Python training loop reports to `paddlerun --dashboard` (docs/observability.md).

One registry per process, the same C++ MetricsRegistry the C++ examples use: updates are a few
atomic operations, so a loop may report every step. Under paddlerun --dashboard (which sets
PADDLE_METRICS_ADDR) the first report starts a background thread that sends a snapshot to the
launcher every second; elsewhere nothing is sent and reporting costs next to nothing.

    import time
    from paddle import telemetry
    t0 = time.perf_counter()
    ...  # one training step over `n` samples, with ddp = DistributedDataParallel(model)
    telemetry.record_step(time.perf_counter() - t0, n, ddp=ddp)
    telemetry.set_loss(loss.item())

Names of your own (`count`, `gauge`, `observe`) appear on /metrics as paddle_NAME.
"""
import atexit
import json
import os
import threading

from paddle import _C

_registry = _C.telemetry.MetricsRegistry()
_training = _C.telemetry.TrainingMetrics(_registry)
_pusher = None
_started = False
_lock = threading.Lock()

__all__ = ["record_step", "record_data_wait", "set_loss", "set_accuracy", "set_membership",
           "count", "gauge", "observe", "event", "snapshot"]


def _start():
    """Starts the pusher on the first report, where paddlerun asked for metrics."""
    global _pusher, _started
    with _lock:
        if _started:
            return
        _started = True
        _pusher = _C.telemetry.MetricsPusher.from_env(_registry, int(os.environ.get("RANK", "0")))
        if _pusher is not None:
            atexit.register(_stop)


def _stop():
    """Sends the last snapshot and joins the pusher's thread (at exit)."""
    global _pusher
    _pusher = None


def record_step(seconds, samples, ddp=None):
    """One training step of `samples` samples on this rank that took `seconds`; with `ddp` (a
    paddle.distributed.DistributedDataParallel) also the time it waited for gradient allreduce."""
    _start()
    wait = ddp.comm_wait_seconds() if ddp is not None else None
    _training.record_step(seconds, samples, wait)


def record_data_wait(seconds):
    """Time a step waited for its batch."""
    _start()
    _training.record_data_wait(seconds)


def set_loss(loss):
    _start()
    _training.set_loss(float(loss))


def set_accuracy(accuracy):
    _start()
    _training.set_accuracy(float(accuracy))


def set_membership(generation, rank, size, cause):
    """This worker joined elastic `generation` as `rank` of `size`; `cause` says why it formed."""
    _start()
    _training.set_membership(generation, rank, size, cause)
    if _pusher is not None:
        _pusher.set_rank(rank)


def count(name, amount=1.0):
    """Adds `amount` (>= 0) to the counter `name` ([a-z_][a-z0-9_]*)."""
    _start()
    _registry.add(name, amount)


def gauge(name, value):
    _start()
    _registry.set(name, float(value))


def observe(name, value):
    """Counts `value` into the histogram `name` (buckets for seconds, 1 ms to 60 s)."""
    _start()
    _registry.observe(name, float(value))


def event(kind, text):
    _start()
    _registry.event(kind, text)


def snapshot():
    """Everything reported so far, as the launcher receives it (a dict)."""
    return json.loads(_registry.snapshot_json())
