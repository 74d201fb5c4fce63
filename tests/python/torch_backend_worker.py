"""One rank of a torch_backend_test.py scenario: plain torch.distributed code on backend "paddle".

usage: torch_backend_worker.py SCENARIO [RANK WORLD PORT]
Without RANK/WORLD/PORT the rank comes from the launcher's environment (torchrun, paddlerun).
Inputs are made from (rank, index), so every element of every result is checked exactly. A rank
prints "OK" when all its checks passed.
"""
import datetime
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn

import paddle.torch  # noqa: F401  (registers backend "paddle")

R = dist.ReduceOp
FLOATS = [torch.float32, torch.float64, torch.float16, torch.bfloat16]
INTS = [torch.int32, torch.int64, torch.int8, torch.uint8]


def value(rank, n, dtype):
    """Small integers, exact in every dtype even after a product over 4 ranks."""
    return ((torch.arange(n) % 3) + rank + 1).to(dtype)


def expect(got, want, what):
    if not torch.equal(got, want):
        raise AssertionError(f"{what}: got {got.tolist()} want {want.tolist()}")


def reduce_ref(world, n, dtype, op):
    stack = torch.stack([value(r, n, torch.float64) for r in range(world)])
    if op == R.SUM:
        return stack.sum(0).to(dtype)
    if op == R.PRODUCT:
        return stack.prod(0).to(dtype)
    if op == R.MIN:
        return stack.min(0).values.to(dtype)
    if op == R.MAX:
        return stack.max(0).values.to(dtype)
    # AVG: an exact sum divided once, in float32 for the 16-bit types (Note [Reduction semantics]).
    wide = torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype
    return (stack.sum(0).to(wide) / world).to(dtype)


def raises(fn, text, what):
    try:
        fn()
    except RuntimeError as e:
        if text not in str(e):
            raise AssertionError(f"{what}: error {e!r} does not mention {text!r}")
        return
    raise AssertionError(f"{what}: no error")


