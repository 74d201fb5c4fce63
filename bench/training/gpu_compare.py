#!/usr/bin/env python3
"""GPU training throughput side by side with PyTorch: examples/fashion_mnist --device=cuda and
bench/training/torch_fashion_mnist.py --device=cuda on the same model (mlp, cnn), global batch,
learning rate and number of samples, one epoch each, TF32 off on both sides.

    bazel build -c opt //examples:fashion_mnist        (on the GPU machine, or its gpu-bundle)
    /usr/bin/python3 bench/training/gpu_compare.py [--binary=PATH] [--train-samples=12800]

Prints one line per model (samples/s of both, ratio ours/torch, both test accuracies) and, last,
one JSON object with every figure. Ours' samples/s covers its whole epoch (data copies to the GPU
per batch included); torch's its training steps with the data already on the GPU, so the ratio
slightly favours torch. With the defaults it runs in well under two minutes on an H200. A side
that fails is reported with its error text and a null figure; the exit status is then 1.
"""
import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def last_json(stdout):
    for line in reversed(stdout.strip().splitlines()):
        line = line.strip()
        if line.startswith("{"):
            return json.loads(line)
    raise ValueError("no JSON line in the output")


def run(cmd, timeout):
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {proc.returncode}: {proc.stderr.strip()[-800:]}")
    return last_json(proc.stdout), time.perf_counter() - start


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", default=os.path.join(ROOT, "bazel-bin/examples/fashion_mnist"))
    # The interpreter that has PyTorch with CUDA (on the GPU machine: the one on PATH).
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--data-dir", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--models", default="mlp,cnn")
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--train-samples", type=int, default=12800)
    ap.add_argument("--test-samples", type=int, default=2000)
    ap.add_argument("--amp", default="none", choices=["none", "bf16"])
    ap.add_argument("--timeout", type=float, default=50, help="seconds per run")
    args = ap.parse_args()

    results = {"device": args.device, "batch": args.batch, "lr": args.lr,
               "train_samples": args.train_samples, "amp": args.amp, "models": {}}
    failed = False
    for model in args.models.split(","):
        row = {}
        ours_cmd = [args.binary, f"--model={model}", f"--device={args.device}",
                    f"--batch={args.batch}", f"--lr={args.lr}", "--epochs=1",
                    f"--train-samples={args.train_samples}",
                    f"--test-samples={args.test_samples}", f"--amp={args.amp}",
                    f"--data-dir={args.data_dir}"]
        torch_cmd = [args.python, os.path.join(HERE, "torch_fashion_mnist.py"),
                     f"--model={model}", f"--device={args.device}", f"--batch={args.batch}",
                     f"--lr={args.lr}", f"--samples={args.train_samples}",
                     f"--test-samples={args.test_samples}", f"--data-dir={args.data_dir}"]
        for name, cmd in (("ours", ours_cmd), ("torch", torch_cmd)):
            try:
                out, wall = run(cmd, args.timeout)
                row[name] = {"samples_per_s": out.get("samples_per_s"),
                             "test_accuracy": out.get("test_accuracy"), "wall_s": round(wall, 2)}
            except (RuntimeError, ValueError, subprocess.TimeoutExpired) as e:
                failed = True
                row[name] = {"samples_per_s": None, "test_accuracy": None, "error": str(e)}
        a, b = row["ours"]["samples_per_s"], row["torch"]["samples_per_s"]
        row["ratio"] = a / b if a and b else None
        results["models"][model] = row
        fmt = lambda v, spec: format(v, spec) if v is not None else "n/a"
        print(f"{model:4s}  ours {fmt(a, '10.0f')} samples/s  torch {fmt(b, '10.0f')} samples/s  "
              f"ratio {fmt(row['ratio'], '.2f')}  test_accuracy ours "
              f"{fmt(row['ours']['test_accuracy'], '.4f')} torch "
              f"{fmt(row['torch']['test_accuracy'], '.4f')}")
        for name in ("ours", "torch"):
            if "error" in row[name]:
                print(f"      {name} failed: {row[name]['error']}", file=sys.stderr)
    print(json.dumps(results))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
