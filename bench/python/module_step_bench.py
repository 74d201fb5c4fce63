#!/usr/bin/python3
"""Step time (forward, backward, SGD step) of the same model built several ways. --model=mlp
(784-256-128-10, ReLU): paddle's C++ model (make_model("mlp")), a paddle.nn.Module written in
Python around the C++ Linear layers, the same with its layers written as Python tensor ops
(x @ W + b over Parameters), and PyTorch. --model=cnn (make_model("cnn"), PyTorch's MNIST
example network): the C++ model, the same layers under a Python forward, and PyTorch. Same
batch, same thread count, same random data.

    OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 /usr/bin/python3 bench/python/module_step_bench.py

Prints one line per variant (median ms per step over --repeats windows) and a JSON line. With
--clock=cpu (the default) a step is measured in this process's CPU time, which other jobs on a
shared machine inflate far less than wall time; use it with --threads=1 only.
"""
import argparse
import json
import statistics
import time

import numpy as np

import paddle
from paddle import nn
from paddle.nn import functional as F


class PyMlp(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2, self.fc3 = nn.Linear(784, 256), nn.Linear(256, 128), nn.Linear(128, 10)

    def forward(self, x):
        x = x.reshape([x.shape[0], 784])
        return self.fc3(self.fc2(self.fc1(x).relu()).relu())


class OpsMlp(nn.Module):
    def __init__(self):
        super().__init__()
        rng = np.random.default_rng(0)
        for i, (a, b) in enumerate([(784, 256), (256, 128), (128, 10)]):
            bound = 1 / np.sqrt(a)
            setattr(self, f"w{i}", nn.Parameter(rng.uniform(-bound, bound, (a, b)).astype("f4")))
            setattr(self, f"b{i}", nn.Parameter(rng.uniform(-bound, bound, b).astype("f4")))

    def forward(self, x):
        x = x.reshape([x.shape[0], 784])
        x = (x @ self.w0 + self.b0).relu()
        x = (x @ self.w1 + self.b1).relu()
        return x @ self.w2 + self.b2


class PyCnn(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1, self.conv2 = nn.Conv2d(1, 32, 3), nn.Conv2d(32, 64, 3)
        self.fc1, self.fc2 = nn.Linear(9216, 128), nn.Linear(128, 10)
        self.pool = nn.MaxPool2d(2)
        self.drop1, self.drop2 = nn.Dropout(0.25), nn.Dropout(0.5)

    def forward(self, x):
        x = self.drop1(self.pool(self.conv2(self.conv1(x).relu()).relu()))
        return self.fc2(self.drop2(self.fc1(x.flatten()).relu()))


def time_steps(step, steps, repeats, clock=time.process_time):
    for _ in range(10):
        step()
    windows = []
    for _ in range(repeats):
        t0 = clock()
        for _ in range(steps):
            step()
        windows.append((clock() - t0) / steps * 1e3)
    return statistics.median(windows)


def paddle_step(model, x, y):
    opt = paddle.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

    def step():
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        opt.step()
    return step


def torch_step(x, y, threads, model_name):
    import torch  # pylint: disable=import-outside-toplevel
    torch.set_num_threads(threads)
    tnn = torch.nn
    if model_name == "mlp":
        model = tnn.Sequential(tnn.Flatten(), tnn.Linear(784, 256), tnn.ReLU(),
                               tnn.Linear(256, 128), tnn.ReLU(), tnn.Linear(128, 10))
    else:
        model = tnn.Sequential(tnn.Conv2d(1, 32, 3), tnn.ReLU(), tnn.Conv2d(32, 64, 3), tnn.ReLU(),
                               tnn.MaxPool2d(2), tnn.Dropout(0.25), tnn.Flatten(),
                               tnn.Linear(9216, 128), tnn.ReLU(), tnn.Dropout(0.5),
                               tnn.Linear(128, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    tx, ty = torch.from_numpy(x), torch.from_numpy(y)

    def step():
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(tx), ty).backward()
        opt.step()
    return step


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="mlp", choices=["mlp", "cnn"])
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--clock", default="cpu", choices=["cpu", "wall"])
    o = p.parse_args()
    if o.clock == "cpu" and o.threads != 1:
        p.error("--clock=cpu sums the CPU time of all threads: use it with --threads=1")
    clock = time.process_time if o.clock == "cpu" else time.perf_counter
    paddle.set_num_threads(o.threads)
    rng = np.random.default_rng(1)
    xn = rng.standard_normal((o.batch, 1, 28, 28)).astype(np.float32)
    yn = rng.integers(0, 10, o.batch).astype(np.int64)
    x = paddle.from_numpy(xn)
    results = {}
    variants = [("paddle C++ model", lambda: paddle_step(nn.make_model(o.model), x, yn)),
                ("paddle Python Module + C++ layers",
                 lambda: paddle_step(PyMlp() if o.model == "mlp" else PyCnn(), x, yn))]
    if o.model == "mlp":
        variants.append(("paddle Python Module + tensor ops", lambda: paddle_step(OpsMlp(), x, yn)))
    variants.append(("torch 1.13", lambda: torch_step(xn, yn, o.threads, o.model)))
    for name, make in variants:
        results[name] = time_steps(make(), o.steps, o.repeats, clock)
    base = results["paddle C++ model"]
    for name, ms in results.items():
        print(f"{name:36s} {ms:7.3f} ms/step  {o.batch / ms * 1e3:8.0f} samples/s  "
              f"{ms / base:5.2f}x the C++ model")
    print(json.dumps({"model": o.model, "batch": o.batch, "threads": o.threads, "clock": o.clock,
                      "ms_per_step": results}))


if __name__ == "__main__":
    main()