def check_ops(rank, world):
    n = 10  # not divisible by 3
    for dtype in FLOATS + INTS:
        for op in [R.SUM, R.PRODUCT, R.MIN, R.MAX] + ([R.AVG] if dtype in FLOATS else []):
            t = value(rank, n, dtype)
            dist.all_reduce(t, op=op)
            expect(t, reduce_ref(world, n, dtype, op), f"all_reduce {dtype} {op}")
    raises(lambda: dist.all_reduce(value(rank, n, torch.int32), op=R.AVG), "int32",
           "integer average")
    raises(lambda: dist.all_reduce(torch.zeros(3, dtype=torch.int16)), "Short",
           "int16 dtype")
    raises(lambda: dist.all_reduce(value(rank, n, torch.float32), op=R.BAND),
           "BAND with non-integral dtype Float", "BAND on float32")

    # Non-contiguous in place: a transposed view is staged and copied back.
    base = value(rank, 12, torch.float32).reshape(3, 4)
    view = base.t()
    dist.all_reduce(view)
    expect(base, reduce_ref(world, 12, torch.float32, R.SUM).reshape(3, 4), "non-contiguous")

    # allreduce_coalesced over tensors of different shapes.
    ts = [value(rank, 5, torch.float64), value(rank, 6, torch.float64).reshape(2, 3).t()]
    dist.all_reduce_coalesced(ts)
    expect(ts[0], reduce_ref(world, 5, torch.float64, R.SUM), "coalesced 0")
    expect(ts[1], reduce_ref(world, 6, torch.float64, R.SUM).reshape(2, 3).t(), "coalesced 1")

    for dtype in [torch.float32, torch.int64, torch.bfloat16]:
        t = value(rank, n, dtype)
        dist.broadcast(t, src=world - 1)
        expect(t, value(world - 1, n, dtype), f"broadcast {dtype}")

        t = value(rank, n, dtype)
        dist.reduce(t, dst=1, op=R.MAX)
        if rank == 1:
            expect(t, reduce_ref(world, n, dtype, R.MAX), f"reduce {dtype}")

        outs = [torch.empty(n, dtype=dtype) for _ in range(world)]
        dist.all_gather(outs, value(rank, n, dtype))
        for r in range(world):
            expect(outs[r], value(r, n, dtype), f"all_gather {dtype} from {r}")
        flat = torch.empty(world * n, dtype=dtype)
        dist.all_gather_into_tensor(flat, value(rank, n, dtype))
        expect(flat, torch.cat([value(r, n, dtype) for r in range(world)]), "all_gather_into_tensor")

        out = torch.empty(n, dtype=dtype)
        dist.reduce_scatter(out, [value(rank + j, n, dtype) for j in range(world)])
        want = sum(value(r + rank, n, torch.float64) for r in range(world)).to(dtype)
        expect(out, want, f"reduce_scatter {dtype}")
        out = torch.empty(n, dtype=dtype)
        dist.reduce_scatter_tensor(out, torch.cat([value(rank + j, n, dtype)
                                                  for j in range(world)]))
        expect(out, want, f"reduce_scatter_tensor {dtype}")

    # all_to_all_single, equal splits: block j of rank r is 100 r + 10 j + k.
    def block(src, dst, rows):
        return torch.arange(rows * 2, dtype=torch.int64).reshape(rows, 2) + 100 * src + 10 * dst

    inp = torch.cat([block(rank, j, 2) for j in range(world)])
    out = torch.empty_like(inp)
    dist.all_to_all_single(out, inp)
    expect(out, torch.cat([block(s, rank, 2) for s in range(world)]), "all_to_all_single equal")

    # Uneven: rank r sends (r + j) % 3 + 1 rows to rank j.
    def rows(src, dst):
        return (src + dst) % 3 + 1

    in_splits = [rows(rank, j) for j in range(world)]
    out_splits = [rows(s, rank) for s in range(world)]
    inp = torch.cat([block(rank, j, rows(rank, j)) for j in range(world)])
    out = torch.empty(sum(out_splits), 2, dtype=torch.int64)
    dist.all_to_all_single(out, inp, out_splits, in_splits)
    expect(out, torch.cat([block(s, rank, rows(s, rank)) for s in range(world)]),
           "all_to_all_single uneven")

    outs = [torch.empty(rows(s, rank), 2, dtype=torch.int64) for s in range(world)]
    dist.all_to_all(outs, [block(rank, j, rows(rank, j)) for j in range(world)])
    for s in range(world):
        expect(outs[s], block(s, rank, rows(s, rank)), f"all_to_all from {s}")

    # Ring of send/recv.
    right, left = (rank + 1) % world, (rank - 1) % world
    got = torch.empty(n, dtype=torch.float32)
    reqs = [dist.isend(value(rank, n, torch.float32), right),
            dist.irecv(got, left)]
    for q in reqs:
        q.wait()
    expect(got, value(left, n, torch.float32), "send/recv")

    dist.barrier()

    # Async work: the Future holds the output, and then() chains on it (as DDP's hooks do).
    t = value(rank, n, torch.float32)
    fut = dist.all_reduce(t, async_op=True).get_future().then(lambda f: f.value()[0] * 2)
    expect(fut.wait(), 2 * reduce_ref(world, n, torch.float32, R.SUM), "future")

    # A sub-group of the even ranks; the other ranks are not members.
    evens = list(range(0, world, 2))
    group = dist.new_group(evens, backend="paddle")
    if rank in evens:
        t = value(rank, n, torch.int64)
        dist.all_reduce(t, group=group)
        want = sum(value(r, n, torch.int64) for r in evens)
        expect(t, want, "sub-group all_reduce")
    dist.barrier()
    check_more_ops(rank, world)


def bits(rank, n, dtype):
    """Distinct bit patterns per (rank, index); bool: True where (rank + index) % 3 != 0."""
    if dtype == torch.bool:
        return (torch.arange(n) + rank) % 3 != 0
    return ((torch.arange(n) * 37 + rank * 91 + 5) % 127).to(dtype)


def fold_bits(world, n, dtype, op):
    acc = bits(0, n, dtype)
    fn = {R.BAND: torch.bitwise_and, R.BOR: torch.bitwise_or, R.BXOR: torch.bitwise_xor}[op]
    for r in range(1, world):
        acc = fn(acc, bits(r, n, dtype))
    return acc


