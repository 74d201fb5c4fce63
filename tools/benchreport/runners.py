"""Runs one repetition of each benchmark and turns its output into measurements.

A measurement is one figure of one implementation at one x (a size, a worker count), with the
values of every repetition (results.json "measurements"):
  {"figure": "allreduce n=2", "impl": "ours/auto", "x": 4096, "metric": "busbw_gbs",
   "higher_is_better": true, "reps": [...], "raw": [{...every field of that repetition...}]}
Benchmarks run with every thread variable set to the process's thread count (Note [Peer
threads]); a peer that is not installed is recorded once, with why, and left out.

Note [Peer threads]: OpenBLAS (the system BLAS once libopenblas-dev is installed, so PyTorch's and
NumPy's GEMM), OpenMP and MKL each start as many threads as cores unless told otherwise, whatever
torch.set_num_threads says; on a small machine those threads oversubscribe the cores and a peer
runs several times slower than it can. Every process here, ours and the peers', gets
OMP_NUM_THREADS, OPENBLAS_NUM_THREADS and MKL_NUM_THREADS equal to the threads it computes with,
and the same fixed glibc malloc thresholds (GLIBC_TUNABLES, MALLOC_TUNABLES below).
"""
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time

THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")
# Fixed glibc malloc thresholds for every process (bench/training/torch_fashion_mnist.py says
# why: PyTorch's CNN otherwise page-faults its buffers in again every step).
MALLOC_TUNABLES = "glibc.malloc.mmap_threshold=33554432:glibc.malloc.trim_threshold=268435456"
# bench_inputs.h PrintRowLine; min_us and p99_us are absent from older recorded outputs.
ROW_RE = re.compile(r"^ROW rank=(\d+) bytes=(\d+) count=(\d+) time_us=([\d.]+) "
                    r"p50_us=([\d.]+) max_us=([\d.]+)(?: min_us=([\d.]+) p99_us=([\d.]+))? "
                    r"wrong=(\d+)", re.M)


class BenchError(RuntimeError):
    """A benchmark process failed; the message names the command and ends with its output.
    .timed_out: it was killed at its timeout."""

    timed_out = False


def thread_env(threads, base=None):
    """`base` (default os.environ) with every thread variable set to `threads`, and the malloc
    thresholds unless `base` sets GLIBC_TUNABLES."""
    env = dict(os.environ if base is None else base)
    for var in THREAD_VARS:
        env[var] = str(threads)
    env.setdefault("GLIBC_TUNABLES", MALLOC_TUNABLES)
    return env


def descendants(pid):
    """Every living process descended from `pid` (from /proc), children first."""
    children = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(entry))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def kill_tree(pid):
    """SIGKILL the session `pid` leads and every process descended from it: MPICH's hydra starts
    each rank in a session of its own, which a group kill alone would leave spinning."""
    victims = descendants(pid)
    for kill in [lambda: os.killpg(pid, signal.SIGKILL)] + [
            (lambda v=v: os.kill(v, signal.SIGKILL)) for v in victims]:
        try:
            kill()
        except (ProcessLookupError, PermissionError):
            pass


