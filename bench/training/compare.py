#!/usr/bin/env python3
"""Training throughput side by side with PyTorch: the same model, data, batch and SGD-momentum
optimizer, 1 and 2 threads, ours and torch interleaved in one run so machine noise hits both.

    bazel build -c opt //examples:fashion_mnist
    /usr/bin/python3 bench/training/compare.py [--samples=12800] [--repeats=2]

Prints a table and, last, one JSON line with every figure and the ratios (ours / torch).
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def thread_env(threads):
    """Every thread variable at the run's thread count, for ours and the peer alike (OpenBLAS,
    OpenMP and MKL otherwise start one thread per core and oversubscribe)."""
    env = dict(os.environ)
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        env[var] = str(threads)
    return env


def ours(binary, model, threads, samples, batch):
    out = subprocess.run(
        [binary, f"--model={model}", f"--threads={threads}", f"--batch={batch}", "--epochs=1",
         f"--train-samples={samples}", "--test-samples=1000"],
        check=True, capture_output=True, text=True, env=thread_env(threads)).stdout
    return json.loads(out.strip().splitlines()[-1])["samples_per_s"]


def torch(model, threads, samples, batch):
    out = subprocess.run(
        ["/usr/bin/python3", os.path.join(HERE, "torch_fashion_mnist.py"), f"--model={model}",
         f"--threads={threads}", f"--batch={batch}", f"--samples={samples}"],
        check=True, capture_output=True, text=True, env=thread_env(threads)).stdout
    return json.loads(out.strip().splitlines()[-1])["samples_per_s"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", default=os.path.join(ROOT, "bazel-bin/examples/fashion_mnist"))
    ap.add_argument("--samples", type=int, default=12800)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--models", default="mlp,cnn")
    args = ap.parse_args()
    rows = []
    print(f"{'model':6} {'threads':>7} {'ours s/s':>10} {'torch s/s':>10} {'ratio':>6}")
    for model in args.models.split(","):
        for threads in (1, 2):
            a, b = [], []
            for _ in range(args.repeats):  # interleaved
                a.append(ours(args.binary, model, threads, args.samples, args.batch))
                b.append(torch(model, threads, args.samples, args.batch))
            row = {"model": model, "threads": threads, "ours": statistics.median(a),
                   "torch": statistics.median(b)}
            row["ratio"] = row["ours"] / row["torch"]
            rows.append(row)
            print(f"{model:6} {threads:7d} {row['ours']:10.0f} {row['torch']:10.0f} "
                  f"{row['ratio']:6.2f}", flush=True)
    print(json.dumps({"batch": args.batch, "samples": args.samples, "rows": rows}))


if __name__ == "__main__":
    sys.exit(main())
