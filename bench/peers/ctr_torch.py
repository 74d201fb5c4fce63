#!/usr/bin/python3
"""PyTorch peer of examples/ctr.cc: the same model, data files, batch, optimizer and epochs.

  tools/make-ctr-data --out=/tmp/ctr --max-vocab=100000
  /usr/bin/python3 bench/peers/ctr_torch.py --data=/tmp/ctr              # one process
  bazel run //tools:launch -- --nproc=2 /usr/bin/python3 bench/peers/ctr_torch.py --data=/tmp/ctr

The 26 fields' rows come from one nn.EmbeddingBag(sparse=True) (each field id its own bag of one,
ids offset per field as examples/ctr_data.h does), concatenated with the 13 dense features, then
Linear(26*dim + 13 -> hidden), ReLU, Linear(hidden -> hidden/2), ReLU, Linear(-> 2) and the
cross-entropy of the two logits (= binary cross-entropy of sigmoid(l1 - l0)), trained by plain SGD
(sparse gradients for the table). Started with WORLD_SIZE set it trains under
DistributedDataParallel over gloo, which allreduces the sparse table gradient as a sparse tensor;
--batch is the global batch, split evenly.

Every epoch, rank 0 prints the exact test AUC (all ranks' shares gathered and ranked) and the log
loss over all test samples; the last line is JSON with the keys of examples/ctr: epoch, auc,
log_loss, best_auc, samples_per_s (training steps only, all ranks' samples), world_size.
Threads: OMP/OPENBLAS/MKL_NUM_THREADS are set to --threads before torch loads.
"""
import argparse
import json
import os
import sys
import time


def parse(argv):
    p = argparse.ArgumentParser(description="PyTorch peer of examples/ctr.cc")
    p.add_argument("--data", required=True)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--lr", type=float, default=0.5)
    p.add_argument("--dim", type=int, default=16)
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--init-scale", type=float, default=0.3)
    p.add_argument("--train-samples", type=int, default=0)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--threads", type=int, default=1)
    return p.parse_args(argv)


ARGS = parse(sys.argv[1:])
for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[var] = str(ARGS.threads)

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.nn.functional as F  # noqa: E402

MAGIC = b"PDCTR01\0"


def read_split(path):
    """Note [CTR data layout] in examples/ctr_data.h."""
    with open(path, "rb") as f:
        raw = f.read()
    if len(raw) < 24 or raw[:8] != MAGIC:
        raise SystemExit(f"ctr_torch: '{path}' is not a PDCTR01 file")
    nc, nd = np.frombuffer(raw, "<u4", 2, 8)
    (n,) = np.frombuffer(raw, "<u8", 1, 16)
    vocab = np.frombuffer(raw, "<u8", int(nc), 24).astype(np.int64)
    header = 24 + 8 * int(nc)
    rec = np.dtype([("ids", "<u4", (int(nc),)), ("dense", "<f4", (int(nd),)), ("label", "<f4")])
    if len(raw) != header + int(n) * rec.itemsize:
        raise SystemExit(f"ctr_torch: '{path}' is {len(raw)} bytes, header says {n} records")
    r = np.frombuffer(raw, rec, int(n), header)
    if (r["ids"] >= vocab[None, :]).any():
        raise SystemExit(f"ctr_torch: '{path}' has an id outside its field's vocabulary")
    offsets = np.concatenate([[0], np.cumsum(vocab)[:-1]])
    ids = torch.from_numpy(r["ids"].astype(np.int64) + offsets[None, :])
    dense = torch.from_numpy(r["dense"].copy())
    return ids, dense, torch.from_numpy(r["label"].astype(np.int64)), int(vocab.sum())