def run_until(cmd, env, timeout, cwd=None, stop_when=None, grace=0.0):
    """(stdout, stopped) of `cmd`. With `stop_when`, a predicate on the stdout so far, the command
    is killed `grace` seconds after it first holds, if it has not ended by then, and `stopped`
    says so (Note [Finalize hang], a time-to-accuracy run past its target). BenchError on failure
    or when `timeout` passes first (its .timed_out is True then). The command runs in a session of
    its own, so a kill takes what it started too (mpiexec's ranks)."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        p = subprocess.Popen(cmd, env=env, cwd=cwd, stdout=out, stderr=err, text=True,
                             start_new_session=True)
        start = time.monotonic()
        held_since = None
        stopped = False
        try:
            while p.poll() is None:
                now = time.monotonic()
                if now - start > timeout:
                    kill_tree(p.pid)
                    p.wait()
                    error = BenchError(f"{' '.join(cmd)} did not finish in {timeout:g} s "
                                       "(killed)")
                    error.timed_out = True
                    raise error
                if stop_when is not None and held_since is None:
                    out.seek(0)
                    if stop_when(out.read()):
                        held_since = now
                if held_since is not None and now - held_since >= grace:
                    kill_tree(p.pid)
                    p.wait()
                    stopped = True
                    break
                time.sleep(0.1)
        except BaseException:
            # Interrupted (Ctrl-C, or SIGTERM through main's handler): the benchmark's own session
            # would outlive us (a spinning MPICH rank was seen doing so), so it goes first.
            kill_tree(p.pid)
            p.wait()
            raise
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    if p.returncode != 0 and not stopped:
        tail = (stdout + stderr)[-2000:]
        raise BenchError(f"{' '.join(cmd)} exited with {p.returncode}; its output ends:\n{tail}")
    return stdout, stopped


def run(cmd, env, timeout, cwd=None):
    """stdout of `cmd`; BenchError (with the output's tail) on failure or timeout."""
    return run_until(cmd, env, timeout, cwd)[0]


def bus_factor(op, nproc):
    """busbw / algbw (bench/collectives/report.h)."""
    if op == "allreduce":
        return 2 * (nproc - 1) / nproc
    if op in ("allgather", "reduce_scatter", "alltoall"):
        return (nproc - 1) / nproc
    return 1.0


# bench_inputs.h kMinBudgetIters.
MIN_BUDGET_ITERS = 2


def iterations_for(iters, nbytes, budget_bytes=0, warmup=False, floor=MIN_BUDGET_ITERS):
    """bench/collectives/bench_inputs.h BudgetedIterations: up to 16x more runs below 64 KiB,
    and with `budget_bytes` fewer above it, at least `floor` (Note [Sweep budget] there)."""
    plain = iters * min(max((64 << 10) // max(nbytes, 1), 1), 16)
    if budget_bytes <= 0 or nbytes <= budget_bytes or iters <= 0:
        return plain
    return min(max(iters * budget_bytes // nbytes, min(iters, 1 if warmup else floor)), plain)


def sweep_sizes(min_bytes, max_bytes, coarse_from=0):
    """The sizes of a sweep (bench_inputs.h NextSweepBytes: 4x steps from coarse_from)."""
    sizes, nbytes = [], min_bytes
    while nbytes <= max_bytes:
        sizes.append(nbytes)
        nbytes *= 4 if 0 < coarse_from <= nbytes else 2
    return sizes


def rows_from_output(text, op, nproc):
    """Table rows from "ROW ..." lines of every rank (report.h's CollectRows, in Python): per
    size the slowest rank's times and the sum of wrong elements. Raises BenchError when a size
    lacks a rank's line."""
    by_bytes = {}
    for m in ROW_RE.finditer(text):
        rank, nbytes = int(m.group(1)), int(m.group(2))
        by_bytes.setdefault(nbytes, {})[rank] = m
    if not by_bytes:
        raise BenchError("no ROW lines in the output:\n" + text[-1000:])
    rows = []
    for nbytes in sorted(by_bytes):
        ranks = by_bytes[nbytes]
        if len(ranks) != nproc:
            raise BenchError(f"size {nbytes}: ROW lines from ranks {sorted(ranks)}, expected "
                             f"{nproc} ranks")
        time_us = max(float(m.group(4)) for m in ranks.values())
        algbw = nbytes / time_us / 1e3
        row = {"op": op, "nproc": nproc, "bytes": nbytes,
               "count": int(next(iter(ranks.values())).group(3)), "time_us": time_us,
               "p50_us": max(float(m.group(5)) for m in ranks.values()),
               "max_us": max(float(m.group(6)) for m in ranks.values()),
               "algbw_gbs": algbw, "busbw_gbs": algbw * bus_factor(op, nproc),
               "wrong": sum(int(m.group(9)) for m in ranks.values())}
        if all(m.group(7) is not None for m in ranks.values()):
            row["min_us"] = max(float(m.group(7)) for m in ranks.values())
            row["p99_us"] = max(float(m.group(8)) for m in ranks.values())
        rows.append(row)
    return rows


def sweep_flags(min_bytes, max_bytes, iters, warmup, coarse_from=0, budget_bytes=0):
    """The sweep flags bench/collectives and the MPI peer share."""
    return [f"--min-bytes={min_bytes}", f"--max-bytes={max_bytes}", f"--iters={iters}",
            f"--warmup={warmup}", f"--coarse-from={coarse_from}",
            f"--budget-bytes={budget_bytes}"]


def collectives_round(binary, op, nproc, min_bytes, max_bytes, iters, warmup, peers,
                      transport, timeout, coarse_from=0, budget_bytes=0):
    """One sweep of bench/collectives (ours and, with `peers`, PyTorch gloo and OpenMPI over TCP
    and shared memory, taking turns): rows as its --json writes them. `transport` is
    PADDLE_TRANSPORT for our workers ("auto" leaves it unset)."""
    env = thread_env(1)
    env.pop("PADDLE_TRANSPORT", None)
    if transport != "auto":
        env["PADDLE_TRANSPORT"] = transport
    with tempfile.TemporaryDirectory(prefix="bench-report-") as tmp:
        path = os.path.join(tmp, "rows.json")
        cmd = [binary, "--backend=native", f"--op={op}", f"--nproc={nproc}",
               f"--timeout-s={timeout}", f"--json={path}"]
        cmd += sweep_flags(min_bytes, max_bytes, iters, warmup, coarse_from, budget_bytes)
        if peers:
            cmd.append("--peers")
        # `timeout` bounds each implementation's sweep inside the benchmark (--timeout-s kills a
        # hung one and the others go on); the step as a whole runs up to four of them.
        run(cmd, env, timeout * (4 if peers else 1) + 30)
        with open(path) as f:
            rows = json.load(f)
    for row in rows:
        if row["backend"] == "native":
            row["transport"] = transport
    return rows


# Note [Finalize hang] in bench/peers/mpi_collectives.cc: once every rank has printed this, its
# rows are all out; a run still alive FINALIZE_GRACE_S later is stuck in MPI_Finalize.
FINALIZE_RE = re.compile(r"^FINALIZE rank=(\d+)", re.M)
FINALIZE_GRACE_S = 5.0


def mpich_round(mpiexec, binary, nproc, min_bytes, max_bytes, iters, warmup, tcp, timeout,
                op="allreduce", coarse_from=0, budget_bytes=0):
    """One sweep of `op` under MPICH (its ch4:ucx device: UCX's shared memory by default,
    UCX_TLS=tcp,self for TCP): rows like collectives_round's. A run that hangs in MPI_Finalize
    after every rank's rows are out is killed after FINALIZE_GRACE_S and its rows kept, each
    marked "finalize_hang"."""
    env = thread_env(1)
    if tcp:
        env["UCX_TLS"] = "tcp,self"
        env["UCX_NET_DEVICES"] = "lo"
    cmd = [mpiexec, "-n", str(nproc), binary, f"--op={op}"]
    cmd += sweep_flags(min_bytes, max_bytes, iters, warmup, coarse_from, budget_bytes)
    text, stopped = run_until(
        cmd, env, timeout, stop_when=lambda out: len(set(FINALIZE_RE.findall(out))) >= nproc,
        grace=FINALIZE_GRACE_S)
    rows = rows_from_output(text, op, nproc)
    for row in rows:
        row.update(backend="mpich", algo="default", transport="tcp" if tcp else "default-shm",
                   dtype="float32")
        if stopped:
            row["finalize_hang"] = True
    return rows


def mpich_missing(mpiexec, binary):
    """Why the MPICH peer cannot run here, or None when it can."""
    if shutil.which(mpiexec) is None:
        return f"not installed ({mpiexec} not found; `apt-get install mpich libmpich-dev`)"
    if not os.access(binary, os.X_OK):
        return f"not built ({binary} missing; `bazel build --config=opt //bench:mpich_collectives`)"
    return None


def last_json(text):
    """The last JSON object line of a program's output (the launcher prefixes "[rank 0] ")."""
    for line in reversed(text.splitlines()):
        line = line.split("] ", 1)[-1] if line.startswith("[rank") else line
        if line.startswith("{"):
            return json.loads(line)
    raise BenchError("no JSON line in the output:\n" + text[-1000:])


def training_run(impl, model, workers, threads, samples, batch, no_sync, paths, timeout):
    """samples/s of one training run: `impl` "ours" (examples/fashion_mnist) or "torch"
    (bench/training/torch_fashion_mnist.py); `workers` > 1 starts them with tools/launch.py
    (data parallel: ours over its own communicator, PyTorch's DDP over gloo)."""
    args = [f"--model={model}", f"--threads={threads}", f"--batch={batch}"]
    if impl == "ours":
        cmd = [paths["fashion_mnist"]] + args + ["--epochs=1", f"--train-samples={samples}",
                                                  "--test-samples=500"]
    else:
        cmd = ["/usr/bin/python3", paths["torch_script"]] + args + [f"--samples={samples}"]
    if no_sync:
        cmd.append("--no-sync")
    if workers > 1:
        cmd = ["/usr/bin/python3", paths["launch"], f"--nproc={workers}"] + cmd
    env = thread_env(threads)
    env.pop("WORLD_SIZE", None)
    return last_json(run(cmd, env, timeout))["samples_per_s"]


# examples/fashion_mnist's line per epoch (rank 0; the launcher may prefix "[rank 0] ").
EPOCH_RE = re.compile(r"epoch (\d+)/\d+\s+train_loss \S+\s+test_accuracy ([\d.]+)\s+"
                      r"samples/s \d+\s+epoch_time ([\d.]+)s")


def time_to_accuracy(accuracies, train_s, target):
    """(seconds, epochs): the training time of the epochs up to the first whose test accuracy
    reaches `target` (evaluation not counted, as MLPerf's clock stops only for it), or
    (None, None) when none does."""
    total = 0.0
    for epoch, (accuracy, seconds) in enumerate(zip(accuracies, train_s), 1):
        total += seconds
        if accuracy >= target:
            return total, epoch
    return None, None


def accuracy_curve(impl, text, require=True):
    """([accuracy per epoch], [training seconds per epoch]) of one run's output so far: ours'
    epoch lines, or the peer's per-epoch JSON lines ({"epoch", "accuracy", "train_s"}) or, from
    an older peer, its final JSON. BenchError when there is none and `require`."""
    if impl == "ours":
        found = EPOCH_RE.findall(text)
        accuracies, train_s = [float(a) for _, a, _ in found], [float(t) for _, _, t in found]
    else:
        accuracies, train_s = [], []
        for line in text.splitlines():
            line = line.split("] ", 1)[-1] if line.startswith("[rank") else line
            if line.startswith('{"epoch":'):
                doc = json.loads(line)
                accuracies.append(doc["accuracy"])
                train_s.append(doc["train_s"])
        if not accuracies and require:
            doc = last_json(text)
            return doc["epoch_accuracy"], doc["epoch_train_s"]
    if not accuracies and require:
        raise BenchError("no epoch lines in the output:\n" + text[-1000:])
    return accuracies, train_s


def tta_run(impl, model, workers, epochs, target, batch, test_samples, paths, timeout):
    """Seconds of training until the test accuracy reaches `target` (time to accuracy), with the
    run's curve: ours examples/fashion_mnist, the peer torch_fashion_mnist.py --epochs, the same
    optimizer, schedule (cosine over all epochs), batch and data, 1 thread per worker. BenchError
    when the target is not reached in `epochs` epochs."""
    args = [f"--model={model}", "--threads=1", f"--batch={batch}",
            f"--test-samples={test_samples}"]
    if impl == "ours":
        cmd = [paths["fashion_mnist"]] + args + [f"--epochs={epochs}", "--train-samples=60000"]
    else:
        cmd = ["/usr/bin/python3", paths["torch_script"]] + args + [f"--epochs={epochs}",
                                                                     "--samples=60000"]
    if workers > 1:
        cmd = ["/usr/bin/python3", paths["launch"], f"--nproc={workers}"] + cmd
    env = thread_env(1)
    env.pop("WORLD_SIZE", None)
    # The epochs after the first that reaches the target cannot change the figure: the run ends
    # there (the schedule still spans all `epochs`, as in a full run).
    reached_target = lambda out: any(a >= target for a in accuracy_curve(impl, out, False)[0])
    text, _ = run_until(cmd, env, timeout, stop_when=reached_target)
    accuracies, train_s = accuracy_curve(impl, text)
    seconds, reached = time_to_accuracy(accuracies, train_s, target)
    if seconds is None:
        raise BenchError(f"{impl} {model} at {workers} worker(s) did not reach {target} in "
                         f"{epochs} epochs (accuracy per epoch {accuracies})")
    return seconds, {"epoch_accuracy": accuracies, "epoch_train_s": train_s,
                     "epochs_to_target": reached}
