#!/usr/bin/python3
"""Trains a model written in Python (a paddle.nn.Module subclass) on Fashion-MNIST: the PyTorch
habits, on paddle's C++ kernels.

    /usr/bin/python3 examples/custom_model.py --epochs=2 --checkpoint=/tmp/net.ckpt
    /usr/bin/python3 examples/custom_model.py --epochs=3 --checkpoint=/tmp/net.ckpt --resume
    bazel run //tools:launch -- --nproc=2 /usr/bin/python3 examples/custom_model.py

The model mixes the C++ Linear layers with a Python-defined block (its own Parameter, tanh
gating and a residual connection), the data comes through paddle.data.TensorDataset over numpy
arrays, and `loss.backward()` drives DDP's gradient reduction when started by the launcher.
With --checkpoint, rank 0 saves the model, the optimizer and the epoch count after every epoch
(paddle.save: atomic); --resume continues from it, computing the same parameters as an
uninterrupted run. Prints one line per epoch and a final JSON line; exits 1 below
--min-accuracy.
"""
import argparse
import json
import os
import sys
import time

import numpy as np

import paddle
import paddle.distributed as dist
from paddle import nn
from paddle.nn import functional as F


class GatedResidual(nn.Module):
    """x + tanh(gate) * relu(fc(x)): a block written in Python around a C++ layer."""

    def __init__(self, width):
        super().__init__()
        self.fc = nn.Linear(width, width)
        self.gate = nn.Parameter(np.zeros(width, np.float32))

    def forward(self, x):
        return x + self.gate.tanh() * self.fc(x).relu()


class Net(nn.Module):
    def __init__(self, hidden=256):
        super().__init__()
        self.inp = nn.Linear(784, hidden)
        self.blocks = nn.Sequential(GatedResidual(hidden), GatedResidual(hidden))
        self.out = nn.Linear(hidden, 10)

    def forward(self, x):
        x = self.inp(x.reshape([x.shape[0], 784])).relu()
        return self.out(self.blocks(x))


def evaluate(model, images, labels, batch=1000):
    correct = 0
    with paddle.no_grad():
        model.eval()
        for i in range(0, len(images), batch):
            logits = model(paddle.from_numpy(images[i:i + batch]))
            correct += int((logits.argmax(1).numpy() == labels[i:i + batch]).sum())
        model.train()
    return correct / len(images)


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--batch", type=int, default=128, help="global batch")
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--train-samples", type=int, default=0, help="0: all 60000")
    p.add_argument("--min-accuracy", type=float, default=0.0)
    p.add_argument("--checkpoint", default="", help="file saved after every epoch")
    p.add_argument("--resume", action="store_true", help="continue from --checkpoint")
    o = p.parse_args(argv)
    paddle.set_num_threads(o.threads)
    paddle.manual_seed(o.seed)
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world > 1:
        dist.init_process_group("native", init_method="env://")
    rank = dist.get_rank() if world > 1 else 0

    train = paddle.data.FashionMNIST("train")
    test = paddle.data.FashionMNIST("test")
    images, labels = train.images.numpy(), train.labels.numpy()
    if o.train_samples:
        images, labels = images[:o.train_samples], labels[:o.train_samples]
    dataset = paddle.data.TensorDataset(images, labels)
    sampler = paddle.data.DistributedSampler(len(dataset), rank=rank, world_size=world,
                                             seed=o.seed)
    loader = paddle.data.DataLoader(dataset, batch_size=o.batch // world, sampler=sampler,
                                    drop_last=True)

    model = Net()
    ddp = dist.DistributedDataParallel(model) if world > 1 else None
    forward = ddp if ddp is not None else model
    opt = paddle.optim.SGD(model.parameters(), lr=o.lr, momentum=0.9)
    first_epoch = 0
    if o.resume:
        if not o.checkpoint:
            p.error("--resume needs --checkpoint")
        state = paddle.load(o.checkpoint)  # every rank reads it: replicas stay identical
        model.load_state_dict(state["model"])
        paddle.optim.load_nested_state(opt, state["optim"])
        first_epoch = state["epoch"]
    start = time.monotonic()
    acc = evaluate(model, test.images.numpy(), test.labels.numpy()) if rank == 0 else 0.0
    for epoch in range(first_epoch, o.epochs):
        t0, total, steps = time.monotonic(), 0.0, 0
        for x, y in loader.epoch(epoch):
            opt.zero_grad()
            loss = F.cross_entropy(forward(x), y)
            loss.backward()  # with DDP: gradients averaged across ranks as it runs
            opt.step()
            total += loss.item()
            steps += 1
        if rank == 0:
            acc = evaluate(model, test.images.numpy(), test.labels.numpy())
            seconds = time.monotonic() - t0
            print(f"epoch {epoch} loss {total / steps:.4f} test_accuracy {acc:.4f} "
                  f"{steps * o.batch / seconds:.0f} samples/s", flush=True)
            if o.checkpoint:
                paddle.save({"model": model.state_dict(), "optim": paddle.optim.nested_state(opt),
                             "epoch": epoch + 1}, o.checkpoint)
    if rank == 0:
        print(json.dumps({"epochs": o.epochs, "test_accuracy": acc, "world_size": world,
                          "seconds": round(time.monotonic() - start, 2),
                          "param_hash": model.param_hash()}), flush=True)
    if world > 1:
        dist.barrier()
        dist.destroy_process_group()
    if rank == 0 and acc < o.min_accuracy:
        print(f"test accuracy {acc:.4f} is below --min-accuracy={o.min_accuracy}",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