def check_more_ops(rank, world):
    """gather, scatter, all_gather_coalesced, BAND/BOR/BXOR, uneven reduce_scatter and recv from
    any source: exact expected values, and the same calls on a gloo group where gloo has them."""
    n = 7
    gloo = dist.new_group(backend="gloo")
    for dtype in [torch.float32, torch.int64, torch.bfloat16]:
        for root in (0, world - 1):
            got = {}
            for name, group in (("paddle", None), ("gloo", gloo)):
                if dtype == torch.bfloat16 and name == "gloo":
                    continue  # gloo 1.13 has no bfloat16 gather
                outs = [torch.empty(n, dtype=dtype) for _ in range(world)] if rank == root else None
                dist.gather(value(rank, n, dtype), outs, dst=root, group=group)
                if rank == root:
                    for r in range(world):
                        expect(outs[r], value(r, n, dtype), f"{name} gather {dtype} from {r}")
                    got[name] = outs
                ins = [value(10 + j, n, dtype) for j in range(world)] if rank == root else None
                # Ours takes a non-contiguous output (staged); gloo 1.13 writes such a one as
                # if it were contiguous, so it gets a contiguous one.
                out = torch.empty(2 * n, dtype=dtype)[::2] if group is None else torch.empty(
                    n, dtype=dtype)
                dist.scatter(out, ins, src=root, group=group)
                expect(out, value(10 + rank, n, dtype), f"{name} scatter {dtype} root {root}")

    # all_gather_coalesced: two tensors of different shapes and one dtype.
    for name, group in (("paddle", None), ("gloo", gloo)):
        ins = [value(rank, 4, torch.float64), value(rank, 6, torch.float64).reshape(2, 3)]
        outs = [[torch.empty(4, dtype=torch.float64), torch.empty(2, 3, dtype=torch.float64)]
                for _ in range(world)]
        dist.all_gather_coalesced(outs, ins, group=group)
        for r in range(world):
            expect(outs[r][0], value(r, 4, torch.float64), f"{name} all_gather_coalesced {r}.0")
            expect(outs[r][1], value(r, 6, torch.float64).reshape(2, 3),
                   f"{name} all_gather_coalesced {r}.1")

    # Bitwise reductions on every integer dtype and bool, against gloo on the same inputs.
    for dtype in INTS + [torch.bool]:
        for op in (R.BAND, R.BOR, R.BXOR):
            want = fold_bits(world, n, dtype, op)
            for name, group in (("paddle", None), ("gloo", gloo)):
                if dtype == torch.bool and name == "gloo":
                    continue  # gloo 1.13 has no bool reductions
                t = bits(rank, n, dtype)
                dist.all_reduce(t, op=op, group=group)
                expect(t, want, f"{name} all_reduce {dtype} {op}")
                t = bits(rank, n, dtype)
                dist.reduce(t, dst=1, op=op, group=group)
                if rank == 1:
                    expect(t, want, f"{name} reduce {dtype} {op}")
    ts = [bits(rank, 3, torch.int32), bits(rank + 1, 4, torch.int32).reshape(2, 2)]
    dist.all_reduce_coalesced(ts, op=R.BXOR)
    expect(ts[0], fold_bits(world, 3, torch.int32, R.BXOR), "coalesced BXOR 0")
    want = bits(1, 4, torch.int32)
    for r in range(1, world):
        want = want ^ bits(r + 1, 4, torch.int32)
    expect(ts[1].reshape(-1), want, "coalesced BXOR 1")
    out = torch.empty(n, dtype=torch.int64)
    dist.reduce_scatter(out, [bits(rank + j, n, torch.int64) for j in range(world)], op=R.BOR)
    want = bits(rank, n, torch.int64)
    for r in range(1, world):
        want = want | bits(r + rank, n, torch.int64)
    expect(out, want, "reduce_scatter BOR")
    raises(lambda: dist.reduce(torch.ones(3, dtype=torch.float64), dst=0, op=R.BOR),
           "BOR with non-integral dtype Double", "BOR on float64")

    # Uneven reduce_scatter: block j has j + 2 elements (rank j's output); every op.
    for op in (R.SUM, R.MAX, R.PRODUCT):
        ins = [value(rank + j, j + 2, torch.int32) for j in range(world)]
        out = torch.empty(rank + 2, dtype=torch.int32)
        dist.reduce_scatter(out, ins, op=op)
        stack = torch.stack([value(r + rank, rank + 2, torch.int64) for r in range(world)])
        want = {R.SUM: stack.sum(0), R.MAX: stack.max(0).values, R.PRODUCT: stack.prod(0)}[op]
        expect(out, want.to(torch.int32), f"uneven reduce_scatter {op}")
    raises(lambda: dist.reduce_scatter(torch.empty(5), [torch.ones(4)] * world),
           "this rank's block", "reduce_scatter output size")

    # Receive from any source: refused at once, naming the way out; the group still works.
    raises(lambda: dist.recv(torch.empty(2)), "pass src=", "recv from any source")
    t = torch.ones(2)
    dist.all_reduce(t)
    expect(t, torch.full((2,), float(world)), "after the refused recv")


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))

    def forward(self, x):
        return self.body(x)


