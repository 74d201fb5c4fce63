#!/usr/bin/python3
"""The ResNet of examples/resnet_fashion.py trained side by side three ways: written in Python
over paddle's C++ layers, built in C++ (nn.make_model("resnet"), the same weights), and the
same architecture in plain PyTorch. Same data (Fashion-MNIST as paddle.data loads it, the same
sample order every epoch), initial weights, batch, learning rate, momentum and thread count.

    /usr/bin/python3 bench/python/resnet_vs_torch.py --epochs=2 --train-samples=12000 --threads=1

The runs are interleaved epoch by epoch (the order rotates) so that load from other jobs on a
shared machine falls on all three alike. Prints a line per epoch and run, then a JSON line per
run: samples/s (wall time of the training steps), median step time in wall and in process CPU
time (the latter is what other jobs inflate least; meaningful with --threads=1), test accuracy
after the last epoch, the ratios against PyTorch and of the Python model against the C++ one,
and the load average before and after.
"""
import argparse
import json
import os
import statistics
import sys
import time

import numpy as np
import torch
import torch.nn as tnn
import torch.nn.functional as tF

import paddle
from paddle import nn
from paddle.nn import functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "examples"))
from resnet_fashion import ResNet  # noqa: E402  pylint: disable=wrong-import-position


