#!/usr/bin/python3
"""The PyTorch peer of bench/collectives: torch.distributed over the gloo backend.

One process per rank, started by the benchmark with RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT
set (rendezvous env://). It runs the same sweep as our own workers
(bench/collectives/sweep_worker.h): the same sizes, the same inputs (word i of Philox(seed, rank),
as paddle/core/philox.cc computes it, mapped to (w % 17) - 8), warmup, a barrier, `iters`
blocking calls (all_reduce, all_gather into views of one output tensor, broadcast from rank 0 or
all_to_all_single) timed one by one, then one more on fresh inputs with every element checked.
Each rank prints "ROW rank=R bytes=B count=C time_us=T p50_us=... wrong=W" per size
(bench/collectives/report.h). PyTorch 1.13's gloo backend has no reduce_scatter: asked for it,
the script says so and exits 3.

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


def expected(op, seed, rank, size, count, dtype_name):
    """What `op` leaves in this rank's output (bench_inputs.cc CountWrong), as int64."""
    block = count // size
    if op == "allreduce":
        return sum(values(seed, r, count, dtype_name) for r in range(size))
    if op == "broadcast":
        return values(seed, 0, count, dtype_name)
    if op == "allgather":
        return np.concatenate([values(seed, r, block, dtype_name) for r in range(size)])
    # alltoall: block j is block `rank` of rank j's input.
    return np.concatenate([values(seed, j, count, dtype_name)[rank * block:(rank + 1) * block]
                           for j in range(size)])


def percentile_99(sorted_us):
    """Nearest rank, as bench_inputs.cc Latencies."""
    n = len(sorted_us)
    return sorted_us[min(max(-(-99 * n // 100), 1), n) - 1]


def iterations_for(iters, nbytes):
    """bench/collectives/bench_inputs.h IterationsFor: up to 16x more runs below 64 KiB."""
    factor = 16 if nbytes <= 0 else min(max((64 << 10) // nbytes, 1), 16)
    return iters * factor


def budgeted_iterations(iters, nbytes, budget_bytes, warmup):
    """bench_inputs.h BudgetedIterations (Note [Sweep budget]): fewer runs above budget_bytes."""
    plain = iterations_for(iters, nbytes)
    if budget_bytes <= 0 or nbytes <= budget_bytes or iters <= 0:
        return plain
    floor = min(iters, 1 if warmup else 2)
    return min(max(iters * budget_bytes // nbytes, floor), plain)


def next_sweep_bytes(nbytes, coarse_from):
    """bench_inputs.h NextSweepBytes: 4x steps from coarse_from (0: never)."""
    return nbytes * (4 if 0 < coarse_from <= nbytes else 2)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--nproc", type=int, required=True)
    parser.add_argument("--min-bytes", type=int, required=True)
    parser.add_argument("--max-bytes", type=int, required=True)
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--coarse-from", type=int, default=0)
    parser.add_argument("--budget-bytes", type=int, default=0)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--dtype", default="float32", choices=sorted(_DTYPES))
    parser.add_argument("--op", default="allreduce",
                        choices=["allreduce", "allgather", "broadcast", "alltoall",
                                 "reduce_scatter"])
    args = parser.parse_args()
    if args.op == "reduce_scatter":
        print("torch_collectives: PyTorch 1.13's gloo backend has no reduce_scatter", flush=True)
        raise SystemExit(3)

    torch.set_num_threads(1)  # our workers compute on one thread too
    dist.init_process_group("gloo", init_method="env://")
    rank, size = dist.get_rank(), dist.get_world_size()
    dtype = _DTYPES[args.dtype]
    element = torch.empty((), dtype=dtype).element_size()

    split = args.op in ("allgather", "alltoall")
    bytes_ = args.min_bytes
    previous = 0
    while bytes_ <= args.max_bytes:
        count = bytes_ // element
        bytes_ = next_sweep_bytes(bytes_, args.coarse_from)
        if split:
            count -= count % size
        if count == 0 or count == previous:
            continue
        previous = count
        block = count // size
        mine = torch.from_numpy(values(args.seed, rank, block if args.op == "allgather" else count,
                                       args.dtype)).to(dtype)
        data = mine.clone()
        out = data if args.op in ("allreduce", "broadcast") else torch.empty(count, dtype=dtype)
        pieces = list(out.split(block)) if args.op == "allgather" else None

        def once():
            if args.op == "allreduce":
                dist.all_reduce(data)
            elif args.op == "broadcast":
                dist.broadcast(data, 0)
            elif args.op == "allgather":
                dist.all_gather(pieces, data)
            else:
                dist.all_to_all_single(out, data)

        iters = budgeted_iterations(args.iters, count * element, args.budget_bytes, False)
        for _ in range(budgeted_iterations(args.warmup, count * element, args.budget_bytes, True)):
            once()
        dist.barrier()
        iteration_us = []
        start = last = time.perf_counter()
        for _ in range(iters):
            once()
            now = time.perf_counter()
            iteration_us.append((now - last) * 1e6)
            last = now
        seconds = last - start
        iteration_us.sort()
        data.copy_(mine)
        once()
        want = expected(args.op, args.seed, rank, size, count, args.dtype)
        wrong = int((out != torch.from_numpy(want).to(dtype)).sum())
        print(f"ROW rank={rank} bytes={count * element} count={count} "
              f"time_us={seconds * 1e6 / iters:.3f} "
              f"p50_us={iteration_us[len(iteration_us) // 2]:.3f} "
              f"max_us={iteration_us[-1]:.3f} min_us={iteration_us[0]:.3f} "
              f"p99_us={percentile_99(iteration_us):.3f} wrong={wrong}", flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
