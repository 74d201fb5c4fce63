#!/usr/bin/python3
"""torch.distributed all_reduce on backend "paddle" against backend "gloo", side by side.

    bazel run -c opt //bench:torch_allreduce -- --nproc=2,4 --sizes=4K,1M,64M

For each world size and backend it starts that many ranks (env:// on a fresh port), and for each
size runs warmup calls, a barrier, then `iters` blocking all_reduce(SUM) calls on the same
float32 tensor, timed one by one; the median over ranks' medians is reported with algbw =
bytes/time and busbw = algbw * 2(n-1)/n (nccl-tests). Every run ends with one call on fresh
inputs whose every element is checked. The table gives paddle/gloo ratios: busbw (higher is
better for paddle) and time (lower is better).
"""
import argparse
import datetime
import os
import socket
import subprocess
import sys
import time

SIZES = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def parse_size(text):
    return int(text[:-1]) * SIZES[text[-1].upper()] if text[-1].upper() in SIZES else int(text)


def worker(backend, rank, world, port, sizes, iters):
    import torch
    import torch.distributed as dist
    import paddle.torch  # noqa: F401

    torch.set_num_threads(1)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group(backend, rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=120))
    for nbytes in sizes:
        n = nbytes // 4
        t = torch.full((n,), float(rank + 1))
        count = iters if nbytes < (16 << 20) else max(3, iters // 10)
        for _ in range(max(2, count // 10)):
            dist.all_reduce(t)
        dist.barrier()
        times = []
        for _ in range(count):
            start = time.perf_counter()
            dist.all_reduce(t)
            times.append(time.perf_counter() - start)
        check = (torch.arange(n) % 5 + rank).float()
        dist.all_reduce(check)
        want = (torch.arange(n) % 5).float() * world + world * (world - 1) / 2
        wrong = int((check != want).sum())
        times.sort()
        print(f"ROW bytes={nbytes} median_us={times[len(times) // 2] * 1e6:.1f} wrong={wrong}",
              flush=True)
    dist.destroy_process_group()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(backend, world, sizes, iters):
    """{bytes: median time in us (the slowest rank's median)}."""
    port = free_port()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path), OMP_NUM_THREADS="1",
               OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1")
    args = ",".join(str(s) for s in sizes)
    procs = [subprocess.Popen([sys.executable, __file__, "--worker", backend, str(r), str(world),
                               str(port), args, str(iters)], stdout=subprocess.PIPE, text=True,
                              env=env) for r in range(world)]
    result = {}
    for p in procs:
        out, _ = p.communicate(timeout=900)
        if p.returncode != 0:
            sys.exit(f"{backend} x{world}: a rank exited {p.returncode}")
        for line in out.splitlines():
            if line.startswith("ROW"):
                f = dict(kv.split("=") for kv in line.split()[1:])
                if int(f["wrong"]):
                    sys.exit(f"{backend} x{world}: {f['wrong']} wrong elements at {f['bytes']} B")
                b = int(f["bytes"])
                result[b] = max(result.get(b, 0.0), float(f["median_us"]))
    return result


def human(nbytes):
    for unit, size in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if nbytes >= size:
            return f"{nbytes // size}{unit}"
    return str(nbytes)


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        backend, rank, world, port, sizes, iters = sys.argv[2:8]
        worker(backend, int(rank), int(world), int(port),
               [int(s) for s in sizes.split(",")], int(iters))
        return
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--nproc", default="2,4", help="world sizes, comma-separated")
    ap.add_argument("--sizes", default="4K,1M,64M", help="bytes per rank, e.g. 4K,1M,64M")
    ap.add_argument("--iters", type=int, default=50, help="timed calls per size (/10 from 16M)")
    args = ap.parse_args()
    sizes = [parse_size(s) for s in args.sizes.split(",")]
    print(f"{'ranks':>5} {'bytes':>6} | {'gloo us':>9} {'busbw GB/s':>10} | {'paddle us':>9} "
          f"{'busbw GB/s':>10} | {'busbw ratio':>11} {'time ratio':>10}")
    for world in (int(w) for w in args.nproc.split(",")):
        gloo = run("gloo", world, sizes, args.iters)
        ours = run("paddle", world, sizes, args.iters)
        for b in sizes:
            factor = 2 * (world - 1) / world
            bw_g = b / gloo[b] / 1e3 * factor
            bw_p = b / ours[b] / 1e3 * factor
            print(f"{world:>5} {human(b):>6} | {gloo[b]:>9.1f} {bw_g:>10.2f} | {ours[b]:>9.1f} "
                  f"{bw_p:>10.2f} | {bw_p / bw_g:>10.2f}x {ours[b] / gloo[b]:>10.2f}")


if __name__ == "__main__":
    main()
