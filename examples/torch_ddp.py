#!/usr/bin/python3
"""Plain PyTorch data-parallel training on our engine: the Fashion-MNIST CNN (or MLP) with
torch.nn.parallel.DistributedDataParallel, whose gradients go through torch.distributed's
backend "paddle" (import paddle.torch; docs/torch.md) or, to compare, "gloo". Nothing else in
the script knows about Paddle Collective.

    paddlerun --nproc=2 python3 examples/torch_ddp.py --backend=paddle --model=cnn
    python3 -m torch.distributed.run --nproc_per_node=2 --redirects=1 --tee=1 --log_dir=/tmp/tr \\
        examples/torch_ddp.py --backend=gloo

Every rank trains on its share of each global batch (--batch); --no-sync skips the gradient
allreduce (DDP's no_sync), so sync / no-sync step time is what synchronizing costs. Rank 0 prints
one JSON line: backend, model, world size, samples/s (all ranks, timed from a barrier to a
barrier), step time, test accuracy on --test-samples, and a hash of the parameters (equal on
every rank, and close between backends for the same seed).
"""
import argparse
import gzip
import hashlib
import json
import os
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

DATA = "/usr/share/datasets/fashion-mnist"
MEAN, STD = 0.2860, 0.3530


def images(name, n):
    with gzip.open(os.path.join(DATA, name), "rb") as f:
        raw = np.frombuffer(f.read(), dtype=np.uint8, offset=16)
    x = raw.reshape(-1, 1, 28, 28)[:n].astype(np.float32) / 255.0
    return torch.from_numpy((x - MEAN) / STD)


def labels(name, n):
    with gzip.open(os.path.join(DATA, name), "rb") as f:
        raw = np.frombuffer(f.read(), dtype=np.uint8, offset=8)
    return torch.from_numpy(raw[:n].astype(np.int64))


class Cnn(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1, self.conv2 = nn.Conv2d(1, 32, 3), nn.Conv2d(32, 64, 3)
        self.fc1, self.fc2 = nn.Linear(9216, 128), nn.Linear(128, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv2(F.relu(self.conv1(x)))), 2)
        x = F.dropout(x, 0.25, self.training)
        x = F.dropout(F.relu(self.fc1(torch.flatten(x, 1))), 0.5, self.training)
        return self.fc2(x)


def mlp():
    return nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 128),
                         nn.ReLU(), nn.Linear(128, 10))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--backend", default="paddle", choices=["paddle", "gloo"])
    ap.add_argument("--model", default="cnn", choices=["cnn", "mlp"])
    ap.add_argument("--samples", type=int, default=12800, help="training samples per epoch")
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--batch", type=int, default=128, help="global batch")
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--test-samples", type=int, default=2000)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--no-sync", action="store_true", help="never allreduce gradients")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    if args.backend == "paddle":
        import paddle.torch  # noqa: F401  registers backend "paddle"
    dist.init_process_group(args.backend)  # env:// from paddlerun or torchrun
    rank, world = dist.get_rank(), dist.get_world_size()
    if args.batch % world:
        raise SystemExit(f"--batch={args.batch} is not divisible by the {world} workers")
    torch.manual_seed(args.seed)  # the same initial replica everywhere (DDP also broadcasts it)
    model = nn.parallel.DistributedDataParallel(Cnn() if args.model == "cnn" else mlp())
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    x = images("train-images-idx3-ubyte.gz", args.samples)
    y = labels("train-labels-idx1-ubyte.gz", args.samples)
    local = args.batch // world
    steps = done = 0
    seconds = 0.0
    for epoch in range(args.epochs):
        order = torch.randperm(len(x), generator=torch.Generator().manual_seed(args.seed + epoch))
        dist.barrier()
        start = time.perf_counter()
        for s in range(0, len(order) - args.batch + 1, args.batch):
            idx = order[s + rank * local:s + (rank + 1) * local]
            opt.zero_grad()
            if args.no_sync:
                with model.no_sync():
                    F.cross_entropy(model(x[idx]), y[idx]).backward()
            else:
                F.cross_entropy(model(x[idx]), y[idx]).backward()
            opt.step()
            steps += 1
            done += args.batch
        dist.barrier()
        seconds += time.perf_counter() - start
    model.eval()
    with torch.no_grad():
        tx = images("t10k-images-idx3-ubyte.gz", args.test_samples)
        ty = labels("t10k-labels-idx1-ubyte.gz", args.test_samples)
        accuracy = float((model(tx).argmax(1) == ty).float().mean())
    digest = hashlib.sha256()
    for p in model.parameters():
        digest.update(p.detach().numpy().tobytes())
    if rank == 0:
        print(json.dumps({"backend": args.backend, "model": args.model, "world_size": world,
                          "no_sync": args.no_sync, "samples_per_s": done / seconds,
                          "step_ms": 1000 * seconds / max(steps, 1), "test_accuracy": accuracy,
                          "param_hash": digest.hexdigest()[:16]}), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
