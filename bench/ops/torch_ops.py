"""The layers of bench/ops/ops_bench.cc in PyTorch (forward + backward, batch 128), 1 and 2 threads.

Run with /usr/bin/python3 (Debian's python3-torch). Prints ms per iteration and GFLOP/s with the
same FLOP counts as ops_bench.
"""
import time

import torch
import torch.nn.functional as F

BATCH = 128


def timeit(fn, min_time=1.0):
    for _ in range(3):
        fn()
    n, start = 0, time.perf_counter()
    while time.perf_counter() - start < min_time:
        fn()
        n += 1
    return (time.perf_counter() - start) / n


def conv(c, h, k):
    x = torch.rand(BATCH, c, h, h) - 0.5
    x.requires_grad_(c > 1)
    w = (torch.rand(k, c, 3, 3) - 0.5).requires_grad_()
    b = (torch.rand(k) - 0.5).requires_grad_()
    dy = torch.rand(BATCH, k, h - 2, h - 2) - 0.5

    def step():
        F.conv2d(x, w, b).backward(dy)

    t = timeit(step)
    fwd = 2.0 * BATCH * k * (h - 2) ** 2 * c * 9
    return t, fwd * (3 if c > 1 else 2) / t / 1e9


def linear(i, o):
    x = (torch.rand(BATCH, i) - 0.5).requires_grad_()
    w = (torch.rand(o, i) - 0.5).requires_grad_()
    b = (torch.rand(o) - 0.5).requires_grad_()
    dy = torch.rand(BATCH, o) - 0.5

    def step():
        F.linear(x, w, b).backward(dy)

    t = timeit(step)
    return t, 3 * 2.0 * BATCH * i * o / t / 1e9


def maxpool():
    x = (torch.rand(BATCH, 64, 24, 24) - 0.5).requires_grad_()
    dy = torch.rand(BATCH, 64, 12, 12) - 0.5

    def step():
        F.max_pool2d(x, 2).backward(dy)

    t = timeit(step)
    return t, (x.numel() * 8 + dy.numel() * 8) / t / 1e9


def main():
    for threads in (1, 2):
        torch.set_num_threads(threads)
        for c, h, k in ((1, 28, 32), (32, 26, 64)):
            t, g = conv(c, h, k)
            print(f"torch conv C={c} H={h} K={k} threads={threads}: {t * 1e3:.3f} ms  {g:.1f} GFLOP/s")
        for i, o in ((9216, 128), (784, 256), (256, 128)):
            t, g = linear(i, o)
            print(f"torch linear {i}->{o} threads={threads}: {t * 1e6:.1f} us  {g:.1f} GFLOP/s")
        t, g = maxpool()
        print(f"torch maxpool 2x2 [128,64,24,24] threads={threads}: {t * 1e3:.3f} ms  {g:.2f} GB/s")


if __name__ == "__main__":
    main()
