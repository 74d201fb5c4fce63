#!/usr/bin/env python3
"""PyTorch peer for bench/training: the same models, data, batch and optimizer as
examples/fashion_mnist, timed the same way (training steps only, data already in memory).

Started with WORLD_SIZE set (e.g. by tools/launch) it trains data-parallel with
DistributedDataParallel over the gloo backend: --batch is the global batch, split evenly, each
rank takes every world-th sample; --no-sync runs every step inside model.no_sync() (no gradient
allreduce), to measure what synchronization costs.

--epochs=E trains E passes over --samples with examples/fashion_mnist's learning-rate schedule
(cosine decay from --lr to 0 over all steps; a single pass keeps --lr constant, as before),
evaluates rank 0's replica on --test-samples after every epoch (not timed) and adds
"epoch_accuracy" and "epoch_train_s" (the training time of each epoch, every rank done), from
which tools/bench-report reads the time to a target accuracy; rank 0 also prints
{"epoch": E, "accuracy": A, "train_s": T} as each epoch ends.

--device=cuda (or cuda:N) trains on the GPU (data moved there once, before timing; the clock stops
after torch.cuda.synchronize()); --test-samples=N adds "test_accuracy" on the first N test images.

OMP_NUM_THREADS, OPENBLAS_NUM_THREADS and MKL_NUM_THREADS are set to --threads before NumPy and
PyTorch load (a peer at its best: their default of one thread per core oversubscribes), and
GLIBC_TUNABLES, unless set, to fixed malloc thresholds (see MALLOC_TUNABLES below).

Rank 0 prints one JSON line: {"peer": "torch", "model": ..., "threads": ..., "world_size": ...,
"samples_per_s": ... (all ranks' samples), "step_ms": ...}.
"""
import argparse
import contextlib
import gzip
import json
import os
import sys
import time


def _threads_from_argv(argv):
    """--threads=N / --threads N of the command line (1 when absent or unreadable)."""
    for i, arg in enumerate(argv):
        value = arg[len("--threads="):] if arg.startswith("--threads=") else (
            argv[i + 1] if arg == "--threads" and i + 1 < len(argv) else None)
        if value is not None:
            return value if value.isdigit() and int(value) > 0 else "1"
    return "1"


# OpenBLAS (PyTorch's and NumPy's GEMM once libopenblas-dev is the system BLAS), OpenMP and MKL
# start one thread per core unless told otherwise, beside torch.set_num_threads: on a small host
# they oversubscribe the cores (4x slower MLP on 2 cores). They read these variables when they
# load, so they are set here, before numpy and torch are imported (tools/benchreport/runners.py,
# Note [Peer threads]).
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = _threads_from_argv(sys.argv[1:])

# glibc malloc serves the CNN's multi-MB activations and gradients with mmap and gives them back
# each step, so every step page-faults them in again (a third of the CPU time in the kernel);
# its adaptive threshold makes that depend on the process's allocation history, so the same
# model ran 2-5x apart between launchers. Fixed thresholds keep them on the heap. ld.so reads
# GLIBC_TUNABLES at start-up only, hence the re-exec (once: the variable is then set).
MALLOC_TUNABLES = "glibc.malloc.mmap_threshold=33554432:glibc.malloc.trim_threshold=268435456"
if "GLIBC_TUNABLES" not in os.environ:
    os.environ["GLIBC_TUNABLES"] = MALLOC_TUNABLES
    os.execv(sys.executable, [sys.executable] + sys.argv)

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

MEAN, STD = 0.2860, 0.3530


def load_images(path, n):
    with gzip.open(path, "rb") as f:
        raw = np.frombuffer(f.read(), dtype=np.uint8, offset=16)
    images = raw.reshape(-1, 1, 28, 28)[:n].astype(np.float32) / 255.0
    return torch.from_numpy((images - MEAN) / STD)


def load_labels(path, n):
    with gzip.open(path, "rb") as f:
        raw = np.frombuffer(f.read(), dtype=np.uint8, offset=8)
    return torch.from_numpy(raw[:n].astype(np.int64))


class Cnn(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 3)
        self.conv2 = nn.Conv2d(32, 64, 3)
        self.fc1 = nn.Linear(9216, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x):
        x = F.relu(self.conv1(x))
        x = F.relu(self.conv2(x))
        x = F.dropout(F.max_pool2d(x, 2), 0.25, self.training)
        x = F.dropout(F.relu(self.fc1(torch.flatten(x, 1))), 0.5, self.training)
        return self.fc2(x)