def train(model, rank, steps=5):
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    gen = torch.Generator().manual_seed(1234 + rank)
    for _ in range(steps):
        x = torch.randn(16, 8, generator=gen)
        y = torch.randn(16, 4, generator=gen)
        opt.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        opt.step()
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def check_ddp(rank, world):
    gloo = dist.new_group(backend="gloo")
    torch.manual_seed(rank)  # different initial replicas: DDP must broadcast rank 0's
    ours = train(nn.parallel.DistributedDataParallel(Net()), rank)
    torch.manual_seed(rank)
    theirs = train(nn.parallel.DistributedDataParallel(Net(), process_group=gloo), rank)
    every = [torch.empty_like(ours) for _ in range(world)]
    dist.all_gather(every, ours)
    for r in range(world):
        expect(every[r], ours, f"DDP parameters of rank {r} vs {rank}")
    if not torch.allclose(ours, theirs, rtol=1e-5, atol=1e-6):
        raise AssertionError(f"paddle vs gloo DDP: max diff {(ours - theirs).abs().max()}")
    print("max |paddle - gloo| =", (ours - theirs).abs().max().item())


def check_bad_input(rank, world):
    outs = [torch.empty(4) for _ in range(world - 1)]
    raises(lambda: dist.all_gather(outs, torch.ones(4)), f"expects {world} output", "list size")
    outs = [torch.empty(5) for _ in range(world)]
    raises(lambda: dist.all_gather(outs, torch.ones(4)), "output 0 is Float x 5 but the input",
           "output size")
    raises(lambda: dist.all_to_all_single(torch.empty(4), torch.ones(4), [1] * world,
                                          [3] * world), "add up to", "alltoall splits")
    raises(lambda: dist.all_gather_into_tensor(torch.empty(3), torch.ones(2)), "allgather",
           "all_gather_into_tensor size")
    # Ranks that disagree on the size: with PADDLE_DEBUG_CHECKS=1 every rank fails, no hang.
    start = time.monotonic()
    raises(lambda: dist.all_reduce(torch.ones(4 + rank)), "rank", "size mismatch across ranks")
    if time.monotonic() - start > 5:
        raise AssertionError("the mismatch took more than 5 s to report")
    # The group still works afterwards.
    t = torch.ones(3)
    dist.all_reduce(t)
    expect(t, torch.full((3,), float(world)), "after the mismatch")


def check_dead_peer(rank, world):
    t = torch.ones(4)
    dist.all_reduce(t)
    if rank == world - 1:
        os._exit(17)  # dies without closing anything politely
    start = time.monotonic()
    raises(lambda: [dist.all_reduce(torch.ones(1 << 16)) for _ in range(50)], "rank",
           "collective after a peer died")
    waited = time.monotonic() - start
    if waited > TIMEOUT_S + 2:
        raise AssertionError(f"took {waited:.1f}s, timeout {TIMEOUT_S}s")
    print(f"failed after {waited:.2f}s", flush=True)
    os._exit(0)  # the group is poisoned; skip the orderly teardown


def check_launched(rank, world):
    t = torch.full((5,), float(rank + 1))
    dist.all_reduce(t)
    expect(t, torch.full((5,), world * (world + 1) / 2), "all_reduce under a launcher")
    dist.barrier()


# Short for dead_peer (the bound being tested), roomy for the rest on a loaded 2-core machine.
TIMEOUT_S = float(os.environ.get("TORCH_TEST_TIMEOUT_S", "30"))
SCENARIOS = {"ops": check_ops, "ddp": check_ddp, "bad_input": check_bad_input,
             "dead_peer": check_dead_peer, "launched": check_launched}


def main():
    scenario = sys.argv[1]
    if len(sys.argv) > 2:
        rank, world = int(sys.argv[2]), int(sys.argv[3])
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=sys.argv[4])
    else:
        rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    torch.set_num_threads(1)
    dist.init_process_group("paddle", init_method="env://", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=TIMEOUT_S))
    SCENARIOS[scenario](rank, world)
    dist.destroy_process_group()
    print("OK", flush=True)


if __name__ == "__main__":
    main()
