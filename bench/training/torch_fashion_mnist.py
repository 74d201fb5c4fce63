#!/usr/bin/env python3
"""PyTorch peer for bench/training: the same models, data, batch and optimizer as
examples/fashion_mnist, timed the same way (training steps only, data already in memory).

Prints one JSON line: {"peer": "torch", "model": ..., "threads": ..., "samples_per_s": ...}.
"""
import argparse
import gzip
import json
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

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
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(1)
    images = load_images(f"{args.data_dir}/train-images-idx3-ubyte.gz", args.samples)
    labels = load_labels(f"{args.data_dir}/train-labels-idx1-ubyte.gz", args.samples)
    model = Cnn() if args.model == "cnn" else mlp()
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    perm = torch.randperm(len(images))

    def step(idx):
        opt.zero_grad()
        loss = F.cross_entropy(model(images[idx]), labels[idx])
        loss.backward()
        opt.step()

    for i in range(3):  # warm-up
        step(perm[i * args.batch:(i + 1) * args.batch])
    start = time.perf_counter()
    done = 0
    for s in range(0, len(images), args.batch):
        idx = perm[s:s + args.batch]
        step(idx)
        done += len(idx)
    seconds = time.perf_counter() - start
    print(json.dumps({"peer": "torch", "model": args.model, "threads": args.threads,
                      "batch": args.batch, "samples_per_s": done / seconds}))


if __name__ == "__main__":
    main()
