#!/usr/bin/python3
"""The PyTorch peer of bench/collectives: torch.distributed over the gloo backend.

One process per rank, started by the benchmark with RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT
set (rendezvous env://). It runs the same sweep as our own workers
(bench/collectives/sweep_worker.h): the same sizes, the same inputs (word i of Philox(seed, rank),
as paddle/core/philox.cc computes it, mapped to (w % 17) - 8; past 2^22 elements only every 16th
chunk of 4096, the rest 0: Note [Sparse large inputs] in bench/collectives/bench_inputs.h),
one call on those inputs with every element checked that is also the first warm-up (Note
[Checked first run] there), the other warm-ups, a barrier, and `iters` blocking calls
(all_reduce, all_gather into views of one output tensor, broadcast from rank 0 or
all_to_all_single) timed one by one.
Each rank prints "ROW rank=R bytes=B count=C time_us=T p50_us=... wrong=W" per size
(bench/collectives/report.h). PyTorch 1.13's gloo backend has no reduce_scatter: asked for it,
the script says so and exits 3.

Needs Debian's python3-torch and python3-numpy (run with /usr/bin/python3).

Note [Peer input cost]: the inputs and the expected outputs are made here with numpy, not timed
but paid for in every bench-report run. Made whole, once per size and per use (every rank's input
again for each allreduce check, every rank's whole input for one alltoall block), with uint64
temporaries as large as the message, they cost 4 GB of memory per rank and most of each step's
time at 64 and 256 MiB (alltoall at 2 ranks: 79 s for the step, about 2 s of it timed). Now
words are made 2^18 at a time, each rank's input is kept as an int8 prefix that later sizes
extend (element i does not depend on the size), and an alltoall check makes only the block it
needs. The numbers are the same (tests/tools/bench_report_test.py TorchPeerInputsTest).
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


# Words are made this many at a time (a multiple of 4): numpy's uint64 temporaries of a whole
# 256 MiB input took gigabytes per rank and tens of seconds (Note [Peer input cost]).
_CHUNK_WORDS = 1 << 18


# Note [Sparse large inputs] in bench/collectives/bench_inputs.h: element i is drawn from Philox
# when i < _DENSE_ELEMENTS or its chunk of _INPUT_CHUNK elements is a multiple of _SPARSE_STRIDE;
# every other element is 0.
_INPUT_CHUNK = 4096
_DENSE_ELEMENTS = 1 << 22
_SPARSE_STRIDE = 16


def philox_words(seed, stream, begin, count):
    """Words begin..begin+count-1 of Philox4x32-10 under key `seed`, counter (block, stream)."""
    first = begin // 4
    blocks = (begin + count + 3) // 4 - first
    words = philox_blocks(seed, stream, np.arange(first, first + blocks, dtype=np.uint64))
    skip = begin - 4 * first
    return words.reshape(-1)[skip:skip + count]


def philox_blocks(seed, stream, index):
    """The four words of each Philox4x32-10 block in uint64 array `index`: shape [len, 4]."""
    blocks = len(index)
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
    return np.stack([c0, c1, c2, c3], axis=1)


def values(seed, rank, begin, count, dtype_name):
    """Elements begin..begin+count-1 of rank `rank`'s input as int8: small integers, exact in
    every dtype, or 0 where not drawn (Note [Sparse large inputs]). Made _CHUNK_WORDS at a
    time."""
    out = np.zeros(count, dtype=np.int8)
    offset = 0 if dtype_name == "uint8" else 8
    done = 0
    while done < count:
        at = begin + done
        n = min(_CHUNK_WORDS - at % _CHUNK_WORDS, count - done)
        index = np.arange(at, at + n, dtype=np.int64)
        drawn = (index < _DENSE_ELEMENTS) | ((index // _INPUT_CHUNK) % _SPARSE_STRIDE == 0)
        if drawn.all():
            words = philox_words(seed, rank, at, n)
            out[done:done + n] = (words % np.uint64(17)).astype(np.int8) - np.int8(offset)
        elif drawn.any():
            picked = index[drawn]
            blocks, which = np.unique(picked // 4, return_inverse=True)
            words = philox_blocks(seed, rank, blocks.astype(np.uint64))[which, picked % 4]
            piece = out[done:done + n]
            piece[drawn] = (words % np.uint64(17)).astype(np.int8) - np.int8(offset)
        done += n
    return out


class Inputs:
    """Every rank's input, kept as int8 prefixes of the longest asked for so far (Note [Peer
    input cost]): element i of a rank's input does not depend on the size, so a sweep makes
    each rank's elements once instead of once per size and use."""

    def __init__(self, seed, dtype_name):
        self.seed, self.dtype_name = seed, dtype_name
        self.prefix = {}

    def get(self, rank, begin, count):
        """Elements begin..begin+count-1 of `rank`'s input (int8; a view, not to be written)."""
        have = self.prefix.get(rank, np.empty(0, dtype=np.int8))
        end = begin + count
        if end <= len(have):
            return have[begin:end]
        if begin > len(have):  # a block far past the prefix (alltoall): made, not kept
            return values(self.seed, rank, begin, count, self.dtype_name)
        have = np.concatenate([have, values(self.seed, rank, len(have), end - len(have),
                                            self.dtype_name)])
        self.prefix[rank] = have
        return have[begin:end]


def expected(op, inputs, rank, size, count):
    """What `op` leaves in this rank's output (bench_inputs.cc CountWrong), as int16."""
    block = count // size
    if op == "allreduce":
        want = np.zeros(count, dtype=np.int16)
        for r in range(size):
            want += inputs.get(r, 0, count)
        return want
    if op == "broadcast":
        return inputs.get(0, 0, count).astype(np.int16)
    if op == "allgather":
        return np.concatenate([inputs.get(r, 0, block) for r in range(size)]).astype(np.int16)
    # alltoall: block j is block `rank` of rank j's input.
    return np.concatenate([inputs.get(j, rank * block, block)
                           for j in range(size)]).astype(np.int16)


def count_wrong(out, want):
    """Elements of tensor `out` that differ from int array `want`, compared _CHUNK_WORDS at a
    time (a whole-size conversion and boolean sum took seconds at 256 MiB)."""
    wrong = 0
    for begin in range(0, len(want), _CHUNK_WORDS):
        got = out[begin:begin + _CHUNK_WORDS]
        expect = torch.from_numpy(want[begin:begin + _CHUNK_WORDS]).to(out.dtype)
        if not torch.equal(got, expect):
            wrong += int((got != expect).sum())
    return wrong


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

    inputs = Inputs(args.seed, args.dtype)
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
        mine = torch.from_numpy(
            inputs.get(rank, 0, block if args.op == "allgather" else count)).to(dtype)
        data = mine  # a tensor of its own: .to(dtype) copied it out of the kept prefix
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
        warmup = budgeted_iterations(args.warmup, count * element, args.budget_bytes, True)
        # Note [Checked first run] in bench/collectives/bench_inputs.h: checked, and a warm-up.
        once()
        wrong = count_wrong(out, expected(args.op, inputs, rank, size, count))
        for _ in range(warmup - 1):
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
        dist.barrier()  # Note [Barrier after the timed loop] in bench/collectives/bench_inputs.h
        iteration_us.sort()
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
