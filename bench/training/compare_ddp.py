#!/usr/bin/env python3
"""Data-parallel training side by side with PyTorch DDP (gloo backend): the same model, data,
global batch, learning rate and one thread per worker, started by the same launcher, ours and
torch interleaved. Also each one's step time without gradient sync (--no-sync / no_sync()), to
show how much of the allreduce the backward pass hides, and ours with --barrier-only (no gradient
sync, but the workers meet once a step), to show what keeping them in step costs by itself.

    bazel build -c opt //tools:launch
    /usr/bin/python3 bench/training/compare_ddp.py [--nproc=2] [--samples=12800] [--repeats=2]

Last line: one JSON object with every figure and the ratios.
"""
import argparse
import json
import os
import statistics
import subprocess

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def last_json(out):
    for line in reversed(out.splitlines()):
        line = line.split("] ", 1)[-1]
        if line.startswith("{"):
            return json.loads(line)
    raise RuntimeError("no JSON line in:\n" + out)


def run(launch, nproc, program, args):
    # One thread per worker, every thread variable too (OpenBLAS, OpenMP and MKL otherwise start
    # one per core beside torch.set_num_threads and oversubscribe).
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1")
    out = subprocess.run([launch, f"--nproc={nproc}", program] + args, check=True,
                         capture_output=True, text=True, env=env).stdout
    return last_json(out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--launch", default=os.path.join(ROOT, "bazel-bin/tools/launch"))
    ap.add_argument("--nproc", type=int, default=2)
    ap.add_argument("--samples", type=int, default=12800)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--models", default="mlp,cnn")
    args = ap.parse_args()
    torch_script = os.path.join(HERE, "torch_fashion_mnist.py")
    rows = []
    print(f"{'model':6} {'ours s/s':>9} {'torch s/s':>9} {'ratio':>6} "
          f"{'ours sync/nosync':>16} {'torch sync/nosync':>17} {'ours barrier/nosync':>19}")
    for model in args.models.split(","):
        common = [f"--model={model}", f"--batch={args.batch}", "--threads=1"]
        r = {"ours": [], "ours_nosync": [], "ours_barrier": [], "torch": [], "torch_nosync": []}
        for _ in range(args.repeats):
            for key, extra in (("ours", []), ("ours_nosync", ["--no-sync"]),
                               ("ours_barrier", ["--barrier-only"])):
                j = run(args.launch, args.nproc, "//examples:fashion_mnist",
                        common + ["--epochs=1", f"--train-samples={args.samples}",
                                  "--test-samples=500"] + extra)
                r[key].append(j["samples_per_s"])
            for key, extra in (("torch", []), ("torch_nosync", ["--no-sync"])):
                j = run(args.launch, args.nproc, torch_script,
                        common + [f"--samples={args.samples}"] + extra)
                r[key].append(j["samples_per_s"])
        row = {k: statistics.median(v) for k, v in r.items()}
        row["model"] = model
        row["ratio"] = row["ours"] / row["torch"]
        # Step time with sync over step time without = samples/s without over samples/s with.
        row["ours_sync_overhead"] = row["ours_nosync"] / row["ours"]
        row["torch_sync_overhead"] = row["torch_nosync"] / row["torch"]
        # What meeting once a step costs without any gradient (--barrier-only).
        row["ours_barrier_overhead"] = row["ours_nosync"] / row["ours_barrier"]
        rows.append(row)
        print(f"{model:6} {row['ours']:9.0f} {row['torch']:9.0f} {row['ratio']:6.2f} "
              f"{row['ours_sync_overhead']:16.2f} {row['torch_sync_overhead']:17.2f} "
              f"{row['ours_barrier_overhead']:19.2f}", flush=True)
    print(json.dumps({"nproc": args.nproc, "batch": args.batch, "samples": args.samples,
                      "rows": rows}))


if __name__ == "__main__":
    main()
