#!/usr/bin/env python3
"""A real Prometheus server scrapes a running 2-worker job's paddlerun --dashboard.

Starts `paddlerun --nproc=2 --dashboard=0 //examples:fashion_mnist`, then Debian's prometheus
(tools/install-deps) with a config of its own: one scrape job on the dashboard's /metrics every
1 s, its storage in a temporary folder, listening on a free port of 127.0.0.1. Through
Prometheus' HTTP API (/api/v1/query) it checks that every documented series arrives for both
ranks with the labels job, rank, host and generation, that the counters grow between two
queries, and that the scrapes kept to the 1 s interval; it prints the series names scraped.
Both processes are stopped at the end. SKIP (exit 0) where prometheus is not installed.

usage: prometheus_test.py LAUNCH
"""
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request

from tests.testing.launched_job import LaunchedJob

LAUNCH = [sys.argv[1]] if not sys.argv[1].endswith(".py") else ["/usr/bin/python3", sys.argv[1]]
ENV = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1")
SERIES = ["paddle_steps_total", "paddle_samples_total", "paddle_step_seconds_bucket",
          "paddle_step_seconds_sum", "paddle_step_seconds_count",
          "paddle_allreduce_wait_seconds_total", "paddle_membership_changes_total", "paddle_loss",
          "paddle_up"]
failures = []


def fail(message):
    print(f"FAIL: {message}", flush=True)
    failures.append(message)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def query(base, expr):
    """The result vector of an instant query, [] while Prometheus has nothing (or is starting)."""
    url = f"{base}/api/v1/query?{urllib.parse.urlencode({'query': expr})}"
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            body = json.load(r)
    except OSError:
        return []
    return body["data"]["result"] if body.get("status") == "success" else []


def wait_for(what, predicate, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.5)
    fail(f"{what} within {timeout} s")
    return None


def check(base):
    # Both ranks' step counters, with the documented labels.
    steps = wait_for("paddle_steps_total of both ranks above 0",
                     lambda: (lambda r: r if len(r) == 2 else None)(
                         query(base, "paddle_steps_total > 0")), 30)
    if not steps:
        return
    for s in steps:
        labels = s["metric"]
        missing = {"job", "rank", "host", "generation"} - set(labels)
        if missing:
            fail(f"paddle_steps_total lacks the labels {sorted(missing)}: {labels}")
    if sorted(s["metric"].get("rank") for s in steps) != ["0", "1"]:
        fail(f"ranks {[s['metric'].get('rank') for s in steps]}, expected 0 and 1")
    for name in SERIES:
        got = query(base, name)
        if len({s["metric"].get("rank") for s in got}) != 2:
            fail(f"{name}: series for ranks {sorted({s['metric'].get('rank') for s in got})}, "
                 "expected 0 and 1")
    first = {s["metric"]["rank"]: float(s["value"][1]) for s in steps}
    time.sleep(3)
    later = {s["metric"]["rank"]: float(s["value"][1])
             for s in query(base, "paddle_steps_total")}
    for rank, value in first.items():
        if not later.get(rank, 0) > value:
            fail(f"rank {rank}'s paddle_steps_total did not grow in 3 s: {value} -> "
                 f"{later.get(rank)}")
    rate = query(base, "sum(rate(paddle_samples_total[5s]))")
    print(f"samples/s over both ranks, as Prometheus computes it: "
          f"{float(rate[0]['value'][1]) if rate else 'none'}")
    # The scrape interval held: up's samples over the last 8 s of scraping.
    held = query(base, 'count_over_time(up{job="paddle"}[8s])')
    count = int(float(held[0]["value"][1])) if held else 0
    print(f"scrapes in the last 8 s: {count} (interval 1 s)")
    if not 6 <= count <= 9:
        fail(f"{count} scrapes in 8 s at a 1 s interval")
    names = query(base, 'count by (__name__) ({__name__=~"paddle_.+"})')
    print("series scraped: " + ", ".join(
        f"{s['metric']['__name__']} ({s['value'][1]})" for s in
        sorted(names, key=lambda s: s["metric"]["__name__"])))


def main():
    prometheus = shutil.which("prometheus")
    if prometheus is None:
        print("SKIP: prometheus is not installed (tools/install-deps: prometheus)")
        return 0
    work = tempfile.mkdtemp(prefix="prometheus_test.")
    # Hours of training at any speed: the job must still run when the counters are read twice;
    # the test stops it (SIGTERM) once its checks are done.
    job = LaunchedJob(LAUNCH + ["--nproc=2", "--dashboard=0", "//examples:fashion_mnist",
                                "--model=mlp", "--epochs=100000", "--train-samples=6000",
                                "--test-samples=500", "--batch=64"], env=ENV)
    server = None
    try:
        _, m = job.wait_line(r"dashboard at (http://\S+/) ", timeout=60)
        if not m:
            fail("paddlerun did not print the dashboard's address")
            return 1
        target = urllib.parse.urlparse(m.group(1)).netloc
        port = free_port()
        config = os.path.join(work, "prometheus.yml")
        with open(config, "w") as f:
            f.write("global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
                    "scrape_configs:\n  - job_name: paddle\n    static_configs:\n"
                    f"      - targets: ['{target}']\n")
        server = subprocess.Popen(
            [prometheus, f"--config.file={config}", f"--storage.tsdb.path={work}/data",
             f"--web.listen-address=127.0.0.1:{port}"],
            stdout=open(os.path.join(work, "prometheus.log"), "w"), stderr=subprocess.STDOUT)
        base = f"http://127.0.0.1:{port}"
        if wait_for("Prometheus ready", lambda: _ready(base), 20):
            time.sleep(9)  # 8 s of scrapes for the interval check
            check(base)
        if job.p.poll() is not None:
            fail(f"the job ended during the test (exit status {job.p.returncode})")
    finally:
        if server is not None:
            server.terminate()
            try:
                server.wait(timeout=10)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait()
        if job.p.poll() is None:
            job.p.send_signal(signal.SIGTERM)
        rc = job.finish(20)
        if rc not in (0, 128 + signal.SIGTERM):
            fail(f"the launcher exited with {rc} after SIGTERM")
        if failures:
            print(job.text()[-3000:])
            log = os.path.join(work, "prometheus.log")
            if os.path.exists(log):
                print(open(log).read()[-2000:])
        shutil.rmtree(work, ignore_errors=True)
    print("PASS" if not failures else f"{len(failures)} failures")
    return 1 if failures else 0


def _ready(base):
    try:
        with urllib.request.urlopen(f"{base}/-/ready", timeout=2) as r:
            return r.status == 200
    except OSError:
        return False


if __name__ == "__main__":
    sys.exit(main())
