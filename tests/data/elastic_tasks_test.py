#!/usr/bin/python3
"""Exactly-once data under disturbance, with real processes: paddlerun --nproc=4 --min-nproc=2
runs fashion_mnist --elastic --data=tasks --sample-ledger=DIR over shards of the first Fashion-MNIST
samples while this test disturbs one worker per run, in turn: SIGKILL (the launcher restarts it and
it rejoins), SIGSTOP for longer than the collective timeout then SIGCONT (the others go on without
it; its late reports must be ignored), SIGTERM (it leaves after a commit). Every run must exit 0,
its ledger must pass tools/ledger-check (every sample of every epoch exactly once), and its final
test accuracy must be within --accuracy-points (1.0) of an undisturbed run's with the same seed,
which the test makes first (the runs differ only in their disturbance: same seed, same shards).

usage: elastic_tasks_test.py LAUNCH MAKE_SHARDS LEDGER_CHECK [--runs=N] [--samples=N]
       [--epochs=N] [--seed=S] [--report=FILE] [--binary=PATH] [--accuracy-points=P]
(the closing note's figures: --runs=50 --report=FILE, about 10-15 s a run; the kill runs also
time the kill to the survivors' adopting the dead worker's tasks, p50 and p95 at the end)
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
# 6000: with 3000 the undisturbed runs alone (same seed; the tasks' order between ranks varies)
# spread 0.66 points, and one disturbed run in 14 fell 1.2 points below; with 6000, 12 runs (4
# undisturbed, 8 with a SIGTERM) spread 0.35 points.
SAMPLES = int(ARGS.get("samples", "6000"))
EPOCHS = int(ARGS.get("epochs", "5"))
SEED = int(ARGS.get("seed", str(int(time.time()))))
# 1 point by default, 0.5 in the closing note's series (docs/data.md): there 49 of 50 runs were
# within 0.5 points of the undisturbed run and one 0.57 below, a SIGTERM run that trained at world
# size 3 from its first steps; undisturbed runs at world size 3 (same seed) already end 0.13-0.19
# points below those at 4, as the order of float sums differs.
ACCURACY_POINTS = float(ARGS.get("accuracy-points", "1.0"))
TRAIN_SEED = 1 + SEED % 1000  # fashion_mnist's --seed, the same in every run
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


def one_run(n, kind, rng, shards, workdir, reference=None):
    """Run n with disturbance `kind` ("none" for the reference); (ok, summary, accuracy)."""
    ledger = os.path.join(workdir, f"ledger-{n}")
    job = Job(["--nproc=4", "--min-nproc=2", "--max-restarts=10", "--grace-s=3",
               BINARY, "--elastic", "--commit-every=5", "--model=mlp",
               f"--epochs={EPOCHS}", "--batch=64", f"--seed={TRAIN_SEED}",
               "--data=tasks", f"--shards={shards}", "--records-per-task=100",
               f"--sample-ledger={ledger}"])
    problems = []
    rehand_s = None  # kill runs: the kill to the next generation, whose ranks adopt its tasks
    if kind == "none":
        pass
    elif not wait_for(job, r"elastic: generation \d+: world size 4", 90):
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
                    killed_at = time.monotonic()
                    os.kill(victim, signal.SIGKILL)
                    # Printed once every adoption is in (Note [Task positions], step 4): from
                    # then on the dead worker's tasks are read by the survivors.
                    t, m = job.wait_line(r"elastic: generation \d+: world size", killed_at, 60)
                    if m:
                        rehand_s = t - killed_at
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
    accuracy = float(acc[-1]) if acc else None
    if accuracy is None:
        problems.append("no final test accuracy")
    elif reference is not None and abs(accuracy - reference) * 100 > ACCURACY_POINTS:
        problems.append(f"test accuracy {accuracy:.4f} is more than {ACCURACY_POINTS} points "
                        f"from the undisturbed run's {reference:.4f}")
    changes = re.findall(r'"membership_changes": (\d+)', job.text())
    ignored = job.text().count("ignored (taken over by a later generation)")
    name = "undisturbed run" if kind == "none" else f"run {n} ({kind})"
    summary = (f"{name}: exit {rc}, ledger: {totals}, test accuracy "
               f"{acc[-1] if acc else '?'}, membership changes {changes[-1] if changes else '?'}, "
               f"late finishes ignored {ignored}"
               + (f", tasks adopted {rehand_s:.3f} s after the kill" if rehand_s else ""))
    if problems:
        summary += "\n  " + "\n  ".join(problems) + "\n--- job output (tail) ---\n" + \
            job.text()[-4000:]
    return not problems, summary, accuracy, rehand_s


def main():
    rng = random.Random(SEED)
    print(f"seed {SEED}: {RUNS} disturbed runs, {SAMPLES} samples x {EPOCHS} epochs", flush=True)
    workdir = tempfile.mkdtemp(dir=os.environ.get("TEST_TMPDIR"))
    shards = make_shards(MAKE_SHARDS, workdir, SAMPLES)
    kinds = ["kill", "stop", "term"]
    passed = 0
    rehand = []
    t0 = time.monotonic()

    def report(text):
        print(text, flush=True)
        if REPORT:
            with open(REPORT, "a") as f:
                f.write(text + "\n")

    ok, summary, reference, _ = one_run(-1, "none", rng, shards, workdir)
    report(summary)
    if not ok:
        report("the undisturbed run failed: no reference")
        return 1
    for n in range(RUNS):
        ok, summary, _, rehand_s = one_run(n, kinds[n % 3], rng, shards, workdir, reference)
        passed += ok
        report(summary)
        if rehand_s is not None:
            rehand.append(rehand_s)
    report(f"{passed}/{RUNS} disturbed runs passed in {time.monotonic() - t0:.0f} s (seed {SEED}, "
           f"undisturbed accuracy {reference:.4f})")
    if rehand:
        rehand.sort()

        def pick(q):
            return rehand[min(len(rehand) - 1, int(q * len(rehand)))]
        report(f"a killed worker's tasks adopted by the survivors after p50 {pick(0.5):.3f} s, "
               f"p95 {pick(0.95):.3f} s ({len(rehand)} kills)")
    return 0 if passed == RUNS else 1


if __name__ == "__main__":
    sys.exit(main())