def mlp():
    return nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 128),
                         nn.ReLU(), nn.Linear(128, 10))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="cnn", choices=["mlp", "cnn"])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--samples", type=int, default=12800)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--data-dir", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--no-sync", action="store_true")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--test-samples", type=int, default=0)
    ap.add_argument("--epochs", type=int, default=0,
                    help="passes over --samples with a cosine schedule and per-epoch accuracy")
    args = ap.parse_args()
    if args.epochs > 0 and args.test_samples <= 0:
        ap.error("--epochs needs --test-samples (the accuracy of every epoch)")
    device = torch.device(args.device)
    on_cuda = device.type == "cuda"
    if on_cuda:
        torch.backends.cuda.matmul.allow_tf32 = False  # ours runs fp32 GEMMs (TF32 off)
        torch.backends.cudnn.allow_tf32 = False
    torch.set_num_threads(args.threads)
    torch.manual_seed(1)
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    images = load_images(f"{args.data_dir}/train-images-idx3-ubyte.gz", args.samples)
    labels = load_labels(f"{args.data_dir}/train-labels-idx1-ubyte.gz", args.samples)
    images, labels = images.to(device), labels.to(device)
    model = (Cnn() if args.model == "cnn" else mlp()).to(device)
    if "WORLD_SIZE" in os.environ:
        import torch.distributed as dist
        dist.init_process_group("nccl" if on_cuda else "gloo")
        model = torch.nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    perm = torch.randperm(len(images))[rank::world].to(device)
    local = args.batch // world

    def step(idx):
        opt.zero_grad()
        sync = model.no_sync() if args.no_sync and world > 1 else contextlib.nullcontext()
        with sync:
            loss = F.cross_entropy(model(images[idx]), labels[idx])
            loss.backward()
        opt.step()

    def evaluate():
        test_x = load_images(f"{args.data_dir}/t10k-images-idx3-ubyte.gz", args.test_samples)
        test_y = load_labels(f"{args.data_dir}/t10k-labels-idx1-ubyte.gz", args.test_samples)
        model.eval()
        with torch.no_grad():
            pred = model(test_x.to(device)).argmax(1).cpu()
        model.train()
        return float((pred == test_y).float().mean())

    def sync():
        if on_cuda:
            torch.cuda.synchronize(device)
        if world > 1:
            dist.barrier()

    result = {"peer": "torch", "model": args.model, "threads": args.threads, "world_size": world,
              "batch": args.batch, "no_sync": args.no_sync, "device": str(device)}
    if args.epochs > 0:
        # examples/fashion_mnist's schedule: cosine from --lr to 0 over every step of the run.
        steps_per_epoch = (len(perm) - local) // local + 1
        sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=steps_per_epoch * args.epochs)
        accuracies, train_s = [], []
        done = 0
        for epoch in range(args.epochs):
            order = torch.randperm(len(images), generator=torch.Generator().manual_seed(epoch))
            order = order[rank::world].to(device)
            sync()
            start = time.perf_counter()
            for s in range(0, len(order) - local + 1, local):
                step(order[s:s + local])
                sched.step()
                done += local * world
            sync()
            train_s.append(time.perf_counter() - start)
            if rank == 0:
                accuracies.append(evaluate())
                # One line per epoch, as examples/fashion_mnist prints: tools/bench-report stops
                # a time-to-accuracy run once the target is reached (the rest cannot change it).
                print(json.dumps({"epoch": epoch + 1, "accuracy": accuracies[-1],
                                  "train_s": train_s[-1]}), flush=True)
        result.update(samples_per_s=done / sum(train_s), epoch_train_s=train_s,
                      epoch_accuracy=accuracies)
        if rank == 0:
            print(json.dumps(result))
        return

    for i in range(3):  # warm-up
        step(perm[i * local:(i + 1) * local])
    # Every rank starts together and the time runs until the last one is done (samples/s counts
    # all ranks' samples), as in examples/fashion_mnist; with no_sync() ranks drift apart.
    sync()
    start = time.perf_counter()
    done = steps = 0
    for s in range(0, len(perm) - local + 1, local):
        idx = perm[s:s + local]
        step(idx)
        done += len(idx) * world
        steps += 1
    sync()
    seconds = time.perf_counter() - start
    result.update(samples_per_s=done / seconds, step_ms=1000 * seconds / steps)
    if args.test_samples > 0 and rank == 0:
        result["test_accuracy"] = evaluate()
    if rank == 0:
        print(json.dumps(result))


if __name__ == "__main__":
    main()
