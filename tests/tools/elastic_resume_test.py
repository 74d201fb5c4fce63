#!/usr/bin/env python3
"""An elastic job's checkpoint on disk resumes at another world size: 4 workers write
checkpoints (fashion_mnist --elastic --checkpoint-dir) and the whole job is SIGKILLed mid-epoch;
a job of 2 workers --resume's it. Then the reverse (2 write, 4 resume). The data position in the
checkpoint is global (samples of the epoch consumed by all ranks), so the resumed job must start
at exactly that sample and train exactly the steps left: its final step count equals the
undisturbed count, whatever the two world sizes. Asserts the resume line (step, sample, the
world size that wrote it), the final step count and world size, and a sane accuracy.

usage: elastic_resume_test.py LAUNCH
"""
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time

LAUNCH = [sys.argv[1]] if not sys.argv[1].endswith(".py") else ["/usr/bin/python3", sys.argv[1]]
SAMPLES, BATCH = 12800, 64
STEPS_PER_EPOCH = -(-SAMPLES // BATCH)
TRAIN = ["//examples:fashion_mnist", "--elastic", "--commit-every=5", "--model=mlp",
         "--epochs=1", f"--train-samples={SAMPLES}", "--test-samples=2000", f"--batch={BATCH}",
         "--seed=3", "--checkpoint-every=10", "--keep-checkpoints=100"]
ENV = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1")
failures = []


def fail(message):
    print(f"FAIL: {message}", flush=True)
    failures.append(message)


def launch(nproc, ck, extra, out):
    return subprocess.Popen(LAUNCH + [f"--nproc={nproc}", f"--min-nproc={nproc}"] + TRAIN +
                            [f"--checkpoint-dir={ck}"] + extra, stdout=out,
                            stderr=subprocess.STDOUT, env=ENV, start_new_session=True)


def steps_saved(ck):
    try:
        return sorted(int(n[5:-4]) for n in os.listdir(ck) if re.fullmatch(r"ckpt-\d+\.pdk", n))
    except OSError:
        return []


def case(write_world, resume_world, work):
    name = f"{write_world}->{resume_world}"
    ck = os.path.join(work, f"ck{write_world}")
    log = os.path.join(work, f"write{write_world}.log")
    with open(log, "w") as out:
        p = launch(write_world, ck, [], out)
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and not [s for s in steps_saved(ck) if s >= 30]:
            if p.poll() is not None:
                break
            time.sleep(0.02)
        os.killpg(p.pid, signal.SIGKILL)  # the whole job: launcher, store, workers
        p.wait()
    saved = steps_saved(ck)
    if not saved or saved[-1] >= STEPS_PER_EPOCH:
        fail(f"{name}: no mid-epoch checkpoint written at world size {write_world} "
             f"(saved steps {saved})\n{open(log).read()[-3000:]}")
        return
    newest = saved[-1]
    r = subprocess.run(LAUNCH + [f"--nproc={resume_world}", f"--min-nproc={resume_world}"] +
                       TRAIN + [f"--checkpoint-dir={ck}", "--resume"], env=ENV,
                       capture_output=True, text=True, timeout=240)
    text = r.stdout + r.stderr
    if r.returncode != 0:
        fail(f"{name}: the resumed job exited {r.returncode}\n{text[-3000:]}")
        return
    m = re.search(r"elastic: resumed from \S+: step (\d+), epoch (\d+), sample (\d+) of the "
                  r"epoch \(written at world size (\d+)\)", text)
    if not m:
        fail(f"{name}: no resume line\n{text[-3000:]}")
        return
    step, epoch, sample, wrote = (int(g) for g in m.groups())
    if (step, epoch, sample, wrote) != (newest, 1, newest * BATCH, write_world):
        fail(f"{name}: resumed at step {step}, epoch {epoch}, sample {sample}, written at world "
             f"{wrote}; expected step {newest}, epoch 1, sample {newest * BATCH}, world "
             f"{write_world}")
    g = re.search(r"elastic: generation 0: world size (\d+), from step (\d+)", text)
    if not g or g.groups() != (str(resume_world), str(newest)):
        fail(f"{name}: the first generation did not start at world {resume_world} from step "
             f"{newest}: {g.group(0) if g else None}")
    js = [json.loads(line[line.index("{"):]) for line in text.splitlines()
          if '"steps":' in line and "{" in line]
    if not js:
        fail(f"{name}: no JSON line\n{text[-3000:]}")
        return
    j = js[-1]
    if j["steps"] != STEPS_PER_EPOCH or j["world_size"] != resume_world:
        fail(f"{name}: ended at step {j['steps']} with world {j['world_size']}; expected step "
             f"{STEPS_PER_EPOCH} (the rest of the epoch from the global position) at world "
             f"{resume_world}")
    if j["test_accuracy"] < 0.7:
        fail(f"{name}: test accuracy {j['test_accuracy']} < 0.7")
    print(f"{name}: checkpoint of step {newest} (sample {newest * BATCH}) written at world size "
          f"{write_world}, resumed at world size {resume_world}, finished at step {j['steps']}, "
          f"accuracy {j['test_accuracy']:.4f}", flush=True)


def main():
    work = tempfile.mkdtemp(dir=os.environ.get("TEST_TMPDIR"))
    case(4, 2, work)
    case(2, 4, work)
    if failures:
        print(f"{len(failures)} failure(s)")
        return 1
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
