#!/usr/bin/python3
"""Exactly-once data under disturbance, with real processes: paddlerun --nproc=4 --min-nproc=2
runs fashion_mnist --elastic --data=tasks --sample-ledger=DIR over shards of the first Fashion-MNIST
samples while this test disturbs one worker per run, in turn: SIGKILL (the launcher restarts it and
it rejoins), SIGSTOP for longer than the collective timeout then SIGCONT (the others go on without
it; its late reports must be ignored), SIGTERM (it leaves after a commit). Every run must exit 0
and its ledger must pass tools/ledger-check: every sample of every epoch exactly once.

usage: elastic_tasks_test.py LAUNCH MAKE_SHARDS LEDGER_CHECK [--runs=N] [--samples=N]
       [--epochs=N] [--seed=S] [--report=FILE] [--binary=PATH]
(the closing note's figure: --runs=50 --report=FILE, about 10-15 s a run)
"""
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import time

from tests.data.fashion_shards import make_shards
from tests.testing.launched_job import LaunchedJob

LAUNCH, MAKE_SHARDS, LEDGER_CHECK = sys.argv[1:4]
ARGS = dict(a[2:].split("=", 1) for a in sys.argv[4:] if a.startswith("--") and "=" in a)
RUNS = int(ARGS.get("runs", "3"))
SAMPLES = int(ARGS.get("samples", "3000"))
EPOCHS = int(ARGS.get("epochs", "5"))
SEED = int(ARGS.get("seed", str(int(time.time()))))
REPORT = ARGS.get("report")
# The worker: the launcher's own //examples:fashion_mnist, or a copy (a long series of runs should
# not pick up a rebuild made meanwhile).
BINARY = ARGS.get("binary", "//examples:fashion_mnist")
TIMEOUT_S = 3  # the collective timeout (PADDLE_TIMEOUT_S): a stop longer than it is a failure
ENV = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1",
           PADDLE_TIMEOUT_S=str(TIMEOUT_S))


def Job(args):
    """The launcher with `args`, its output lines timed (tests/testing/launched_job.py)."""
    return LaunchedJob([LAUNCH] + args, env=ENV)


def wait_for(job, pattern, timeout):
    """Whether a line of the job matches within `timeout` (or before it ends)."""
    return job.wait_line(pattern, 0.0, timeout)[1] is not None


def one_run(n, kind, rng, shards, workdir):
    ledger = os.path.join(workdir, f"ledger-{n}")
    job = Job(["--nproc=4", "--min-nproc=2", "--max-restarts=10", "--grace-s=3",
               BINARY, "--elastic", "--commit-every=5", "--model=mlp",
               f"--epochs={EPOCHS}", "--batch=64", "--test-samples=2000", f"--seed={n + 1}",
               "--data=tasks", f"--shards={shards}", "--records-per-task=100",
               f"--sample-ledger={ledger}"])
    problems = []
    if not wait_for(job, r"elastic: generation \d+: world size 4", 90):
        problems.append("no first generation of 4")
    else:
        time.sleep(rng.uniform(0.1, 1.0))
        pids = sorted(job.workers())
        if not pids:
            problems.append("no worker to disturb (finished already?)")
        else:
            victim = rng.choice(pids)
            try:
                if kind == "kill":
                    os.kill(victim, signal.SIGKILL)
                elif kind == "term":
                    os.kill(victim, signal.SIGTERM)
                else:
                    os.kill(victim, signal.SIGSTOP)
                    time.sleep(TIMEOUT_S + 3)
                    os.kill(victim, signal.SIGCONT)
            except ProcessLookupError:
                pass  # it had just exited (or the launcher killed the stopped one)
    rc = job.finish(240)
    if rc != 0:
        problems.append(f"job exit status {rc}")
    check = subprocess.run([LEDGER_CHECK, ledger, f"--samples={SAMPLES}", f"--epochs={EPOCHS}"],
                           capture_output=True, text=True)
    totals = (check.stdout.strip().splitlines() or ["(no output)"])[-1]
    if check.returncode != 0:
        problems.append(f"ledger-check exit {check.returncode}: {check.stdout}{check.stderr}")
    acc = re.findall(r'"test_accuracy": ([0-9.]+)', job.text())
    changes = re.findall(r'"membership_changes": (\d+)', job.text())
    ignored = job.text().count("ignored (taken over by a later generation)")
    summary = (f"run {n} ({kind}): exit {rc}, ledger: {totals}, test accuracy "
               f"{acc[-1] if acc else '?'}, membership changes {changes[-1] if changes else '?'}, "
               f"late finishes ignored {ignored}")
    if problems:
        summary += "\n  " + "\n  ".join(problems) + "\n--- job output (tail) ---\n" + \
            job.text()[-4000:]
    return not problems, summary


def main():
    rng = random.Random(SEED)
    print(f"seed {SEED}: {RUNS} disturbed runs, {SAMPLES} samples x {EPOCHS} epochs", flush=True)
    workdir = tempfile.mkdtemp(dir=os.environ.get("TEST_TMPDIR"))
    shards = make_shards(MAKE_SHARDS, workdir, SAMPLES)
    kinds = ["kill", "stop", "term"]
    passed = 0
    t0 = time.monotonic()
    for n in range(RUNS):
        ok, summary = one_run(n, kinds[n % 3], rng, shards, workdir)
        passed += ok
        print(summary, flush=True)
        if REPORT:
            with open(REPORT, "a") as f:
                f.write(summary + "\n")
    line = f"{passed}/{RUNS} disturbed runs passed in {time.monotonic() - t0:.0f} s (seed {SEED})"
    print(line, flush=True)
    if REPORT:
        with open(REPORT, "a") as f:
            f.write(line + "\n")
    return 0 if passed == RUNS else 1


if __name__ == "__main__":
    sys.exit(main())
