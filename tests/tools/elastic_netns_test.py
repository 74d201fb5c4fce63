#!/usr/bin/env python3
"""Elastic training across three "nodes" made of network namespaces (needs root: ip netns, a
bridge, veth pairs). The job's store (paddle_store_server) runs in the root namespace on the
bridge, as etcd would run on a machine of its own; each namespace runs
`paddlerun --nnodes=2:3 --nproc=1 --min-nproc=1` with fashion_mnist --elastic. Once the world is
3, the test SIGKILLs every process of the node that holds rank 0, mid-epoch: the other two must
go on at world size 2. Then it starts that node's launcher again: its worker must join the
running job (world size 3 again). Every launcher still standing must exit 0 with the job
finished; nothing may stay behind in the namespaces.

usage: elastic_netns_test.py LAUNCH STORE_SERVER
"""
import os
import random
import re
import secrets
import signal
import subprocess
import sys
import time

from tests.testing.launched_job import LaunchedJob, wait_any

LAUNCH = [sys.argv[1]] if not sys.argv[1].endswith(".py") else ["/usr/bin/python3", sys.argv[1]]
STORE_SERVER = sys.argv[2]
NODES = 3
# 3 epochs (2,814 steps): the kill comes a moment after the world of 3 starts, and the node
# started again (a launcher, its worker, the join) takes seconds while the other two train on;
# the job must outlast that with room to spare, however fast the steps go.
TRAIN = ["//examples:fashion_mnist", "--elastic", "--commit-every=5", "--model=mlp",
         "--epochs=3", "--train-samples=60000", "--test-samples=2000", "--batch=64", "--seed=3"]
ENV = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1",
           PADDLE_STORE_TOKEN=secrets.token_hex(16),
           PATH=os.environ.get("PATH", "") + ":/usr/sbin:/sbin")
TAG = f"{random.randrange(1 << 16):04x}"
SUBNET = f"10.79.{random.randrange(1, 250)}"
BRIDGE = f"ebr{TAG}"
failures = []


def fail(message):
    print(f"FAIL: {message}", flush=True)
    failures.append(message)


def ns(i):
    return f"en{TAG}-{i}"


def ip(*args, check=True):
    r = subprocess.run(["ip", *args], env=ENV, capture_output=True, text=True)
    if check and r.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {r.stderr.strip()}")
    return r.stdout


def ns_pids(i):
    return [int(p) for p in ip("netns", "pids", ns(i), check=False).split()]


def kill_node(i):
    for pid in ns_pids(i):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


class Node(LaunchedJob):
    """One launcher in namespace `i`, its output lines timed (tests/testing/launched_job.py)."""

    def __init__(self, i, endpoint, label):
        super().__init__(["ip", "netns", "exec", ns(i)] + LAUNCH +
                         ["--nnodes=2:3", "--nproc=1", "--min-nproc=1",
                          f"--rdzv-endpoint={endpoint}", "--rdzv-timeout=60"] + TRAIN,
                         env=ENV, label=label, new_session=False)
        self.i = i


def setup():
    ip("link", "add", BRIDGE, "type", "bridge")
    ip("addr", "add", f"{SUBNET}.254/24", "dev", BRIDGE)
    ip("link", "set", BRIDGE, "up")
    for i in range(NODES):
        ip("netns", "add", ns(i))
        ip("link", "add", f"ev{TAG}-{i}", "type", "veth", "peer", "name", "eth0", "netns", ns(i))
        ip("link", "set", f"ev{TAG}-{i}", "master", BRIDGE, "up")
        ip("-n", ns(i), "addr", "add", f"{SUBNET}.{i + 1}/24", "dev", "eth0")
        ip("-n", ns(i), "link", "set", "eth0", "up")
        ip("-n", ns(i), "link", "set", "lo", "up")


def cleanup():
    for i in range(NODES):
        kill_node(i)
        ip("netns", "del", ns(i), check=False)
        ip("link", "del", f"ev{TAG}-{i}", check=False)
    ip("link", "del", BRIDGE, check=False)