class TorchBlock(tnn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = tnn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = tnn.BatchNorm2d(cout)
        self.conv2 = tnn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = tnn.BatchNorm2d(cout)
        self.shortcut = None
        if stride != 1 or cin != cout:
            self.shortcut = tnn.Sequential(tnn.Conv2d(cin, cout, 1, stride, bias=False),
                                           tnn.BatchNorm2d(cout))

    def forward(self, x):
        h = tF.relu(self.bn1(self.conv1(x)))
        h = self.bn2(self.conv2(h))
        return tF.relu(h + (x if self.shortcut is None else self.shortcut(x)))


class TorchResNet(tnn.Module):
    def __init__(self, widths=(16, 32, 64), blocks_per_stage=2, classes=10):
        super().__init__()
        self.stem = tnn.Sequential(tnn.Conv2d(1, widths[0], 3, 1, 1, bias=False),
                                   tnn.BatchNorm2d(widths[0]))
        blocks, channels = [], widths[0]
        for i, width in enumerate(widths):
            for j in range(blocks_per_stage):
                blocks.append(TorchBlock(channels, width, 2 if i > 0 and j == 0 else 1))
                channels = width
        self.blocks = tnn.Sequential(*blocks)
        self.fc = tnn.Linear(channels, classes)

    def forward(self, x):
        h = self.blocks(tF.relu(self.stem(x)))
        return self.fc(h.mean((2, 3)))


def torch_twin(paddle_model):
    """A TorchResNet holding paddle_model's initial weights (same names and shapes), so that the
    three runs start from the same point and differ only in the framework."""
    twin = TorchResNet()
    ours = dict(paddle_model.named_parameters())
    with torch.no_grad():
        for name, param in twin.named_parameters():
            param.copy_(torch.from_numpy(ours[name].numpy().copy()))
    return twin


class PaddleRun:
    def __init__(self, name, model, lr):
        self.name, self.model = name, model
        self.opt = paddle.optim.SGD(model.parameters(), lr=lr, momentum=0.9)

    def step(self, x, y):
        self.opt.zero_grad()
        loss = F.cross_entropy(self.model(paddle.from_numpy(x)), paddle.from_numpy(y))
        loss.backward()
        self.opt.step()

    def accuracy(self, images, labels, batch=500):
        correct = 0
        with paddle.no_grad():
            self.model.eval()
            for i in range(0, len(images), batch):
                logits = self.model(paddle.from_numpy(images[i:i + batch]))
                correct += int((logits.argmax(1).numpy() == labels[i:i + batch]).sum())
            self.model.train()
        return correct / len(images)


class TorchRun:
    def __init__(self, model, lr):
        self.name, self.model = "torch", model
        self.opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)

    def step(self, x, y):
        self.opt.zero_grad()
        loss = tF.cross_entropy(self.model(torch.from_numpy(x)), torch.from_numpy(y))
        loss.backward()
        self.opt.step()

    def accuracy(self, images, labels, batch=500):
        correct = 0
        with torch.no_grad():
            self.model.eval()
            for i in range(0, len(images), batch):
                logits = self.model(torch.from_numpy(images[i:i + batch]))
                correct += int((logits.argmax(1).numpy() == labels[i:i + batch]).sum())
            self.model.train()
        return correct / len(images)


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--train-samples", type=int, default=12000, help="0: all 60000")
    p.add_argument("--test-samples", type=int, default=0, help="0: all 10000")
    p.add_argument("--runs", default="python,cpp,torch")
    o = p.parse_args(argv)
    paddle.set_num_threads(o.threads)
    torch.set_num_threads(o.threads)
    torch.manual_seed(o.seed)
    train, test = paddle.data.FashionMNIST("train"), paddle.data.FashionMNIST("test")
    images, labels = train.images.numpy(), train.labels.numpy()
    if o.train_samples:
        images, labels = images[:o.train_samples], labels[:o.train_samples]
    test_images, test_labels = test.images.numpy(), test.labels.numpy()
    if o.test_samples:
        test_images, test_labels = test_images[:o.test_samples], test_labels[:o.test_samples]
    makers = {"python": lambda: PaddleRun("python", ResNet(o.seed), o.lr),
              "cpp": lambda: PaddleRun("cpp", nn.make_model("resnet", o.seed), o.lr),
              "torch": lambda: TorchRun(torch_twin(ResNet(o.seed)), o.lr)}
    runs = [makers[name]() for name in o.runs.split(",")]
    stats = {r.name: {"seconds": 0.0, "samples": 0, "wall": [], "cpu": []} for r in runs}
    load_before = os.getloadavg()
    for epoch in range(o.epochs):
        order = np.random.default_rng(o.seed + epoch).permutation(len(images))
        batches = [order[s:s + o.batch] for s in range(0, len(order) - o.batch + 1, o.batch)]
        shift = epoch % len(runs)
        for run in runs[shift:] + runs[:shift]:
            st = stats[run.name]
            t0 = time.perf_counter()
            for idx in batches:
                w0, c0 = time.perf_counter(), time.process_time()
                run.step(images[idx], labels[idx])
                st["wall"].append(time.perf_counter() - w0)
                st["cpu"].append(time.process_time() - c0)
            seconds = time.perf_counter() - t0
            st["seconds"] += seconds
            st["samples"] += len(batches) * o.batch
            print(f"epoch {epoch} {run.name:6s} {len(batches) * o.batch / seconds:7.0f} samples/s "
                  f"load {os.getloadavg()[0]:.1f}", flush=True)
    results = {}
    for run in runs:
        st = stats[run.name]
        results[run.name] = {
            "samples_per_s": round(st["samples"] / st["seconds"], 1),
            "step_ms_wall_median": round(1000 * statistics.median(st["wall"]), 2),
            "step_ms_cpu_median": round(1000 * statistics.median(st["cpu"]), 2),
            "test_accuracy": run.accuracy(test_images, test_labels)}
    summary = {"epochs": o.epochs, "train_samples": len(images), "batch": o.batch,
               "threads": o.threads, "load_before": [round(x, 2) for x in load_before],
               "load_after": [round(x, 2) for x in os.getloadavg()], "runs": results}
    if "torch" in results:
        for name in ("python", "cpp"):
            if name in results:
                summary[f"{name}_vs_torch_samples_per_s"] = round(
                    results[name]["samples_per_s"] / results["torch"]["samples_per_s"], 3)
                summary[f"{name}_vs_torch_cpu_step"] = round(
                    results["torch"]["step_ms_cpu_median"] / results[name]["step_ms_cpu_median"],
                    3)
    if "python" in results and "cpp" in results:
        summary["python_over_cpp_cpu_step"] = round(
            results["python"]["step_ms_cpu_median"] / results["cpp"]["step_ms_cpu_median"], 3)
        summary["python_over_cpp_wall_step"] = round(
            results["python"]["step_ms_wall_median"] / results["cpp"]["step_ms_wall_median"], 3)
    print(json.dumps(summary), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