class CtrModel(torch.nn.Module):
    def __init__(self, rows, fields, num_dense, dim, hidden, init_scale):
        super().__init__()
        self.fields, self.dim = fields, dim
        self.table = torch.nn.EmbeddingBag(rows, dim, mode="sum", sparse=True)
        torch.nn.init.uniform_(self.table.weight, -init_scale, init_scale)
        self.fc1 = torch.nn.Linear(fields * dim + num_dense, hidden)
        self.fc2 = torch.nn.Linear(hidden, hidden // 2)
        self.out = torch.nn.Linear(hidden // 2, 2)

    def forward(self, ids, dense):
        n = ids.shape[0]
        e = self.table(ids.reshape(n * self.fields, 1)).reshape(n, self.fields * self.dim)
        h = F.relu(self.fc1(torch.cat([e, dense], dim=1)))
        return self.out(F.relu(self.fc2(h)))


def exact_auc(scores, labels):
    order = np.argsort(scores, kind="stable")
    s = scores[order]
    starts = np.flatnonzero(np.r_[True, s[1:] != s[:-1]])
    ends = np.r_[starts[1:], len(s)]
    ranks = np.empty(len(s))
    ranks[order] = np.repeat((starts + ends + 1) / 2.0, ends - starts)
    pos = labels == 1
    p, q = int(pos.sum()), int((~pos).sum())
    return float((ranks[pos].sum() - p * (p + 1) / 2.0) / (p * q))


def main():
    torch.set_num_threads(ARGS.threads)
    torch.manual_seed(ARGS.seed)
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    if world > 1:
        dist.init_process_group("gloo")
    if ARGS.batch % world:
        raise SystemExit(f"ctr_torch: --batch={ARGS.batch} is not a multiple of {world} workers")
    ids, dense, labels, rows = read_split(os.path.join(ARGS.data, "train.bin"))
    t_ids, t_dense, t_labels, _ = read_split(os.path.join(ARGS.data, "test.bin"))
    with open(os.path.join(ARGS.data, "manifest.json")) as f:
        best_auc = json.load(f)["best_auc"]
    if ARGS.train_samples > 0:
        ids, dense, labels = ids[:ARGS.train_samples], dense[:ARGS.train_samples], \
            labels[:ARGS.train_samples]
    model = CtrModel(rows, ids.shape[1], dense.shape[1], ARGS.dim, ARGS.hidden, ARGS.init_scale)
    net = torch.nn.parallel.DistributedDataParallel(model) if world > 1 else model
    opt = torch.optim.SGD(net.parameters(), lr=ARGS.lr)
    local = ARGS.batch // world
    n = ids.shape[0]
    per_rank = (n + world - 1) // world
    last = None
    for epoch in range(ARGS.epochs):
        g = torch.Generator()
        g.manual_seed(ARGS.seed * 1000 + epoch)
        perm = torch.randperm(n, generator=g)
        perm = torch.cat([perm, perm[:per_rank * world - n]])[rank::world]  # padded, as ours
        model.train()
        start = time.perf_counter()
        loss_sum, steps = 0.0, 0
        for first in range(0, per_rank, local):
            idx = perm[first:first + local]
            opt.zero_grad()
            loss = F.cross_entropy(net(ids[idx], dense[idx]), labels[idx])
            loss.backward()
            opt.step()
            loss_sum += loss.item()
            steps += 1
        if world > 1:
            dist.barrier()
        seconds = time.perf_counter() - start
        rate = steps * local * world / seconds
        with torch.no_grad():  # every rank scores its contiguous share of the test split
            share = (t_ids.shape[0] + world - 1) // world
            sl = slice(rank * share, min(t_ids.shape[0], (rank + 1) * share))
            logits = model(t_ids[sl], t_dense[sl])
            margin = (logits[:, 1] - logits[:, 0]).double()
            y = t_labels[sl]
            signed = torch.where(y == 1, margin, -margin)
            loss_total = torch.tensor([F.softplus(-signed).sum().item(), float(len(y))],
                                      dtype=torch.float64)
            scores = [torch.sigmoid(margin)]
            ys = [y]
            if world > 1:
                dist.all_reduce(loss_total)
                # gloo gathers equal sizes: pad each share to `share`, label -1 marks padding
                pad = share - len(y)
                s_pad = torch.cat([torch.sigmoid(margin), torch.zeros(pad, dtype=torch.float64)])
                y_pad = torch.cat([y, torch.full((pad,), -1, dtype=torch.int64)])
                scores = [torch.zeros(share, dtype=torch.float64) for _ in range(world)]
                ys = [torch.zeros(share, dtype=torch.int64) for _ in range(world)]
                dist.all_gather(scores, s_pad)
                dist.all_gather(ys, y_pad)
        all_y = torch.cat(ys).numpy()
        all_s = torch.cat(scores).numpy()[all_y >= 0]
        all_y = all_y[all_y >= 0]
        auc = exact_auc(all_s, all_y)
        log_loss = float(loss_total[0] / loss_total[1])
        if rank == 0:
            print(f"epoch {epoch + 1}/{ARGS.epochs}  train_loss {loss_sum / steps:.4f}  test auc "
                  f"{auc:.4f} (best {best_auc:.4f})  log_loss {log_loss:.4f}  samples/s "
                  f"{rate:.0f}  epoch_time {seconds:.2f}s", flush=True)
        last = {"epoch": epoch + 1, "auc": round(auc, 5), "log_loss": round(log_loss, 5),
                "best_auc": best_auc, "samples_per_s": round(rate, 1), "world_size": world,
                "peer": "torch", "train_loss": round(loss_sum / steps, 5)}
    if world > 1:
        dist.barrier()
        dist.destroy_process_group()
    if rank == 0:
        print(json.dumps(last))
    return 0


if __name__ == "__main__":
    sys.exit(main())