def run(nodes_out):
    store = subprocess.Popen([STORE_SERVER, f"--host={SUBNET}.254", "--port=0"], env=ENV,
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        words = store.stdout.readline().decode().split()
        if len(words) != 2 or words[0] != "port":
            fail(f"paddle_store_server did not start: {words}")
            return
        endpoint = f"{SUBNET}.254:{words[1]}"
        t0 = time.monotonic()
        nodes = [Node(i, endpoint, f"node{i}") for i in range(NODES)]
        nodes_out.extend(nodes)
        t, m, _ = wait_any(nodes, r"elastic: generation \d+: world size 3, from step (\d+)", t0)
        if t is None:
            fail("the three nodes never formed a world of 3")
            return
        # Mid-epoch: a moment after the world of 3 started training, some steps in.
        time.sleep(random.uniform(0.2, 0.5))
        # The node that holds rank 0 now: the one whose worker printed the last generation line.
        rx = re.compile(r"generation \d+: world size 3, from step")
        victim = max(nodes, key=lambda n: n.last(rx))
        kill_at = time.monotonic()
        kill_node(victim.i)
        victim.p.wait()
        print(f"killed node {victim.i} (every process of namespace {ns(victim.i)}) "
              f"{kill_at - t:.2f} s after the world of 3 started at step {m.group(1)}, "
              f"{kill_at - t0:.1f} s into the job", flush=True)
        survivors = [n for n in nodes if n is not victim]
        t, m, _ = wait_any(survivors, r"recovered at step (\d+), world size 2", kill_at)
        if t is None:
            fail("the two surviving nodes did not go on at world size 2")
            return
        print(f"world size 2 after {t - kill_at:.2f} s (first completed step {m.group(1)})",
              flush=True)
        restart_at = time.monotonic()
        again = Node(victim.i, endpoint, f"node{victim.i}.1")
        nodes_out.append(again)
        live = survivors + [again]
        t, m, _ = wait_any(live, r"elastic: generation \d+: world size 3, from step (\d+)",
                            restart_at)
        if t is None:
            ended = " (the job had finished: too few steps for the test)" if any(
                n.p.poll() is not None for n in survivors) else ""
            fail(f"the node started again did not join: no generation of world size 3{ended}")
            return
        print(f"node {victim.i} started again joined after {t - restart_at:.2f} s: world size 3 "
              f"from step {m.group(1)}", flush=True)
        for n in live:
            try:
                rc = n.p.wait(timeout=120)
            except subprocess.TimeoutExpired:
                fail(f"{n.label}'s launcher did not end within 120 s")
                continue
            n.reader.join(5)
            if rc != 0:
                fail(f"{n.label}'s launcher exited {rc}")
        t, m, _ = wait_any(live, r'"world_size": (\d+)', restart_at, timeout=1)
        if m is None:
            fail("no final JSON line")
        elif m.group(1) != "3":
            fail(f"the job ended at world size {m.group(1)}, not 3")
        t, m, _ = wait_any(live, r'"test_accuracy": ([0-9.]+)', restart_at, timeout=1)
        if m and float(m.group(1)) < 0.75:
            fail(f"final test accuracy {m.group(1)} is below 0.75")
        print(f"job finished in {time.monotonic() - t0:.1f} s", flush=True)
        for i in range(NODES):
            left = ns_pids(i)
            if left:
                fail(f"processes left in namespace {ns(i)}: {left}")
    finally:
        store.stdin.close()
        try:
            store.wait(timeout=5)
        except subprocess.TimeoutExpired:
            store.kill()
            store.wait()


def main():
    if os.geteuid() != 0:
        print("FAIL: needs root (ip netns)")
        return 1
    nodes = []
    try:
        setup()
        run(nodes)
    except (RuntimeError, OSError) as e:
        fail(str(e))
    finally:
        cleanup()
    if failures:
        for n in nodes:
            print(n.text()[-6000:])
        print(f"{len(failures)} failure(s)")
        return 1
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
