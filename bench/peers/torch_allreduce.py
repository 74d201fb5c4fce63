#!/usr/bin/python3
"""The PyTorch peer of bench/collectives: torch.distributed.all_reduce over the gloo backend.

One process per rank, started by the benchmark with RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT
set (rendezvous env://). It runs the same sweep as our own workers
(bench/collectives/sweep_worker.h): the same sizes, the same inputs (word i of Philox(seed, rank),
as paddle/core/philox.cc computes it, mapped to (w % 17) - 8), warmup, a barrier, `iters`
blocking all_reduce calls timed together, then one more on fresh inputs with every element
checked. Each rank prints "ROW rank=R bytes=B count=C time_us=T wrong=W" per size.

Needs Debian's python3-torch and python3-numpy (run with /usr/bin/python3).
"""

import argparse
import os
import time

import numpy as np
import torch
import torch.distributed as dist

_MUL0, _MUL1 = 0xD2511F53, 0xCD9E8D57
_WEYL0, _WEYL1 = 0x9E3779B9, 0xBB67AE85
_MASK = 0xFFFFFFFF

_DTYPES = {
    "float32": torch.float32,
    "float64": torch.float64,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "int32": torch.int32,
    "int64": torch.int64,
    "uint8": torch.uint8,
}


def philox_words(seed, stream, count):
    """Words 0..count-1 of Philox4x32-10 under key `seed`, counter (block, stream)."""
    blocks = (count + 3) // 4
    index = np.arange(blocks, dtype=np.uint64)
    c0 = index & _MASK
    c1 = index >> np.uint64(32)
    c2 = np.full(blocks, stream & _MASK, dtype=np.uint64)
    c3 = np.full(blocks, (stream >> 32) & _MASK, dtype=np.uint64)
    k0, k1 = seed & _MASK, (seed >> 32) & _MASK
    for round_ in range(10):
        if round_ > 0:
            k0 = (k0 + _WEYL0) & _MASK
            k1 = (k1 + _WEYL1) & _MASK
        p0 = c0 * np.uint64(_MUL0)
        p1 = c2 * np.uint64(_MUL1)
        hi0, lo0 = p0 >> np.uint64(32), p0 & np.uint64(_MASK)
        hi1, lo1 = p1 >> np.uint64(32), p1 & np.uint64(_MASK)
        c0, c1, c2, c3 = hi1 ^ c1 ^ np.uint64(k0), lo1, hi0 ^ c3 ^ np.uint64(k1), lo0
    return np.stack([c0, c1, c2, c3], axis=1).reshape(-1)[:count]


def values(seed, rank, count, dtype_name):
    """Rank `rank`'s input as int64: small integers, exact in every dtype."""
    words = philox_words(seed, rank, count)
    v = (words % np.uint64(17)).astype(np.int64)
    return v if dtype_name == "uint8" else v - 8


def iterations_for(iters, nbytes):
    """bench/collectives/bench_inputs.h IterationsFor: up to 16x more runs below 64 KiB."""
    factor = 16 if nbytes <= 0 else min(max((64 << 10) // nbytes, 1), 16)
    return iters * factor


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--nproc", type=int, required=True)
    parser.add_argument("--min-bytes", type=int, required=True)
    parser.add_argument("--max-bytes", type=int, required=True)
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--dtype", default="float32", choices=sorted(_DTYPES))
    args = parser.parse_args()

    torch.set_num_threads(1)  # our workers compute on one thread too
    dist.init_process_group("gloo", init_method="env://")
    rank, size = dist.get_rank(), dist.get_world_size()
    dtype = _DTYPES[args.dtype]
    element = torch.empty((), dtype=dtype).element_size()

    bytes_ = args.min_bytes
    while bytes_ <= args.max_bytes:
        count = bytes_ // element
        bytes_ *= 2
        if count == 0:
            continue
        mine = torch.from_numpy(values(args.seed, rank, count, args.dtype)).to(dtype)
        data = mine.clone()
        iters = iterations_for(args.iters, count * element)
        for _ in range(iterations_for(args.warmup, count * element)):
            dist.all_reduce(data)
        dist.barrier()
        iteration_us = []
        start = last = time.perf_counter()
        for _ in range(iters):
            dist.all_reduce(data)
            now = time.perf_counter()
            iteration_us.append((now - last) * 1e6)
            last = now
        seconds = last - start
        iteration_us.sort()
        data.copy_(mine)
        dist.all_reduce(data)
        expected = np.zeros(count, dtype=np.int64)
        for r in range(size):
            expected += values(args.seed, r, count, args.dtype)
        wrong = int((data != torch.from_numpy(expected).to(dtype)).sum())
        print(f"ROW rank={rank} bytes={count * element} count={count} "
              f"time_us={seconds * 1e6 / iters:.3f} "
              f"p50_us={iteration_us[len(iteration_us) // 2]:.3f} "
              f"max_us={iteration_us[-1]:.3f} wrong={wrong}", flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
